"""Shared helpers for the two-phase-commit protocol tests (tests/unit, tests/integration/test_protocol_*).

* writing parquet files of given rows into a transaction's staging dir (local or S3);
* what a reader sees (:func:`visible_rows`, :func:`assert_exact_version`): from tests/protocol_readers.py,
  re-exported here;
* :func:`leftovers` and :func:`log_problems`: what must be gone / must hold once the table is idle;
* a child-process driver (``python protocol_helpers.py '<json spec>'``) that runs a small script of
  protocol operations, so that crash tests can really kill a process (``os._exit`` via a failpoint) and
  concurrency tests can race real processes. Every operation prints one ``EO-RESULT {json}`` line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence



class _NoPandas:
    """Meta-path finder that hides pandas: pyarrow imports it (1 s) for nothing in a child process."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is hidden in protocol test child processes")
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, _NoPandas())
HERE = Path(__file__).resolve().parent
PLUGINS = HERE.parent / "plugins"
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from exactly_once import Interval, State, TwoPhaseCommitSink, TxnRef  # noqa: E402
from exactly_once.errors import ExactlyOnceError  # noqa: E402
from exactly_once.ids import parse_txn_name, version_of  # noqa: E402
from exactly_once.storage import is_hidden  # noqa: E402

import delta_helpers as delta  # noqa: E402
from delta_helpers import is_delta  # noqa: E402
from protocol_readers import (Row, _read_rows, assert_exact_version, exact_reader_rows, is_local,  # noqa: E402,F401
                              manifest_of, null_first, plain_reader_rows, refresh, rows_checksum, sha256_of,
                              visible_rows)  # re-exported: the tests import them from here

PIPELINE, SINK = "p", "t"
RESULT_PREFIX = "EO-RESULT "
CRASH_EXIT = 137

# the fixture below is defined only under pytest (a child process needs neither pytest nor conftest)
pytest = sys.modules.get("pytest")


# --------------------------------------------------------------------------------------------- fixture
if pytest is not None:
    @pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
    def table_url(request, tmp_path):
        """conftest's ``table_url`` (a local table and one on the loopback S3 server), with the S3
        case marked ``s3`` so that ``-m "not s3"`` deselects it. Import it into a test module."""
        if request.param == "local":
            return str(tmp_path / "warehouse" / "t")
        from conftest import make_bucket

        s3 = request.getfixturevalue("s3_server")
        return f"s3://{make_bucket(s3)}/warehouse/t"


def open_sink(url: str, **kwargs: Any) -> TwoPhaseCommitSink:
    """The sink of the table at ``url``; ``target={"kind": "database"|"redis", ...}`` (JSON, so a child
    process gets it too) publishes into that target instead of files."""
    spec = kwargs.pop("target", None)
    if isinstance(spec, dict):
        from exactly_once.targets import DatabaseTarget, RedisTarget

        spec = dict(spec)
        kind = spec.pop("kind")
        kwargs["target"] = (DatabaseTarget if kind == "database" else RedisTarget)(**spec)
    elif spec is not None:
        kwargs["target"] = spec
    return TwoPhaseCommitSink.at(url, pipeline=kwargs.pop("pipeline", PIPELINE),
                                 sink=kwargs.pop("sink", SINK), **kwargs)


# ------------------------------------------------------------------------------------------ writing
def make_rows(tag: str, n: int, start: int = 0) -> list[Row]:
    """``n`` distinct rows tagged ``tag`` (so two versions never share a row)."""
    return [(start + i, f"{tag}-{start + i}") for i in range(n)]


def split(rows: Sequence[Row], parts: int) -> list[list[Row]]:
    """``rows`` dealt round-robin into ``parts`` files (some may be empty)."""
    return [list(rows[i::parts]) for i in range(parts)]


def write_parquet(sink: TwoPhaseCommitSink, path: str, rows: Iterable[Row]) -> None:
    """Write a parquet file (columns ``k: int64, v: string``) of ``rows`` to a storage path."""
    rows = list(rows)
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()),
                      "v": pa.array([r[1] for r in rows], pa.string())})
    sink.storage.makedirs(os.path.dirname(path))
    with sink.storage.open(path, "wb") as f:
        pq.write_table(table, f)


