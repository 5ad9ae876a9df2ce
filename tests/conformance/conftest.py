"""The conformance suite's worlds (Hadoop's ``AbstractITCommitProtocol`` pattern): every test of
tests/conformance/ runs against EVERY target through one uniform :class:`World`. A target that is not
in :data:`KINDS` is not supported. Beside them, each target's own promises (a Delta table other engines write,
the databases' and Redis's races, rollback and ownership: ``test_delta_*.py``, ``test_targets_db.py``,
``test_targets_redis.py``, ``test_rollback_targets.py``, ``test_target_ownership.py``) run here too, with
parameter ids named by the kinds below, so that ``-k <kind>`` - ``make mutants``' test command for a target -
runs every test of that target.

One :class:`Place` per target kind and test module shares the servers (one S3 bucket, one PostgreSQL /
MariaDB database, one Redis key prefix, one local dir); each test gets a fresh table in it
(:meth:`Place.world`). The world's API, the same for every target:

* ``sink(pipeline=, sink=)`` - a :class:`TwoPhaseCommitSink` publishing into this world's table (a
  second pipeline on a database/Redis target keeps its own log, as a second DAG would; on files and
  Delta the log lives beside the table, so it is shared);
* ``sink_kwargs()`` - the same as JSON, for a child process (:func:`protocol_helpers.run_child`);
* ``stage(sink, txn, {partition: [file, ...]})`` - Parquet into ``sink.data_dir(txn)/<partition>/``,
  a file being ``[(k, v), ...]`` or a ``pyarrow.Table``; ``commit(sink, interval, files)`` - a whole run;
* ``read_rows()`` - what readers of the target see: sorted ``{"dt", "k", "v"}`` dicts;
* ``leftovers(sink)`` - staging, temp files and garbage left behind (must be ``[]`` once idle);
* ``other_writer(partition, rows)`` - a write that is not ours (an SQL INSERT, a Redis SET, an outside
  Delta commit, a stray file/object);
* ``log_problems(sink, interval)`` - what is wrong with the idle log and the target's version (``[]``);
* ``missing_of(sink, txn)`` - what of a committed, superseded version is gone (its manifest, checkpoint,
  stored copies): ``[]`` while the grace period protects it;
* ``clock(offset)`` - this process's ``time.time`` shifted by ``offset`` s inside the block (one actor's
  clock; the storage's clock is untouched).
"""
from __future__ import annotations

import json
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eo_testing import need
from exactly_once import Interval, State, TwoPhaseCommitSink, TxnRef
from exactly_once.protocol.staging import kept_copies
from exactly_once.storage import is_hidden
from protocol_helpers import _read_rows, leftovers, log_problems, open_sink, plain_reader_rows, refresh, write_output
from target_helpers import REDIS_URL, Db, fresh_database, reachable

from .db_cases import kill_sessions_in_transaction, row_lock_waiters

KINDS = ["files-local", "files-s3", "delta-local", "delta-s3", "postgresql", "mysql", "redis"]
IV, IV2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")
PART, PART2 = f"dt={IV.day}", f"dt={IV2.day}"
OUTSIDE = "dt=2026-03-01"  # a partition none of the suite's intervals writes
PIPELINE, SINK = "p", "t"
PORTS = {"postgresql": 5432, "mysql": 3306, "redis": 6379}


def ddl(kind: str, table: str) -> str:
    q = (lambda s: f'"{s}"') if kind == "postgresql" else (lambda s: f"`{s}`")
    return (f"CREATE TABLE {q(table)} (k bigint NOT NULL, v varchar(64) NOT NULL, dt date NOT NULL, "
            f"PRIMARY KEY (dt, k))" + (" ENGINE=InnoDB" if kind == "mysql" else ""))


