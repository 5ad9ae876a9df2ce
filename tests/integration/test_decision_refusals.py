"""Issue 25, classes 2, 5 and 6: whatever can refuse a transaction refuses it BEFORE its decision, the gate
cannot be bypassed by recovery, and what commits is byte for byte what was sealed and validated.

Run over local files, Delta (local), PostgreSQL, MariaDB and Redis where the case applies. Each test
asserts on the rows a reader sees and on the interval staying usable (a new attempt commits), never on
a message alone. Interleavings are forced at the exact step (a recovery called from inside the running
validator, a failpoint between decision and publish), never with sleeps.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eo_testing import need
from exactly_once import Interval, State
from exactly_once.errors import FailpointError, StorageError, TargetSchemaError, TransactionAbortedError
from exactly_once.targets.sql_dialects import DIALECTS
from protocol_helpers import make_rows, open_sink, visible_rows, write_output
from target_helpers import REDIS_URL, Db, fresh_database, reachable

IV, IV2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")
PART, PART2 = f"dt={IV.day}", f"dt={IV2.day}"
DDL = "CREATE TABLE t (k bigint NOT NULL, v varchar(64) NOT NULL, dt date NOT NULL, PRIMARY KEY (dt, k))"
ALL = ["files", "delta", "postgresql", "mysql", "redis"]
PORTS = {"postgresql": 5432, "mysql": 3306, "redis": 6379}


@pytest.fixture(scope="module")
def services():
    """One fresh database per kind for the whole module (created on first use, dropped at the end)."""
    made: dict[str, tuple] = {}

    def get(kind: str):
        if kind not in made:
            gen = fresh_database(kind)
            made[kind] = (gen, next(gen))
        return made[kind][1]

    yield get
    for gen, _ in made.values():
        next(gen, None)


class World:
    """One target kind: sinks on a fresh table, and the rows ``(k, v)`` a reader sees in a partition."""

    def __init__(self, kind: str, tmp_path, services, url: str | None = None) -> None:
        need(kind not in PORTS or reachable(PORTS[kind]), f"{kind} on 127.0.0.1")
        self.kind, self.url, self.spec = kind, url or str(tmp_path / "warehouse" / "t"), None
        self.extra = {"table_format": "delta"} if kind == "delta" else {}
        if kind in ("postgresql", "mysql"):
            self.db = Db(services(kind))
            for table in ("t", "_eo_commits", "_eo_claims"):
                self.db.run(f"DROP TABLE IF EXISTS {self.db.q(table)}")
            self.db.run(DDL)
            self.spec = {"kind": "database", "url": self.db.url, "table": "t"}
        elif kind == "redis":
            import redis

            self.ns = f"eo{uuid.uuid4().hex[:8]}"
            self.client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
            self.spec = {"kind": "redis", "namespace": self.ns, "key_columns": ["k"], "url": REDIS_URL}

    def sink(self, **kw):
        return open_sink(self.url, **self.extra, **({"target": dict(self.spec)} if self.spec else {}), **kw)

    def rows(self, part: str = PART) -> list[tuple[int, str]]:
        if self.kind == "files":
            return visible_rows(self.sink(), part)
        if self.kind == "delta":
            dt = self.sink().target.snapshot()
            if dt is None:
                return []
            t = dt.to_pyarrow_table()
            day = part.split("=", 1)[1]
            return sorted((k, v) for k, v, d in zip(t.column("k").to_pylist(), t.column("v").to_pylist(),
                                                    t.column("dt").to_pylist()) if d == day)
        if self.kind == "redis":
            keys = [k for k in self.client.scan_iter(f"{self.ns}:{part}:*") if ":_eo:" not in k]
            return sorted((int(k.rsplit(":", 1)[1]), json.loads(self.client.get(k))["v"]) for k in keys)
        day = part.split("=", 1)[1]
        return sorted((int(k), v) for k, v in self.db.run(f"SELECT k, v FROM {self.db.q('t')} WHERE dt = %s",
                                                          (day,)))

    def close(self) -> None:
        if self.kind == "redis":
            for k in self.client.scan_iter(f"{self.ns}:*"):
                self.client.delete(k)
        elif hasattr(self, "db"):
            self.db.close()


def world_fixture(kinds):
    @pytest.fixture(params=kinds)
    def fixture(request, tmp_path, services):
        w = World(request.param, tmp_path, services)
        yield w
        w.close()
    return fixture


world = world_fixture(ALL)
db_world = world_fixture(["postgresql", "mysql"])


def states(sink, interval=IV) -> dict[int, State]:
    return {e: s.state for e, s in sink.status(interval).items()}


def write_table(sink, txn, part: str, table: pa.Table, name: str = "part-00000.parquet") -> str:
    path = sink.storage.join(sink.data_dir(txn), part, name)
    sink.storage.makedirs(sink.storage.join(sink.data_dir(txn), part))
    with sink.storage.open(path, "wb") as f:
        pq.write_table(table, f, compression="none")
    return path


def kv(rows, k_type=pa.int64()) -> pa.Table:
    return pa.table({"k": pa.array([r[0] for r in rows], k_type), "v": pa.array([r[1] for r in rows], pa.string())})


def assert_interval_usable(w: World, sink, interval=IV, part=PART) -> None:
    """The interval is not stuck: a new attempt begins, commits, and readers see exactly its rows."""
    good = make_rows("ok", 3)
    with sink.transaction(interval) as txn:
        write_output(sink, txn, {part: [good]})
    assert w.rows(part) == sorted(good)


# ------------------------------------------------------------------------------ class 5: the gate
def test_recovery_overlapping_a_failing_validation_never_commits(world):
    """A validator returns False while recovery runs (it is called from inside the validator): the data
    must not become live, and ``transaction()`` must raise."""
    sink, other = world.sink(), world.sink()
    recovered: list[list[str]] = []

    def validate(txn, manifest):
        recovered.append(other.recover())  # another process's `eo recover` overlaps the running gate
        return False, {"why": "the gate failed"}

    with pytest.raises(TransactionAbortedError, match="failed validation"):
        with sink.transaction(IV, validate=validate) as txn:
            write_output(sink, txn, {PART: [make_rows("bad", 4)]})
    assert recovered == [[]]  # recovery left the gated transaction to its running validation
    assert State.COMMITTED not in states(sink).values(), states(sink)
    assert world.rows() == []
    assert_interval_usable(world, sink)


def test_recovery_overlapping_a_passing_validation_waits_for_it(world):
    sink, other = world.sink(), world.sink()
    rows = make_rows("good", 4)

    def validate(txn, manifest):
        assert other.recover() == []  # not committed under the validator's feet
        assert other.status(IV)[txn.epoch].state is State.PRE_COMMITTED
        return True, {}

    with sink.transaction(IV, validate=validate) as txn:
        write_output(sink, txn, {PART: [rows]})
    assert states(sink) == {txn.epoch: State.COMMITTED} and world.rows() == sorted(rows)


def test_a_gated_transaction_left_without_verdict_is_aborted_never_committed(world):
    """A validating process died (no verdict): recovery waits while it may be alive, and a takeover
    aborts it; without the gate flag recovery would claim a passing verdict and publish it."""
    sink = world.sink()
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("unchecked", 3)]})
    sink.pre_commit(txn, gated=True)
    assert sink.recover(IV) == []
    assert sink.recover(IV, abort_open=True) and states(sink) == {txn.epoch: State.ABORTED}
    assert world.rows() == []


# ------------------------------------------------------------------------------ class 6: what commits
def test_same_size_rewrite_after_pre_commit_is_refused(world):
    """A stray writer replaces a staged file after pre_commit with other bytes of the same size: the
    commit aborts (StorageError) and nothing of it is published (locally: sha256 after the seal)."""
    _same_size_rewrite_is_refused(world)


@pytest.mark.s3
@pytest.mark.parametrize("kind", ["files", "delta"])
def test_same_size_rewrite_on_s3_is_refused(kind, tmp_path, services, s3_server):
    """The same on S3, where nothing can be renamed away from the writer: the LIST's ETags tell."""
    from conftest import make_bucket

    _same_size_rewrite_is_refused(World(kind, tmp_path, services, f"s3://{make_bucket(s3_server)}/warehouse/t"))


