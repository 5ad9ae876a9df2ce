"""Helpers for the pipeline-level fault tests (tests/integration/test_fault_matrix.py, test_bad_inputs.py).

* :func:`stage_write` (from ``pv_standin``, re-exported) - the ``write`` task without a JVM:
  ``spark_jobs/pv_counts.py``'s output contract, computed by the independent oracle
  ``tests/reference_pv.py``, with ``failpoint("write.partial")`` where the Spark job has it.
* :class:`Driver` - drives :class:`exactly_once.protocol.pipeline.IntervalRun` the way Airflow's tasks do: one
  phase (task) at a time, each either **in this process** or in a **child process** (so that a ``crash``
  failpoint - ``os._exit(137)`` - really kills it). The only thing handed from task to task is what XCom
  carries: the transaction dict and the spec URL.
* Child processes are forked from a *forkserver* that imported the heavy modules (Great Expectations,
  pyarrow, s3fs, airflow.sdk) once, so a child costs milliseconds instead of the 10-30 s a cold import of
  GX takes on a loaded 2-core box. A child is still a separate process: nothing of the parent's memory
  (s3fs caches, open handles) is shared with it, ``os._exit`` ends it, and its exit code is observed.
* Readers and checks: :func:`visible_rows` (local: ``pyarrow.dataset`` with hive partitioning AND the
  exact reader must agree; S3: ``sink.live_files``), :func:`rows_checksum`, :func:`epoch_problems`
  (every epoch ended COMMITTED+published or ABORTED), plus ``protocol_helpers.leftovers`` /
  ``log_problems`` re-exported.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT / "plugins"), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import delta_helpers  # noqa: E402
from exactly_once.airflow.connections import storage_options as conn_options  # noqa: E402
from exactly_once.protocol.config import PipelineConfig  # noqa: E402
from exactly_once.protocol.layout import Source  # noqa: E402
from exactly_once.errors import (FencedError, TransactionAbortedError,  # noqa: E402
                                 UnsafeIdentifierError, ValidationFailedError)
from exactly_once.ids import Interval, TxnRef  # noqa: E402
from exactly_once.protocol.pipeline import IntervalRun  # noqa: E402
from exactly_once.storage import LocalStorage, Storage  # noqa: E402
from exactly_once.protocol.transaction import TwoPhaseCommitSink  # noqa: E402
from exactly_once.records.txlog import State  # noqa: E402
from protocol_helpers import leftovers, log_problems  # noqa: E402,F401  (re-exported)
from pv_standin import stage_write  # noqa: E402,F401  (re-exported)

SUITE = str(ROOT / "expectations" / "app_pv.json")
APPLICATION = str(ROOT / "spark_jobs" / "pv_counts.py")
COLUMNS = ["app_id", "pv", "uv", "cumulative_pv"]
PHASES = ("begin", "write", "pre_commit", "validate", "commit")
# errors no retry can fix: the operator aborts the transaction in the failing task and fails it for good
# (exactly_once.airflow.operators.FINAL, repeated here so that the local runs need no Airflow import)
FINAL = (FencedError, TransactionAbortedError, ValidationFailedError, UnsafeIdentifierError)
FINAL_NAMES = {e.__name__ for e in FINAL}
WRITE_ATTEMPTS = 4  # AbortOperator's default write_attempts
Row = tuple


# ------------------------------------------------------------------------------ the write stand-in
# stage_write lives in pv_standin (light imports: the fleet's spark-submit stand-in runs it per write)
# ------------------------------------------------------------------------------------ configuration
@dataclass(frozen=True)
class Setup:
    """Everything a task process needs to build its PipelineConfig (picklable, JSON-able)."""

    root: str
    start: str
    reports: str
    conn_id: str | None = None
    max_malformed_ratio: float = 0.05
    suite: str | None = SUITE
    pipeline: str = "pv_pipeline"
    sink: str = "app_pv"
    env: dict[str, str] = field(default_factory=dict)
    spark_remote: str | None = None  # the write task as a Spark Connect client of this server (real Spark)
    application: str = APPLICATION   # the job the Spark Connect write runs
    table_format: str = "files"      # "delta": the sink is a Delta table

    def config(self) -> PipelineConfig:
        return PipelineConfig(pipeline=self.pipeline, sink=self.sink,
                              sources=Source("app_logs", path="dt={start:%Y-%m-%d}", allow_empty=True),
                              application=APPLICATION, suite=self.suite, stateful=True,
                              start=date.fromisoformat(self.start),
                              max_malformed_ratio=self.max_malformed_ratio, root=self.root,
                              reports=self.reports, storage_conn_id=self.conn_id, table_format=self.table_format)

    def options(self) -> dict[str, Any]:
        """The storage connection's credentials, resolved as the Airflow layer does (once per task)."""
        return conn_options(self.conn_id)

    def run(self, day: str, config: PipelineConfig | None = None) -> IntervalRun:
        return IntervalRun(config or self.config(), Interval.daily(day), storage_options=self.options())

    def replace(self, **kw: Any) -> "Setup":
        return Setup(**{**asdict(self), **kw})