def as_int(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else value


class Place:
    """One target kind's shared resources for a test module."""

    def __init__(self, kind: str, root: Path, request: pytest.FixtureRequest) -> None:
        self.kind, self.root, self.prefix = kind, root, f"c{uuid.uuid4().hex[:8]}"
        self._db_gen: Iterator[str] | None = None
        self.db: Db | None = None
        self.table_root = str(root)
        if kind.endswith("-s3"):
            from conftest import make_bucket

            self.s3 = request.getfixturevalue("s3_server")
            self.table_root = f"s3://{make_bucket(self.s3)}"
        elif kind in ("postgresql", "mysql", "redis"):
            need(reachable(PORTS[kind]), f"{kind} is not running on 127.0.0.1:{PORTS[kind]}")
            if kind != "redis":
                self._db_gen = fresh_database(kind)
                self.db = Db(next(self._db_gen))
        if kind.startswith("delta"):
            pytest.importorskip("deltalake")

    def world(self) -> "World":
        return World(self, f"{self.prefix}_{uuid.uuid4().hex[:8]}")

    def close(self) -> None:
        if self.kind == "redis":
            client = redis_client()
            for key in client.scan_iter(f"{self.prefix}_*"):
                client.delete(key)
        if self.db is not None:
            self.db.close()
            next(self._db_gen, None)  # type: ignore[arg-type]


def redis_client() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL, decode_responses=True)