def _same_size_rewrite_is_refused(world: World) -> None:
    sink = world.sink()
    txn = sink.begin(IV)
    path = write_table(sink, txn, PART, kv(make_rows("a", 5)))
    sink.pre_commit(txn)
    size = sink.storage.file_meta(path)["size"]
    write_table(sink, txn, PART, kv(make_rows("b", 5)))  # same lengths, uncompressed: same size
    assert sink.storage.file_meta(path)["size"] == size
    with pytest.raises(StorageError, match="rewritten"):
        sink.commit(txn)
    assert states(sink) == {txn.epoch: State.ABORTED}
    assert world.rows() == []
    assert_interval_usable(world, sink)


# ------------------------------------------------------------------------------ class 2: refusals
def _refused_before_deciding(w: World, sink, txn, match: str | None) -> None:
    with pytest.raises(TargetSchemaError, match=match):
        sink.commit(txn)
    assert states(sink) == {txn.epoch: State.ABORTED}, states(sink)
    assert sink.status(IV)[txn.epoch].records["outcome"]["cause"] == "target_refused"
    assert w.rows() == []
    assert_interval_usable(w, sink)


@pytest.mark.parametrize("case", ["null", "type", "duplicate_key", "unknown_column"])
def test_database_refusals_happen_before_the_decision(db_world, case):
    sink = db_world.sink()
    txn = sink.begin(IV)
    rows = make_rows("a", 4)
    table = {"null": pa.table({"k": pa.array([1, 2], pa.int64()), "v": pa.array(["x", None], pa.string())}),
             "type": kv([("x1", "a"), ("x2", "b")], pa.string()),
             "duplicate_key": kv(rows + rows[:1]),
             "unknown_column": kv(rows).append_column("surprise", pa.array([1] * 4, pa.int64()))}[case]
    write_table(sink, txn, PART, table)
    sink.pre_commit(txn)
    _refused_before_deciding(db_world, sink, txn, None if case != "unknown_column" else "surprise")