def _refresh_fs(storage: Storage) -> None:
    fs = getattr(storage, "fs", None)
    if fs is not None:
        fs.invalidate_cache()  # other processes changed the bucket (s3fs instances are cached)


def run_phase(setup: Setup, day: str, phase: str, xcom: dict[str, Any], **kw: Any) -> Any:
    """One task of the DAG for ``day``: ``xcom`` holds what begin returned (``txn``, ``spec``).

    Like ``PhaseOperator.execute``: a FINAL error of a task after begin aborts the transaction in that
    same task (the teardown repeats it) before the task fails for good.
    """
    try:
        return _run_phase(setup, day, phase, xcom, **kw)
    except FINAL:
        if phase not in ("begin", "abort", "recover") and "txn" in xcom:
            setup.run(day).abort(TxnRef.from_dict(xcom["txn"]))
        raise


def _run_phase(setup: Setup, day: str, phase: str, xcom: dict[str, Any], **kw: Any) -> Any:
    run = setup.run(day)
    _refresh_fs(run.storage)
    txn = TxnRef.from_dict(xcom["txn"]) if "txn" in xcom else None
    if phase == "begin":
        return run.begin(refresh_sources=kw.get("refresh", False), run={"run_id": f"fault__{day}"})
    if phase == "write":
        if setup.spark_remote:  # what WriteOperator does over Spark Connect (attempt = the try number)
            from exactly_once.airflow.write import run_connect

            return run_connect(setup.application, xcom["spec"], setup.spark_remote,
                               attempt=kw.get("attempt", 1))["counts"]
        return stage_write(xcom["spec"], setup.options())
    if phase == "pre_commit":
        return run.pre_commit(txn)
    if phase == "validate":
        return run.validate(txn)
    if phase == "commit":
        return run.commit(txn)
    if phase == "abort":
        if setup.spark_remote:  # what AbortOperator does over Spark Connect
            from exactly_once.airflow.write import interrupt_dead_writes

            interrupt_dead_writes(run, txn, setup.spark_remote, WRITE_ATTEMPTS)
        return run.abort(txn)
    if phase == "recover":  # a third party (``eo recover``), not a task of this run
        return run.sink.recover(Interval.daily(day), **kw)
    raise ValueError(f"unknown phase {phase!r}")


# ------------------------------------------------------------------------------------ child processes
_CTX: Any = None
PRELOAD = ["great_expectations", "exactly_once.quality", "exactly_once.protocol.pipeline", "pyarrow.parquet",
           "pyarrow.dataset", "s3fs", "airflow.sdk", "reference_pv", "protocol_helpers", "fault_helpers"]


def _context() -> Any:
    global _CTX
    if _CTX is None:
        _CTX = multiprocessing.get_context("forkserver")
        _CTX.set_forkserver_preload(PRELOAD)
    return _CTX


def report_child(setup: Setup, failpoints: str | None, out: str, work: Callable[[], Any]) -> None:
    """In a child process: ``setup``'s environment and ``failpoints`` (only those), then ``work()``; its
    result, or the exception it raised, goes to the JSON file ``out`` for the parent (:func:`join_child`)."""
    os.environ.update(setup.env)
    os.environ.pop("EO_FAILPOINTS", None)
    if failpoints:
        os.environ["EO_FAILPOINTS"] = failpoints
    try:
        result = {"ok": True, "result": work()}
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        result = {"ok": False, "error": type(exc).__name__, "message": str(exc),
                  "traceback": traceback.format_exc()}
    with open(out, "w") as f:
        json.dump(result, f, default=str)


def _child(setup: Setup, day: str, phase: str, xcom: dict[str, Any], failpoints: str | None,
           kw: dict[str, Any], out: str) -> None:
    report_child(setup, failpoints, out, lambda: run_phase(setup, day, phase, xcom, **kw))


def warm_children() -> None:
    """Start the forkserver now: it imports the heavy modules while this process does other work."""
    _context()
    from multiprocessing import forkserver

    forkserver.ensure_running()