class World:
    """One fresh table of a target kind (see the module docstring for the API)."""

    def __init__(self, place: Place, name: str) -> None:
        self.place, self.kind, self.name = place, place.kind, name
        self.is_files, self.is_delta = self.kind.startswith("files"), self.kind.startswith("delta")
        self.keeps_copies = self.is_files or self.is_delta  # databases and Redis replace rows in place
        self.table_url = f"{place.table_root}/{name}/t"
        self.foreign: list[str] = []  # what other_writer put into a files table (not ours to judge)
        self.spec: dict[str, Any] | None = None
        if place.db is not None:
            place.db.run(ddl(self.kind, name))
            self.spec = {"kind": "database", "url": place.db.url, "table": name}
        elif self.kind == "redis":
            self.spec = {"kind": "redis", "namespace": name, "key_columns": ["k"], "url": REDIS_URL}

    def __repr__(self) -> str:
        return f"World({self.kind}, {self.name})"

    # ------------------------------------------------------------------ sinks
    def log_url(self, pipeline: str, sink: str) -> str:
        """Where the sink's log lives: beside the table (files, Delta), else a dir of the pipeline's own."""
        if self.spec is None:
            return self.table_url
        return str(self.place.root / self.name / f"{pipeline}.{sink}" / "t")

    def sink_kwargs(self) -> dict[str, Any]:
        if self.is_delta:
            return {"table_format": "delta"}
        return {"target": dict(self.spec)} if self.spec else {}

    def sink(self, pipeline: str = PIPELINE, sink: str = SINK, **kw: Any) -> TwoPhaseCommitSink:
        return open_sink(self.log_url(pipeline, sink), pipeline=pipeline, sink=sink, **self.sink_kwargs(), **kw)

    # ------------------------------------------------------------------ writing
    def stage(self, sink: TwoPhaseCommitSink, txn: TxnRef, files: dict[str, Sequence[Any]]) -> None:
        """Write ``{partition: [file, ...]}`` (a file: ``[(k, v)]`` rows or a ``pyarrow.Table``) where the
        writer of ``txn`` writes, plus a state file (the checkpoint) as a stateful job does."""
        rows_only = {p: fs for p, fs in files.items() if all(not isinstance(f, pa.Table) for f in fs)}
        write_output(sink, txn, rows_only)
        for part, fs in files.items():
            for i, f in enumerate(fs):
                if isinstance(f, pa.Table):
                    path = sink.storage.join(sink.data_dir(txn), part, f"table-{i:05d}.parquet")
                    sink.storage.makedirs(path.rsplit("/", 1)[0])
                    with sink.storage.open(path, "wb") as out:
                        pq.write_table(f, out)

    def commit(self, sink: TwoPhaseCommitSink, interval: Interval, files: dict[str, Sequence[Any]]) -> TxnRef:
        """begin + stage + pre_commit + commit; returns the committed transaction."""
        txn = sink.begin(interval)
        self.stage(sink, txn, files)
        sink.pre_commit(txn)
        sink.commit(txn)
        return txn

    def other_writer(self, partition: str, rows: Sequence[tuple[int, str]]) -> None:
        """Write ``rows`` into ``partition`` by the target's own means, outside the protocol."""
        dt = partition.split("=", 1)[1]
        if self.place.db is not None:
            db = self.place.db
            for k, v in rows:
                db.run(f"INSERT INTO {db.q(self.name)} (k, v, dt) VALUES (%s, %s, %s)", (k, v, dt))
        elif self.kind == "redis":
            client = redis_client()
            for k, v in rows:
                client.set(f"{self.name}:{partition}:{k}", json.dumps({"v": v}))
        elif self.is_delta:
            from deltalake import write_deltalake

            target = self.sink().target
            table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()),
                              "v": pa.array([r[1] for r in rows], pa.string()), "dt": pa.array([dt] * len(rows))})
            write_deltalake(target.uri, table, mode="append", partition_by=["dt"],
                            storage_options=target.options or None)
        else:
            sink = self.sink()
            path = sink.storage.join(sink.table, partition, f"foreign-{len(self.foreign)}.parquet")
            table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()),
                              "v": pa.array([r[1] for r in rows], pa.string())})
            sink.storage.makedirs(path.rsplit("/", 1)[0])
            with sink.storage.open(path, "wb") as out:
                pq.write_table(table, out)
            self.foreign.append(f"{partition}/{path.rsplit('/', 1)[1]}")

    def rewrite_in_place(self, partition: str) -> None:
        """Another engine rewrites the rows of ``partition`` without changing them, by the target's own
        means (a compaction): Delta ``OPTIMIZE``, an SQL DELETE + INSERT of the same rows, Redis SETs of the
        same values, a file rewritten in place."""
        dt = partition.split("=", 1)[1]
        if self.place.db is not None:
            db = self.place.db
            rows = db.run(f"SELECT k, v FROM {db.q(self.name)} WHERE dt = %s", (dt,))
            db.run(f"DELETE FROM {db.q(self.name)} WHERE dt = %s", (dt,))
            for k, v in rows:
                db.run(f"INSERT INTO {db.q(self.name)} (k, v, dt) VALUES (%s, %s, %s)", (k, v, dt))
        elif self.kind == "redis":
            client = redis_client()
            for key in client.scan_iter(f"{self.name}:{partition}:*"):
                client.set(key, client.get(key))
        elif self.is_delta:
            self.sink().target.snapshot().optimize.compact()
        else:
            sink = self.sink()
            for path in sink.live_files(partition):
                with sink.storage.open(path, "rb") as f:
                    table = pq.read_table(f)
                with sink.storage.open(path, "wb") as out:
                    pq.write_table(table, out, compression="gzip")

    def during_publish(self, monkeypatch: pytest.MonkeyPatch, txn: TxnRef, other: Any) -> dict[str, Any]:
        """Run ``other()`` (another process's whole step) inside ``txn``'s publish, at the deepest point
        where another publisher can run: mid-publish (files placed or queued, not switched) where the
        target allows it, else at the start of the publish (a database's marker lock and the local files'
        partition lock serialize everything after it; S3 files: after the copies, before the manifest
        switch). Returns ``{"fired": bool, "result": ...}``."""
        state: dict[str, Any] = {"fired": False, "armed": False}
        cls = type(self.sink().target)
        real_publish = cls.publish
        serial = self.kind in ("files-local", "postgresql", "mysql")

        def publish(target: Any, t: TxnRef, staged: Any) -> Any:
            if t == txn and not state["armed"]:
                state["armed"] = True
                if serial:
                    state["fired"], state["result"] = True, other()
            return real_publish(target, t, staged)

        monkeypatch.setattr(cls, "publish", publish)
        if self.kind == "files-s3":  # after the copies, before the manifest switch
            from exactly_once.storage.s3 import S3Storage

            real_copy, calls = S3Storage.copy_files, []

            def copy_files(storage: Any, pairs: Any) -> Any:
                done = real_copy(storage, pairs)
                if state["armed"] and not state["fired"]:
                    calls.append(1)
                    if len(calls) == 2:  # the publish copies in two halves (commit.mid_publish between)
                        state["fired"], state["result"] = True, other()
                return done

            monkeypatch.setattr(S3Storage, "copy_files", copy_files)
        elif not serial:
            from exactly_once import failpoints
            from exactly_once.targets import keyvalue

            real_fp = failpoints.failpoint

            def failpoint(name: str) -> None:
                if name == "commit.mid_publish" and state["armed"] and not state["fired"]:
                    state["fired"] = True
                    state["result"] = other()
                real_fp(name)

            monkeypatch.setattr(failpoints, "failpoint", failpoint)
            monkeypatch.setattr(keyvalue, "failpoint", failpoint)
        return state

    # ------------------------------------------------------------------ other owners, other publishers
    FOREIGN = {"owner_id": "f" * 32, "pipeline": "q", "sink": "t", "home": "file:///elsewhere/_exactly_once/t"}

    def foreign_marker(self, interval: Interval, epoch: int) -> None:
        """Another owner's marker of ``interval`` at ``epoch`` in the target, written straight into it (as
        another deployment of the pipeline, or an old loader, would): the marker row of a database, the
        marker hash of Redis; files and Delta keep no marker per interval, only the location's owner claim
        (``_eo_owner.json``): it is rewritten to name the other owner."""
        f = self.FOREIGN
        if self.spec is not None:
            self._set_marker(interval, epoch, f["pipeline"], f["sink"], f["owner_id"])
            return
        from exactly_once.records.ownership import LOCATION_CLAIM
        from exactly_once.storage import to_json

        sink = self.sink()
        path = sink.storage.join(sink.table, LOCATION_CLAIM)
        self._claim = sink.storage.read_bytes(path)
        sink.storage.write_atomic(path, to_json({**f, "kind": "delta" if self.is_delta else "files"}))

    def clear_foreign_marker(self, interval: Interval, ours: TxnRef, owner: Any) -> None:
        """Put our marker (``ours`` live, set by ``owner``) back where :meth:`foreign_marker` wrote
        another owner's."""
        if self.spec is not None:
            self._set_marker(interval, ours.epoch, ours.pipeline, ours.sink, owner.id if owner else None)
            return
        from exactly_once.records.ownership import LOCATION_CLAIM

        sink = self.sink()
        sink.storage.write_atomic(sink.storage.join(sink.table, LOCATION_CLAIM), self._claim)

    def _set_marker(self, interval: Interval, epoch: int, pipeline: str, sink: str, owner_id: str | None) -> None:
        """Set the marker of ``interval`` in a database's commit table or in Redis, as its publish would."""
        if self.place.db is not None:
            db = self.place.db
            db.run(f"UPDATE {db.q('_eo_commits')} SET epoch = %s, pipeline = %s, sink = %s, owner = %s "
                   "WHERE target = %s AND interval_token = %s",
                   (epoch, pipeline, sink, owner_id, self.name, interval.token))
        else:
            redis_client().hset(f"{self.name}:_eo:marker:{interval.token}",
                                mapping={"epoch": epoch, "pipeline": pipeline, "sink": sink, "owner": owner_id or ""})

    def kill_other_sessions(self) -> int:
        """Kill the other sessions of this world's database inside a transaction; how many (a database only)."""
        assert self.place.db is not None
        return kill_sessions_in_transaction(self.place.db)

    def lock_waiters(self) -> int:
        """Sessions of this world's database waiting for a row lock now (a database target only)."""
        assert self.place.db is not None
        return row_lock_waiters(self.place.db)

    # ------------------------------------------------------------------ reading
    def read_rows(self) -> list[dict[str, Any]]:
        """What the target's readers see now, as sorted ``{"dt", "k", "v"}`` dicts."""
        rows: list[tuple[str, Any, Any]] = []
        if self.place.db is not None:
            db = self.place.db
            rows = [(str(dt), int(k), v) for k, v, dt in db.rows(self.name, "k, v, dt", "dt, k")]
        elif self.kind == "redis":
            client = redis_client()
            for key in client.scan_iter(f"{self.name}:*"):
                if ":_eo:" in key:
                    continue
                _, part, k = key.split(":", 2)
                rows.append((part.split("=", 1)[1], as_int(k), json.loads(client.get(key))["v"]))
        elif self.is_delta:
            sink = self.sink()
            refresh(sink)
            dt = sink.target.snapshot()
            if dt is not None:
                t = dt.to_pyarrow_table(columns=["k", "v", "dt"])
                rows = list(zip(t.column("dt").to_pylist(), t.column("k").to_pylist(), t.column("v").to_pylist()))
        else:
            rows = [(part.split("=", 1)[1], k, v) for part, prs in self._files_rows().items() for k, v in prs]
        return sorted(({"dt": dt, "k": k, "v": v} for dt, k, v in rows), key=lambda r: (r["dt"], str(r["k"]), r["v"]))

    def _files_rows(self) -> dict[str, list[tuple]]:
        """Files: the exact reader (the manifest) in our partitions - locally also the plain hive reader,
        which must agree - and a plain listing in partitions we never published."""
        sink = self.sink()
        refresh(sink)
        st = sink.storage
        out: dict[str, list[tuple]] = {}
        plain = plain_reader_rows(sink.table) if self.kind == "files-local" else {}
        for part in [n for n in st.list_names(sink.table) if not is_hidden(n)]:
            if sink.live_version(part):
                out[part] = _read_rows(sink, sink.live_files(part))
                if self.kind == "files-local":
                    assert plain.get(part, []) == out[part], f"plain reader {plain.get(part)} != exact {out[part]}"
            else:
                base = st.join(sink.table, part)
                out[part] = _read_rows(sink, [st.join(base, e.rel) for e in st.walk_files(base)
                                                if not any(is_hidden(s) for s in e.rel.split("/"))])
        return out

    def rows(self, files: dict[str, Sequence[Sequence[tuple[int, str]]]]) -> list[dict[str, Any]]:
        """``read_rows``'s shape of ``{partition: [[(k, v), ...], ...]}``: what readers must see."""
        return sorted(({"dt": p.split("=", 1)[1], "k": k, "v": v} for p, fs in files.items() for f in fs
                       for k, v in f), key=lambda r: (r["dt"], str(r["k"]), r["v"]))

    def leftovers(self, sink: TwoPhaseCommitSink | None = None) -> list[str]:
        """Staging dirs, temp files, uncommitted checkpoints and versions, stray objects; Redis keys that
        are neither data nor bookkeeping. ``[]`` once the table is idle."""
        found = [x for x in leftovers(sink or self.sink()) if not any(x.endswith(f) for f in self.foreign)]
        if self.kind == "redis":
            found += [k for k in redis_client().scan_iter(f"{self.name}:_eo:*")
                      if not k.startswith((f"{self.name}:_eo:marker:", f"{self.name}:_eo:keys:"))
                      and k not in (f"{self.name}:_eo:owner", f"{self.name}:_eo:partitions")]  # the namespace's claim, its partitions
        return found

    def log_problems(self, sink: TwoPhaseCommitSink, interval: Interval) -> list[str]:
        """What is wrong with the idle log of ``interval`` and the version the target holds (``[]``): every
        epoch ended (ABORTED, or COMMITTED and published) and the target holds the newest committed one."""
        if self.keeps_copies:  # the files and Delta targets track the live version per partition
            return log_problems(sink, interval)
        statuses = sink.status(interval)
        problems = [f"e{e}: {s.state.value}, published={s.published}" for e, s in statuses.items()
                    if not (s.state is State.ABORTED or (s.state is State.COMMITTED and s.published))]
        committed = [e for e, s in statuses.items() if s.state is State.COMMITTED]
        live = sink.target.live_epoch(interval)
        if live != max(committed, default=None):
            problems.append(f"the target holds epoch {live}, the newest committed is {max(committed, default=None)}")
        return problems

    def missing_of(self, sink: TwoPhaseCommitSink, txn: TxnRef) -> list[str]:
        """What is gone of committed version ``txn``: its manifest (the log record), its checkpoint, and
        its stored files (kept by the target, or in the checkpoint for databases and Redis). ``[]``: rollback and pinned readers still work."""
        refresh(sink)
        rec = sink.log.read(txn.interval, txn.epoch, "pre_committed")
        missing = [] if rec else ["manifest"]
        if not sink.storage.exists(sink.checkpoint_dir(txn)):
            missing.append("checkpoint")
        if rec:  # databases and Redis: the sealed staged files the protocol keeps in the checkpoint
            stored = sink.target.stored_files if self.keeps_copies else (
                lambda part, version, names: kept_copies(sink, txn, part, names))
            for part, files in rec["manifest"]["partitions"].items():
                names = [f["name"] for f in files]
                if names and stored(part, txn.name, names) is None:
                    missing.append(f"files of {part}")
        return missing

    def stored_paths(self, sink: TwoPhaseCommitSink, txn: TxnRef) -> list[str]:
        """The storage paths of committed version ``txn``'s files (kept by the target, or by the protocol
        in the checkpoint for databases and Redis), while its manifest is in the log."""
        rec = sink.log.read(txn.interval, txn.epoch, "pre_committed")
        stored = sink.target.stored_files if self.keeps_copies else (
            lambda part, version, names: (kept_copies(sink, txn, part, names) or ({}, []))[0])
        return sorted(p for part, files in rec["manifest"]["partitions"].items()
                      for p in (stored(part, txn.name, [f["name"] for f in files]) or {}).values())

    # ------------------------------------------------------------------ the clock hook
    @staticmethod
    @contextmanager
    def clock(offset: float) -> Iterator[None]:
        """This process's clock (``time.time``) runs ``offset`` s off inside the block: one actor's clock."""
        real = time.time
        time.time = lambda: real() + offset  # type: ignore[assignment]
        try:
            yield
        finally:
            time.time = real  # type: ignore[assignment]