@pytest.mark.parametrize("writer", ["alone", "another writer inserts in the interval"])
def test_database_rows_outside_the_interval_are_refused_before_the_decision(db_world, writer, monkeypatch):
    """replace by ``interval_column``: a staged row outside [start, end) would survive every reprocess
    (only the interval's rows are deleted) and double; it is refused before deciding. The check is on our
    rows: another writer's row committed inside the interval during the load cannot mask one of ours
    (today: the check counted the table's rows in the interval, and the outside row was published)."""
    db = db_world.db
    if writer != "alone":
        dialect = type(DIALECTS[db.kind])
        load, other = dialect.load, Db(db.url)
        racing = [True]

        def load_after_another_writer(self, cur, table_sql, cols, batches):
            if racing[0]:
                at = IV.start.astimezone(timezone.utc) + timedelta(hours=2)
                other.run(f"INSERT INTO {db.q('t')} (k, v, ts) VALUES (999, 'other', %s)",
                          (at if db.kind == "postgresql" else at.replace(tzinfo=None),))
            return load(self, cur, table_sql, cols, batches)

        monkeypatch.setattr(dialect, "load", load_after_another_writer)
    db.run(f"DROP TABLE {db.q('t')}")
    ts = "timestamptz" if db.kind == "postgresql" else "datetime(6)"
    db.run(f"CREATE TABLE {db.q('t')} (k bigint NOT NULL, v varchar(64) NOT NULL, ts {ts} NOT NULL)")
    spec = {**db_world.spec, "interval_column": "ts", "partition_columns": False}
    sink = open_sink(db_world.url, target=spec)
    start = IV.start.astimezone(timezone.utc)
    stamps = [start + timedelta(hours=1), start + timedelta(days=1, hours=1)]  # the second is tomorrow
    table = pa.table({"k": pa.array([1, 2], pa.int64()), "v": pa.array(["in", "out"], pa.string()),
                      "ts": pa.array(stamps, pa.timestamp("us", tz="UTC"))})
    txn = sink.begin(IV)
    write_table(sink, txn, PART, table)
    sink.pre_commit(txn)
    with pytest.raises(TargetSchemaError, match="outside the interval"):
        sink.commit(txn)
    assert states(sink) == {txn.epoch: State.ABORTED}
    assert db.rows("t", "k, v") == ([] if writer == "alone" else [(999, "other")])
    if writer != "alone":
        racing[0] = False
        other.close()
    for _ in range(2):  # the fixed job (rows inside only), run twice: the interval holds them once
        with sink.transaction(IV) as txn:
            write_table(sink, txn, PART, table.slice(0, 1))
    assert db.rows("t", "k, v") == [(1, "in")]