def write_output(sink: TwoPhaseCommitSink, txn: TxnRef, files: dict[str, Sequence[Sequence[Row]]],
                 *, prefix: str = "part") -> None:
    """Write ``{partition: [rows of file 0, rows of file 1, ...]}`` under ``sink.data_dir(txn)``, plus a
    state file outside ``data/`` (like a stateful job's checkpoint) and a hidden ``_SUCCESS`` marker."""
    for partition, per_file in files.items():
        base = sink.storage.join(sink.data_dir(txn), partition)
        for i, rows in enumerate(per_file):
            write_parquet(sink, sink.storage.join(base, f"{prefix}-{i:05d}.parquet"), rows)
        with sink.storage.open(sink.storage.join(base, "_SUCCESS"), "wb") as f:
            f.write(b"")
    state = sink.storage.join(sink.staging_dir(txn), "state", "counts.json")
    sink.storage.makedirs(os.path.dirname(state))
    with sink.storage.open(state, "wb") as f:
        f.write(json.dumps({k: sum(len(r) for r in v) for k, v in files.items()}).encode())


def commit_version(sink: TwoPhaseCommitSink, interval: Interval,
                   files: dict[str, Sequence[Sequence[Row]]]) -> TxnRef:
    """begin + write + pre_commit + commit in this process; returns the committed transaction."""
    txn = sink.begin(interval)
    write_output(sink, txn, files)
    sink.pre_commit(txn)
    sink.commit(txn)
    return txn


# ------------------------------------------------------------------------------- idle-state checks
def leftovers(sink: TwoPhaseCommitSink) -> list[str]:
    """Everything that must not exist once the table is idle: staging dirs, temp files and links,
    checkpoints of transactions that did not commit, and (S3) data files no manifest names."""
    refresh(sink)
    st, table = sink.storage, sink.table
    found = [f"_staging/{n}" for n in st.list_names(st.join(sink.home, "_staging"))]
    for name in st.list_names(st.join(sink.home, "_checkpoints")):
        parsed = parse_txn_name(name)
        if parsed is None:
            found.append(f"_checkpoints/{name} (not a transaction)")
            continue
        status = sink.log.status(Interval.from_token(parsed[0]), parsed[1])
        if status.state is not State.COMMITTED:
            found.append(f"_checkpoints/{name} ({status.state.value})")
    if is_delta(sink):
        found += delta.uncommitted_version_dirs(sink)
    elif not is_local(sink):
        found += stray_data_files(sink)
    if is_local(sink):
        for root in (table, sink.home):
            for dirpath, dirnames, filenames in os.walk(root):
                for name in dirnames + filenames:
                    if name.startswith(".tmp-") or (name.startswith(".") and name.endswith(".link")):
                        found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def stray_data_files(sink: TwoPhaseCommitSink, *, grace: bool = True) -> list[str]:
    """S3: non-hidden files inside partitions that the partition's manifest does not name (a plain
    listing reader would see them). With ``grace``, files of a committed version older than the live one
    are allowed: superseded versions are kept until gc (the grace period for exact readers)."""
    st, table = sink.storage, sink.table
    live_by_dir: dict[str, set[str]] = {}
    stray = []
    for entry in st.walk_files(table):
        segs = entry.rel.split("/")
        if any(is_hidden(s) for s in segs):
            continue
        part = "/".join(segs[:-1])
        if part not in live_by_dir:
            live_by_dir[part] = set(sink.live_files(part)) if part else set()
        if st.join(table, entry.rel) in live_by_dir[part]:
            continue
        if grace and _superseded_committed(sink, version_of(segs[-1]), sink.live_version(part) if part else None):
            continue
        stray.append(entry.rel)
    return stray


def _superseded_committed(sink: TwoPhaseCommitSink, version: str | None, live: str | None) -> bool:
    parsed, live_parsed = parse_txn_name(version or ""), parse_txn_name(live or "")
    if not parsed or not live_parsed or parsed[0] != live_parsed[0] or parsed[1] >= live_parsed[1]:
        return False
    return sink.log.status(Interval.from_token(parsed[0]), parsed[1]).state is State.COMMITTED