@pytest.fixture(scope="module", params=[pytest.param(k, marks=[pytest.mark.s3] if k.endswith("s3") else [])
                                        for k in KINDS])
def target_world(request, tmp_path_factory):
    """The module's :class:`Place` of one target kind (shared servers; one database / bucket / prefix)."""
    place = Place(request.param, tmp_path_factory.mktemp(request.param), request)
    yield place
    place.close()


@pytest.fixture
def world(target_world, monkeypatch, tmp_path) -> World:
    """A fresh table of the module's target kind; failpoints off unless a test sets them."""
    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    return target_world.world()


# Delta's own promises - a table other engines write too (test_delta_*.py): their tests take the table's
# location itself, a fixture named by the kind so that `-k delta-local` (and make mutants' rows) select them
@pytest.fixture(params=["delta-local", pytest.param("delta-s3", marks=pytest.mark.s3)])
def delta_url(request, tmp_path) -> str:
    """A fresh Delta table location: local, and on the loopback S3 server."""
    if request.param == "delta-local":
        return str(tmp_path / "warehouse" / "t")
    from conftest import make_bucket

    return f"s3://{make_bucket(request.getfixturevalue('s3_server'))}/warehouse/t"


@pytest.fixture(params=["delta-local"])
def delta_dir(tmp_path) -> Path:
    """A fresh local directory for the Delta tests that use local files only (another engine's handle on
    the table, a private clock probe)."""
    return tmp_path