def test_database_change_after_the_decision_names_the_way_out(db_world, monkeypatch):
    """A column dropped between the check and the publish (the only refusal left after the decision):
    the error names the command, nothing is lost, other intervals go on, and the fix plus
    ``recover`` publishes the interval once."""
    sink, db = db_world.sink(), db_world.db
    rows = make_rows("a", 4)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [rows]})
    sink.pre_commit(txn)
    monkeypatch.setenv("EO_FAILPOINTS", "commit.before_publish=error")
    with pytest.raises(FailpointError):
        sink.commit(txn)  # decided COMMITTED, not published
    monkeypatch.delenv("EO_FAILPOINTS")
    db.run(f"ALTER TABLE {db.q('t')} DROP COLUMN v")
    with pytest.raises(TargetSchemaError, match=r"COMMITTED.*eo recover"):
        sink.commit(txn)
    with pytest.raises(TargetSchemaError, match="eo recover"):
        sink.begin(IV)  # the interval waits for the fix, saying how
    assert any(a.startswith("FAILED") and "eo recover" in a for a in sink.recover())  # never raises for all
    db.run(f"ALTER TABLE {db.q('t')} ADD COLUMN v varchar(64) NOT NULL DEFAULT ''")
    other = make_rows("b", 2)
    with sink.transaction(IV2) as txn2:  # another interval is not blocked
        write_output(sink, txn2, {PART2: [other]})
    assert db_world.rows(PART2) == sorted(other)
    assert any("rolled forward" in a for a in sink.recover())
    assert db_world.rows() == sorted(rows) and sink.status(IV)[txn.epoch].published


@pytest.fixture
def redis_world(tmp_path, services):
    w = World("redis", tmp_path, services)
    yield w
    w.close()


@pytest.mark.parametrize("case", ["duplicate_key", "null_key", "missing_key_column"])
def test_redis_refusals_happen_before_the_decision(redis_world, case):
    sink = redis_world.sink()
    txn = sink.begin(IV)
    rows = make_rows("a", 3)
    table = {"duplicate_key": kv(rows + rows[:1]),
             "null_key": pa.table({"k": pa.array([1, None], pa.int64()), "v": pa.array(["x", "y"])}),
             "missing_key_column": pa.table({"v": pa.array(["x"])})}[case]
    write_table(sink, txn, PART, table)
    sink.pre_commit(txn)
    _refused_before_deciding(redis_world, sink, txn, {"duplicate_key": "duplicate key", "null_key": "null",
                                                      "missing_key_column": "no column"}[case])


def a_decided_then_b_refused(sink, a, b, monkeypatch) -> None:
    """``a`` decides COMMITTED and fails before its publish; ``b`` (staging a clashing type for ``a``'s
    new column) is then refused before its own decision; ``a``'s retry publishes."""
    sink.pre_commit(a)
    sink.pre_commit(b)
    monkeypatch.setenv("EO_FAILPOINTS", "commit.before_publish=error")
    with pytest.raises(FailpointError):
        sink.commit(a)  # decided COMMITTED, not published
    monkeypatch.delenv("EO_FAILPOINTS")
    with pytest.raises(TargetSchemaError, match="extra"):
        sink.commit(b)
    assert sink.status(b.interval)[b.epoch].state is State.ABORTED
    sink.commit(a)  # the retry publishes