@dataclass
class Outcome:
    """What one task attempt did: ``exit`` is the child's exit code (None when in-process)."""

    phase: str
    ok: bool
    result: Any = None
    error: str | None = None
    message: str = ""
    exit: int | None = None
    seconds: float = 0.0

    @property
    def crashed(self) -> bool:
        return self.exit == 137

    @property
    def final(self) -> bool:
        """Failed with an error no retry can fix (Airflow: AirflowFailException, no retry)."""
        return not self.ok and self.error in FINAL_NAMES


def start_child(setup: Setup, day: str, phase: str, xcom: dict[str, Any], *, failpoints: str | None = None,
                **kw: Any) -> tuple[Any, str]:
    """Start one task in a fresh child process; returns the process and the file its result goes to."""
    fd, out = tempfile.mkstemp(prefix="eo-fault-", suffix=".json")
    os.close(fd)
    os.unlink(out)
    proc = _context().Process(target=_child, args=(setup, day, phase, xcom, failpoints, kw, out))
    proc.start()
    return proc, out


def in_child(setup: Setup, day: str, phase: str, xcom: dict[str, Any], *, failpoints: str | None = None,
             timeout: float = 180, **kw: Any) -> Outcome:
    """Run one task in a fresh child process; ``failpoints`` becomes its ``EO_FAILPOINTS``."""
    proc, out = start_child(setup, day, phase, xcom, failpoints=failpoints, **kw)
    return join_child(proc, out, phase, f"{phase} of {day}", timeout)


def join_child(proc: Any, out: str, task: str, what: str, timeout: float) -> Outcome:
    """Wait for a child started with a result file ``out`` (killed after ``timeout`` s: AssertionError
    naming ``what``) and read its Outcome; a child that died leaves no result."""
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise AssertionError(f"{what} hung for {timeout} s")
    try:
        with open(out) as f:
            res = json.load(f)
        os.unlink(out)
    except FileNotFoundError:
        res = {"ok": False, "error": "no result (process died)"}
    return Outcome(task, bool(res.get("ok")), res.get("result"), res.get("error"),
                   res.get("message", "") or res.get("traceback", ""), proc.exitcode)


def in_process(setup: Setup, day: str, phase: str, xcom: dict[str, Any], *, failpoints: str | None = None,
               **kw: Any) -> Outcome:
    """Run one task in this process (an ``error`` failpoint raises out of it like out of a task)."""
    old = os.environ.pop("EO_FAILPOINTS", None)
    if failpoints:
        os.environ["EO_FAILPOINTS"] = failpoints
    try:
        return Outcome(phase, True, run_phase(setup, day, phase, xcom, **kw))
    except Exception as exc:  # noqa: BLE001
        return Outcome(phase, False, error=type(exc).__name__, message=str(exc))
    finally:
        os.environ.pop("EO_FAILPOINTS", None)
        if old is not None:
            os.environ["EO_FAILPOINTS"] = old


# ------------------------------------------------------------------------------------ Airflow-like driver
@dataclass
class Driver:
    """Runs DAG runs of ``pv_pipeline`` phase by phase, logging every task attempt in ``attempts``."""

    setup: Setup
    attempts: list[Outcome] = field(default_factory=list)

    def task(self, day: str, phase: str, xcom: dict[str, Any], *, child: bool = False,
             failpoints: str | None = None, **kw: Any) -> Outcome:
        fn = in_child if child else in_process
        if phase == "write" and self.setup.spark_remote:  # Airflow's try number: a session per attempt
            kw.setdefault("attempt", 1 + sum(a.phase == "write" for a in self.attempts))
        t0 = time.perf_counter()
        out = fn(self.setup, day, phase, xcom, failpoints=failpoints, **kw)
        out.seconds = round(time.perf_counter() - t0, 3)
        self.attempts.append(out)
        return out

    def clean_run(self, day: str, *, child: bool = False, refresh: bool = False) -> dict[str, Any]:
        """One DAG run without faults; returns the XCom (txn, spec) and every task's result."""
        xcom: dict[str, Any] = {}
        out = self.task(day, "begin", xcom, child=child, refresh=refresh)
        assert out.ok, out
        xcom = {"txn": out.result["txn"], "spec": out.result["spec"]}
        results = {}
        try:
            for phase in PHASES[1:]:
                res = self.task(day, phase, xcom, child=child)
                assert res.ok, res
                results[phase] = res.result
        finally:
            td = self.task(day, "abort", xcom, child=child)
            assert td.ok, td
        results["abort"] = td.result
        return {**xcom, **results}


# ------------------------------------------------------------------------------------ readers / checks
def sink_of(setup: Setup) -> TwoPhaseCommitSink:
    sink = setup.config().sink_handle(setup.options())
    _refresh_fs(sink.storage)
    return sink