def log_problems(sink: TwoPhaseCommitSink, interval: Interval, *, idle: bool = True,
                 statuses: dict[int, Any] | None = None) -> list[str]:
    """What is wrong with the log of ``interval`` and the live versions it governs (``[]`` = consistent).

    Every epoch has an open record; the outcome is COMMITTED or ABORTED; committed epochs were
    pre-committed; ``published`` only for COMMITTED; the live version of every partition a committed
    epoch wrote is a committed epoch (or none yet, while none of them is published), and no committed
    epoch that wrote the partition and is newer than it has been published. When ``idle``: every committed epoch is published and no committed epoch
    that wrote the partition is newer than the live one.
    """
    refresh(sink)
    problems = []
    statuses = sink.status(interval) if statuses is None else statuses
    committed: dict[str, list[int]] = {}
    for epoch, st in statuses.items():
        recs = st.records
        if "open" not in recs and "outcome" in recs and (st.state is State.ABORTED or st.published):
            continue  # compacted by gc: only the outcome/published tombstones remain
        if "open" not in recs:
            problems.append(f"e{epoch}: no open record")
        outcome = recs.get("outcome")
        if outcome is not None and outcome.get("state") not in (State.COMMITTED.value, State.ABORTED.value):
            problems.append(f"e{epoch}: bad outcome {outcome}")
        if st.published and st.state is not State.COMMITTED:
            problems.append(f"e{epoch}: published but {st.state.value}")
        if st.state is State.COMMITTED:
            if st.manifest is None:
                problems.append(f"e{epoch}: committed without a manifest")
                continue
            if sink.require_validation and not (st.validation or {}).get("passed"):
                problems.append(f"e{epoch}: committed without a passing validation")
            if idle and not st.published:
                problems.append(f"e{epoch}: committed but never published")
            for part in st.manifest.partitions:
                committed.setdefault(part, []).append(epoch)
    for part, epochs in committed.items():
        live = sink.live_version(part)
        if live is None and is_delta(sink):  # Delta has no empty partition: the interval's version dropped it
            live = delta.live_version_of_dropped(sink, interval, part, statuses)
        if live is None and not idle and not any(statuses[e].published for e in epochs):
            continue  # decided, not yet published, nothing older: readers still see no version
        parsed = parse_txn_name(live or "")
        if parsed is None or parsed[0] != interval.token:
            problems.append(f"{part}: live version {live} is not a committed epoch of {interval.token}")
            continue
        live_epoch = parsed[1]
        if live_epoch not in statuses or statuses[live_epoch].state is not State.COMMITTED:
            problems.append(f"{part}: live epoch {live_epoch} is not committed (committed: {epochs})")
        newer = [e for e in epochs if e > live_epoch and (idle or statuses[e].published)]
        if newer:
            problems.append(f"{part}: live epoch {live_epoch} but newer committed epochs {newer}")
    return problems


def log_consistent(sink: TwoPhaseCommitSink, interval: Interval, *, idle: bool = True) -> bool:
    return not log_problems(sink, interval, idle=idle)


# ------------------------------------------------------------------------------------- failpoints
@contextmanager
def failpoints(spec: str | None) -> Iterator[None]:
    """Set ``EO_FAILPOINTS`` for the duration of the block (in this process)."""
    old = os.environ.get("EO_FAILPOINTS")
    if spec:
        os.environ["EO_FAILPOINTS"] = spec
    else:
        os.environ.pop("EO_FAILPOINTS", None)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("EO_FAILPOINTS", None)
        else:
            os.environ["EO_FAILPOINTS"] = old


# ------------------------------------------------------------------------------ child-process driver
def run_child(url: str, interval: Interval, ops: list[dict[str, Any]], *, failpoints_spec: str | None = None,
              timeout: float = 120, wait: bool = True, sink_kwargs: dict[str, Any] | None = None) -> Any:
    """Run ``ops`` in a fresh Python process against the table at ``url``.

    Returns ``(returncode, [result dicts], stderr)`` or, with ``wait=False``, the Popen (finish it with
    :func:`finish_child`). The child inherits this process's environment (the S3 endpoint and
    credentials exported by the ``s3_server`` fixture), plus ``EO_FAILPOINTS`` if given.
    """
    env = dict(os.environ)
    env.pop("EO_FAILPOINTS", None)
    if failpoints_spec:
        env["EO_FAILPOINTS"] = failpoints_spec
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), str(HERE), env.get("PYTHONPATH", "")])
    # children start often: let them cache bytecode (outside the repo) instead of recompiling botocore
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "eo-protocol-tests-pycache")
    spec = {"url": url, "interval": interval.token, "ops": ops, "sink_kwargs": sink_kwargs or {}}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if not wait:
        return proc
    return finish_child(proc, timeout)