def test_delta_schema_widened_by_another_interval_after_the_check(tmp_path, services, monkeypatch):
    """Interval A passes its check and decides, but has not published; interval B then stages the same
    new column with another type. B must be refused before ITS decision (A's columns are reserved by
    A's check), and A's publish must still go through - never an interval COMMITTED and unpublishable."""
    w = World("delta", tmp_path, services)
    sink = w.sink()
    with sink.transaction(IV2) as first:  # the table exists: (k, v, dt)
        write_output(sink, first, {PART2: [make_rows("base", 2)]})
    a, b = sink.begin(IV), w.sink().begin(Interval.daily("2026-01-03"))
    write_table(sink, a, PART, kv(make_rows("a", 2)).append_column("extra", pa.array(["s", "t"])))
    write_table(sink, b, "dt=2026-01-03", kv(make_rows("b", 2)).append_column("extra", pa.array([1, 2])))
    a_decided_then_b_refused(sink, a, b, monkeypatch)
    assert w.rows() == sorted(make_rows("a", 2)) and sink.status(IV)[a.epoch].published
    assert w.rows("dt=2026-01-03") == []


def test_delta_first_publishes_with_clashing_types_are_refused_before_the_decision(tmp_path, services, monkeypatch):
    """The same before the table exists: the first check creates it (no files) with its columns, so the
    second first-publish staging another type is refused before its decision, not left COMMITTED."""
    w = World("delta", tmp_path, services)
    sink = w.sink()
    a, b = sink.begin(IV), sink.begin(IV2)
    write_table(sink, a, PART, kv(make_rows("a", 2)).append_column("extra", pa.array(["s", "t"])))
    write_table(sink, b, PART2, kv(make_rows("b", 2)).append_column("extra", pa.array([1, 2])))
    a_decided_then_b_refused(sink, a, b, monkeypatch)
    assert w.rows() == sorted(make_rows("a", 2)) and w.rows(PART2) == []
    assert_interval_usable(w, sink, IV2, PART2)


@pytest.mark.parametrize("first", ["hour", "day"])
def test_database_overlapping_intervals_of_one_table_are_refused_before_the_decision(db_world, first):
    """replace by ``interval_column``: an hour, then the day holding it (or the reverse), published into one
    table: the second's delete of its range would wipe the first's rows while the first's marker says
    published (today: the day deleted the hour's rows). The second is refused before deciding."""
    db = db_world.db
    db.run(f"DROP TABLE {db.q('t')}")
    ts = "timestamptz" if db.kind == "postgresql" else "datetime(6)"
    db.run(f"CREATE TABLE {db.q('t')} (k bigint NOT NULL, v varchar(64) NOT NULL, ts {ts} NOT NULL)")
    sink = open_sink(db_world.url, target={**db_world.spec, "interval_column": "ts", "partition_columns": False})
    start = IV.start.astimezone(timezone.utc)
    hour = Interval(start + timedelta(hours=5), start + timedelta(hours=6))

    def table(tag: str, hours: int) -> pa.Table:
        return pa.table({"k": pa.array([hours], pa.int64()), "v": pa.array([tag], pa.string()),
                         "ts": pa.array([start + timedelta(hours=hours, minutes=30)], pa.timestamp("us", tz="UTC"))})

    (iv1, t1), (iv2, t2) = [(hour, table("hour", 5)), (IV, table("day", 10))][::1 if first == "hour" else -1]
    with sink.transaction(iv1) as txn:
        write_table(sink, txn, "p=1", t1)
    txn = sink.begin(iv2)
    write_table(sink, txn, "p=2", t2)
    sink.pre_commit(txn)
    with pytest.raises(TargetSchemaError, match="overlaps"):
        sink.commit(txn)
    assert states(sink, iv2) == {txn.epoch: State.ABORTED}
    assert db.rows("t", "k, v") == [(t1["k"][0].as_py(), first)]
    assert sink.target.live_epoch(iv1) is not None