def staged_elsewhere(sink: Any, txn: Any, files: list[list]) -> Any:
    """A version of ``txn`` staged outside the table (``<home>/elsewhere/<txn>/<PART>/f<i>.parquet``, one file
    per rows list) as the Delta target used on its own receives it: its StagedVersion, described like a
    pre_commit manifest (sizes, sha256, ETags)."""
    from exactly_once.records import manifest as manifests
    from exactly_once.targets.base import StagedVersion
    from protocol_helpers import write_parquet

    st, root = sink.storage, sink.storage.join(sink.home, "elsewhere", txn.name)
    for i, rows in enumerate(files):
        write_parquet(sink, st.join(root, PART, f"f{i}.parquet"), rows)
    described = tuple(manifests.describe(st, st.join(root, e.rel), e.rel.split("/")[-1], e.size, True, e)
                      for e in st.walk_files(root))
    return StagedVersion.on(st, root, {PART: described})


def decided_elsewhere(world: Any, old: list, new: list) -> tuple[Any, Any, Any]:
    """``old`` published as IV's version, then IV's next attempt with ``new`` staged outside the table (two files,
    :func:`staged_elsewhere`) and checked - decided, not yet published: ``(sink, txn, staged)``."""
    sink = world.sink()
    world.commit(sink, IV, {PART: [old]})
    txn = sink.begin(IV)
    staged = staged_elsewhere(sink, txn, [new[:2], new[2:]])
    sink.target.check(txn, staged)  # ... the decision ...
    return sink, txn, staged