def rows_of(table: pa.Table) -> list[Row]:
    cols = [table.column(c).to_pylist() for c in COLUMNS]
    return sorted(zip(*cols))


def visible_rows(setup: Setup) -> dict[str, list[Row]]:
    """``{day: sorted rows}`` a reader sees (days with a live version only). Locally the plain hive reader (``pyarrow.dataset``, which
    skips ``_``/``.`` names and follows the partition links) and the exact reader must agree."""
    sink = sink_of(setup)
    st, table = sink.storage, sink.table
    exact: dict[str, list[Row]] = {}
    delta = sink.table_format == "delta"  # the partitions are in the Delta log, the plain reader is delta-rs
    for name in delta_helpers.live_partitions(sink) if delta else st.list_names(table):
        if name.startswith("dt=") and sink.live_version(name) is not None:
            rows: list[Row] = []
            for path in sink.live_files(name):
                with st.open(path, "rb") as f:
                    t = pq.read_table(f)
                assert t.column_names == COLUMNS, t.column_names
                rows += rows_of(t)
            exact[name[3:]] = sorted(rows)
    if delta:
        seen = delta_helpers.table_rows_by_partition(sink, COLUMNS, "dt")
        assert seen == {d: r for d, r in exact.items() if r}, f"Delta reader {seen} != exact reader {exact}"
    elif isinstance(st, LocalStorage):
        import pyarrow.dataset as ds

        plain: dict[str, list[Row]] = {}
        if os.path.isdir(table):
            for frag in ds.dataset(table, format="parquet", partitioning="hive").get_fragments():
                part = os.path.relpath(os.path.dirname(frag.path), table)
                assert part.startswith("dt=") and "/" not in part, f"unexpected file {frag.path}"
                plain.setdefault(part[3:], []).extend(rows_of(frag.to_table(columns=COLUMNS)))
        plain = {d: sorted(r) for d, r in plain.items()}
        assert {d: r for d, r in plain.items() if r} == {d: r for d, r in exact.items() if r}, \
            f"plain reader {plain} != exact reader {exact}"
    return exact


def rows_checksum(rows: list[Row]) -> str:
    return hashlib.sha256(json.dumps(sorted(rows), default=str).encode()).hexdigest()


def epoch_problems(sink: TwoPhaseCommitSink, interval: Interval) -> list[str]:
    """Every epoch of ``interval`` ended COMMITTED (and published) or ABORTED; ``[]`` if so."""
    _refresh_fs(sink.storage)
    out = []
    for epoch, st in sink.status(interval).items():
        if st.state is State.COMMITTED and not st.published:
            out.append(f"e{epoch}: committed, not published")
        elif st.state not in (State.COMMITTED, State.ABORTED):
            out.append(f"e{epoch}: still {st.state.value}")
    return out


def published_records(sink: TwoPhaseCommitSink, interval: Interval) -> dict[int, dict[str, str]]:
    """``{epoch: {partition: published|already|superseded}}`` from the ``published`` records."""
    return {e: (st.records.get("published") or {}).get("partitions", {})
            for e, st in sink.status(interval).items() if st.published}


def footprint(sink: TwoPhaseCommitSink, partition: str) -> list[str]:
    """The physical copies of ``partition``'s data: locally the version dirs under ``_versions/``; on S3
    the non-hidden objects in the partition prefix (a plain listing reader sees exactly these)."""
    _refresh_fs(sink.storage)
    st = sink.storage
    if sink.table_format == "delta":
        return delta_helpers.version_dirs(sink, partition)
    if isinstance(st, LocalStorage):
        return st.list_names(st.join(sink.home, "_versions", partition))
    return [e.rel for e in st.walk_files(st.join(sink.table, partition))
            if "/" not in e.rel and not e.rel.startswith(("_", "."))]


class Pipe:
    """A pv_pipeline on a fresh root: landing files are written here, phases run in this process."""

    def __init__(self, setup: Setup, fs: Any = None) -> None:
        self.setup, self.fs = setup, fs

    def cfg(self, **kw: Any) -> "Pipe":
        return Pipe(self.setup.replace(**kw), self.fs)

    def land(self, day: str, lines: list[str], name: str = "part-000.jsonl", hour: int = 0) -> str:
        rel = f"landing/app_logs/dt={day}/hour={hour:02d}/{name}"
        data = "".join(line + "\n" for line in lines).encode()
        if self.fs is None:
            path = Path(self.setup.root) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return str(path)
        key = f"{self.setup.root[len('s3://'):]}/{rel}"
        self.fs.pipe_file(key, data)
        return key

    def run(self, day: str) -> dict[str, Any]:
        return Driver(self.setup).clean_run(day)

    def sink(self):
        return sink_of(self.setup)