def finish_child(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"child timed out; stderr:\n{err}")
    results = [json.loads(line[len(RESULT_PREFIX):]) for line in out.splitlines()
               if line.startswith(RESULT_PREFIX)]
    return proc.returncode, results, err


def _barrier(directory: str, name: str, n: int, timeout: float = 60.0) -> None:
    """Arrive at barrier ``name`` and wait until ``n`` processes arrived (files in ``directory``)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.{os.getpid()}"), "x"):
        pass
    deadline = time.time() + timeout
    while sum(1 for f in os.listdir(directory) if f.startswith(name + ".")) < n:
        if time.time() > deadline:
            raise TimeoutError(f"barrier {name}: not all {n} processes arrived")
        time.sleep(0.002)


def _child_main(spec: dict[str, Any]) -> int:
    """Interpret ``spec["ops"]``. After an ExactlyOnceError the remaining ops are skipped except
    barriers (so that racing siblings are not left waiting) and a final ``abort`` (teardown)."""
    sink = open_sink(spec["url"], **spec.get("sink_kwargs", {}))
    interval = Interval.from_token(spec["interval"])
    txn: TxnRef | None = None
    failed = False

    def emit(**kw: Any) -> None:
        sys.stdout.write(RESULT_PREFIX + json.dumps(kw, default=str) + "\n")
        sys.stdout.flush()

    for op in spec["ops"]:
        name = op["op"]
        if name == "barrier":
            _barrier(op["dir"], op["name"], op["n"])
            continue
        if failed and name != "abort":
            emit(op=name, skipped=True)
            continue
        try:
            if name == "begin":
                txn = sink.begin(interval)
                result: Any = txn.epoch
            elif name == "use":
                txn = sink.ref(interval, op["epoch"])
                result = txn.epoch
            elif name == "write":
                assert txn is not None
                try:
                    write_output(sink, txn, {p: [[tuple(r) for r in f] for f in fs]
                                             for p, fs in op["files"].items()})
                    result = "written"
                except OSError as exc:  # a fenced writer whose staging dir was removed under it
                    result = f"write failed: {type(exc).__name__}"
            elif name == "pre_commit":
                assert txn is not None
                result = sink.pre_commit(txn).files
            elif name == "validate":
                assert txn is not None
                result = sink.record_validation(txn, op["passed"], {})
            elif name == "commit":
                assert txn is not None
                result = sink.commit(txn).partitions
            elif name == "abort":
                if txn is None:
                    emit(op=name, skipped=True)
                    continue
                result = sink.abort(txn).value
            elif name == "recover":
                result = sink.recover(interval, abort_open=op.get("abort_open", False))
            else:
                raise ValueError(f"unknown op {name!r}")
            emit(op=name, ok=True, result=result, epoch=txn.epoch if txn else None)
        except ExactlyOnceError as exc:
            failed = True
            emit(op=name, ok=False, error=type(exc).__name__, message=str(exc),
                 epoch=txn.epoch if txn else None)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(json.loads(sys.argv[1])))


# -------------------------------------------------------------------------- forced interleavings
def interleave(monkeypatch: Any, target: Any, attr: str, when: Any, other: Any) -> dict[str, Any]:
    """Make ``target.attr`` run ``other()`` (another process's whole step) the first time it is called
    with arguments for which ``when(*args)`` is true, then do its own work - a deterministic replay of
    the interleaving in which the other process won the race inside this step. Returns a dict whose
    ``"fired"`` tells whether the interleaving happened and ``"result"`` holds what ``other`` returned."""
    real = getattr(target, attr)
    state: dict[str, Any] = {"fired": False}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not state["fired"] and when(*args):
            state["fired"] = True
            state["result"] = other()
        return real(*args, **kwargs)

    monkeypatch.setattr(target, attr, wrapper)
    return state
