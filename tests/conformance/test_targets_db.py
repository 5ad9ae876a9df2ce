"""The database target against the real servers (PostgreSQL and MariaDB on loopback), each test on both.

One fresh database per server for this module (dropped after), one fresh table per test. Races are
forced at the exact point (the second publisher is started while the first holds the marker lock and
proceeds only once the server shows it waiting); crashes are real child processes ending in os._exit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from datetime import datetime

import pyarrow as pa
import pytest
from target_helpers import app_pv_ddl, gone, pv_rows, split, stage, txn

from exactly_once import Interval, UnsafeIdentifierError
from exactly_once.errors import TargetSchemaError, TargetUnavailableError
from exactly_once.targets import DatabaseTarget
from exactly_once.targets.base import StagedVersion

from .db_cases import (DAY, IV, PART, PORTS, app_rows, db, db_url, expected, marker, rival_inside_load,  # noqa: F401
                       table, target, wait_until_blocked)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------------- publish / already / superseded
def test_publish_already_superseded_and_lost_acknowledgement(db, table, tmp_path):
    t = target(db, table)
    v2 = pv_rows("a", 500)
    staged2 = stage(tmp_path, {PART: split(v2, 3)})
    assert t.live_epoch(IV) is None
    assert t.publish(txn(epoch=2), staged2) == {PART: "published"}
    assert app_rows(db, table) == expected(v2)
    assert marker(db, table) == (2, "pv_to_db", "app_pv", json.dumps([PART]), 500)
    # lost acknowledgement: the caller never learned, publishes the same epoch again -> nothing doubles
    assert t.publish(txn(epoch=2), staged2) == {PART: "already"}
    assert t.publish(txn(epoch=2), gone(staged2)) == {PART: "already"}  # ... even after the staging was cleaned up
    assert app_rows(db, table) == expected(v2) and t.live_epoch(IV) == 2
    # an older epoch (a zombie) never goes back
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("zombie", 9)]})) == {PART: "superseded"}
    assert app_rows(db, table) == expected(v2) and t.live_epoch(IV) == 2
    # a newer epoch (reprocessing) replaces the interval's rows; another interval is untouched
    other = pv_rows("other", 4)
    assert t.publish(txn("2026-01-02", epoch=1), stage(tmp_path, {"dt=2026-01-02": [other]})) == \
        {"dt=2026-01-02": "published"}
    v3 = pv_rows("b", 7, start=100)
    assert t.publish(txn(epoch=3), stage(tmp_path, {PART: [v3]})) == {PART: "published"}
    assert app_rows(db, table) == sorted(expected(v3) + expected(other, "2026-01-02"))
    assert t.live_epoch(IV) == 3 and t.live_epoch(Interval.daily("2026-01-02")) == 1


def test_replace_empties_partitions_a_reprocess_no_longer_produces(db, tmp_path):
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, hour int NOT NULL, k varchar(20) NOT NULL, v int)")
    t = target(db, name)
    parts = {f"{PART}/hour=00": [[{"k": "a", "v": 1}, {"k": "b", "v": 2}]], f"{PART}/hour=01": [[{"k": "c", "v": 3}]]}
    assert t.publish(txn(epoch=1), stage(tmp_path, parts)) == {f"{PART}/hour=00": "published",
                                                                 f"{PART}/hour=01": "published"}
    neighbour = {"dt=2026-01-02/hour=00": [[{"k": "n", "v": 9}]]}
    t.publish(txn("2026-01-02", epoch=1), stage(tmp_path, neighbour))
    # the reprocess produces hour=00 only; hour=01 is the previous version's and must go
    t.publish(txn(epoch=2), stage(tmp_path, {f"{PART}/hour=00": [[{"k": "a", "v": 10}]]}))
    rows = [(str(r[0]), int(r[1]), r[2], int(r[3])) for r in db.rows(name, "dt, hour, k, v", "dt, hour, k")]
    assert rows == [(DAY, 0, "a", 10), ("2026-01-02", 0, "n", 9)]
    # a reprocess that produces nothing: the interval is emptied, and its marker holds no partition and no row
    t.publish(txn(epoch=3), StagedVersion({f"{PART}/hour=00": ()}, lambda p, n: None,
                                          dropped=frozenset({f"{PART}/hour=00"})))
    assert [(str(r[0]), r[1]) for r in db.rows(name, "dt, k", "dt, k")] == [("2026-01-02", "n")]
    assert marker(db, name)[0] == 3 and json.loads(marker(db, name)[3]) == [] and marker(db, name)[4] == 0


def test_replace_by_interval_column(db, tmp_path):
    name = f"t_{uuid.uuid4().hex[:10]}"
    ts_type = "timestamptz" if db.kind == "postgresql" else "datetime(6)"
    db.run(f"CREATE TABLE {db.q(name)} (event_time {ts_type} NOT NULL, k varchar(20) NOT NULL, v int)")
    t = target(db, name, interval_column="event_time", partition_columns=False)
    ts = pa.timestamp("us", tz="UTC")
    schema = pa.schema([("event_time", ts), ("k", pa.string()), ("v", pa.int64())])

    def rows(day, ks, v):
        return [{"event_time": datetime.fromisoformat(f"{day}T{h:02d}:30:00+00:00"), "k": k, "v": v}
                for h, k in enumerate(ks)]

    # a row of the next day would survive every reprocess: refused on the staged rows, saying what to do (not
    # only by the landing check after the load, whose advice is about triggers)
    with pytest.raises(TargetSchemaError, match=r"1 staged row\(s\) have event_time outside the interval .*"
                       r"Filter them in the job"):
        t.check(txn(epoch=1), stage(tmp_path, {PART: [rows(DAY, "ab", 1) + rows("2026-01-02", "z", 1)]}, schema))
    t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows(DAY, "abc", 1)]}, schema))
    t.publish(txn("2026-01-02", epoch=1), stage(tmp_path, {"dt=2026-01-02": [rows("2026-01-02", "xy", 1)]}, schema))
    t.publish(txn(epoch=2), stage(tmp_path, {PART: [rows(DAY, "d", 2)]}, schema))
    got = sorted((r[0], int(r[1])) for r in db.rows(name, "k, v"))
    assert got == [("d", 2), ("x", 1), ("y", 1)]


def _hour_and_day(db, tmp_path):
    """A table replaced by ``event_time``; its target; the hour 05:00-06:00 and the day holding it, each with a
    row at its own time; and the staged version of each (``version(which, k)``)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    ts_type = "timestamptz" if db.kind == "postgresql" else "datetime(6)"
    db.run(f"CREATE TABLE {db.q(name)} (event_time {ts_type} NOT NULL, k varchar(20) NOT NULL)")
    t = target(db, name, interval_column="event_time", partition_columns=False)
    schema = pa.schema([("event_time", pa.timestamp("us", tz="UTC")), ("k", pa.string())])
    ivs = {"hour": (Interval(IV.start.replace(hour=5), IV.start.replace(hour=6)), "05:30"), "day": (IV, "10:30")}

    def version(which: str, k: str):
        at = datetime.fromisoformat(f"{DAY}T{ivs[which][1]}:00+00:00")
        return stage(tmp_path, {PART: [[{"event_time": at, "k": k}]]}, schema)
    return name, t, {w: iv for w, (iv, _) in ivs.items()}, version


@pytest.mark.parametrize("first", ["hour", "day"])
def test_an_interval_overlapping_a_published_one_is_refused_by_the_check(db, tmp_path, first):
    """replace by ``interval_column``: an hour, then the day holding it (or the reverse) into one table. The
    second's delete of its range would wipe the first's rows while the first's marker says published: the
    target's own ``check`` - before the decision - refuses it, and so does its publish."""
    from exactly_once.ids import TxnRef

    name, t, ivs, version = _hour_and_day(db, tmp_path)
    other = "day" if first == "hour" else "hour"
    assert t.publish(TxnRef("p", "s", ivs[first], 1), version(first, first)) == {PART: "published"}
    for step in (t.check, t.publish):
        with pytest.raises(TargetSchemaError, match="overlaps"):
            step(TxnRef("p", "s", ivs[other], 1), version(other, "second"))
    assert [r[0] for r in db.rows(name, "k")] == [first] and t.live_epoch(ivs[first]) == 1
    assert t.live_epoch(ivs[other]) is None


def test_two_first_publishes_of_overlapping_intervals_queue_and_the_second_is_refused(db, tmp_path, monkeypatch):
    """The hour's first publish has loaded its rows, not yet committed; the day holding it publishes meanwhile.
    Its overlap check must queue behind the hour's (on the table's lock, also unclaimed) and then see the hour's marker
    and be refused - not find no published marker, delete the hour's rows and publish beside it."""
    from exactly_once.ids import TxnRef

    name, t, ivs, version = _hour_and_day(db, tmp_path)
    result = rival_inside_load(monkeypatch, db, lambda: target(
        db, name, interval_column="event_time", partition_columns=False).publish(TxnRef("p", "s", ivs["day"], 1),
                                                                                 version("day", "day")))
    assert t.publish(TxnRef("p", "s", ivs["hour"], 1), version("hour", "hour")) == {PART: "published"}
    result["thread"].join(120)
    assert isinstance(result["rival"], TargetSchemaError) and "overlaps" in str(result["rival"]), result["rival"]
    assert [r[0] for r in db.rows(name, "k")] == ["hour"] and t.live_epoch(ivs["hour"]) == 1
    assert t.live_epoch(ivs["day"]) is None


# ------------------------------------------------------------------------- upsert
def test_upsert_reprocess_updates_and_keeps_keys_it_no_longer_produces(db, table, tmp_path):
    t = target(db, table, mode="upsert", key_columns=("dt", "app_id"))
    v1 = pv_rows("k", 10)
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: split(v1, 2)})) == {PART: "published"}
    v2 = [{**r, "pv": r["pv"] + 1000} for r in v1[:5]]  # the reprocess produces only the first five keys
    # ... published by the target rebuilt from its binding's spec (``eo recover``, a child process): same keys
    t = DatabaseTarget.from_spec(json.loads(json.dumps(t.binding()["spec"])), url=db.url)
    assert t.key_columns == ("dt", "app_id")
    assert t.publish(txn(epoch=2), stage(tmp_path, {PART: [v2]})) == {PART: "published"}
    assert t.publish(txn(epoch=2), stage(tmp_path, {PART: [v2]})) == {PART: "already"}
    assert app_rows(db, table) == sorted(expected(v2) + expected(v1[5:]))  # upsert never deletes


def test_upsert_refuses_a_table_without_that_unique_key(db, tmp_path):
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(app_pv_ddl(db.kind, name, unique=False))
    t = target(db, name, mode="upsert", key_columns=("dt", "app_id"))
    with pytest.raises(TargetSchemaError, match=r"PRIMARY KEY or UNIQUE index on exactly .*CREATE UNIQUE INDEX"):
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 3)]}))
    assert db.count(name) == 0 and t.live_epoch(IV) is None


def test_duplicate_keys_in_the_staged_rows_publish_nothing(db, table, tmp_path):
    rows = pv_rows("a", 3)
    for mode in ("replace", "upsert"):
        t = target(db, table, mode=mode, key_columns=("dt", "app_id"))
        with pytest.raises(TargetSchemaError, match="nothing was published"):
            t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows, rows[:1]]}))
        assert db.count(table) == 0 and t.live_epoch(IV) is None


# ------------------------------------------------------------------------- two publishers at once
@pytest.mark.parametrize("a_epoch,b_epoch,b_verdict", [(2, 2, "already"), (3, 2, "superseded"),
                                                       (2, 3, "published")])
def test_two_publishers_at_once_one_marker_wins(db, table, tmp_path, monkeypatch, a_epoch, b_epoch, b_verdict):
    """A holds the marker lock (between reading it and loading); B runs its whole publish meanwhile and
    must queue on the lock; then A commits. B sees A's marker: same epoch -> already, older -> superseded
    (B writes nothing), newer -> B replaces A's rows. Never both, never a mix."""
    a_rows, b_rows = pv_rows("A", 40), pv_rows("B", 30, start=500)
    a_staged, b_staged = stage(tmp_path, {PART: split(a_rows, 2)}), stage(tmp_path, {PART: [b_rows]})
    if a_epoch == b_epoch:
        b_rows, b_staged = a_rows, a_staged  # same epoch = same sealed output, two finishers
    a, b = target(db, table), target(db, table)
    result: dict[str, object] = {}
    real_load = DatabaseTarget._load
    fired = []

    def load(self, *args):
        if not fired:
            fired.append(1)
            thread = threading.Thread(target=lambda: result.update(b=b.publish(txn(epoch=b_epoch), b_staged)))
            thread.start()
            result["thread"] = thread
            wait_until_blocked(db)
        return real_load(self, *args)

    monkeypatch.setattr(DatabaseTarget, "_load", load)
    assert a.publish(txn(epoch=a_epoch), a_staged) == {PART: "published"}
    result["thread"].join(120)
    assert fired and result["b"] == {PART: b_verdict}
    winner = b_rows if b_verdict == "published" else a_rows
    assert app_rows(db, table) == expected(winner)
    assert a.live_epoch(IV) == max(a_epoch, b_epoch)


# ------------------------------------------------------------------------- crashes (real processes)
def _child(db, table, staged, epoch: int, crash: str | None = None, failpoints: str | None = None,
           day: str = DAY) -> subprocess.CompletedProcess:
    spec = {"target": "db", "config": {"table": table, "url": db.url}, "staged": staged.root,
            "txn": txn(day, epoch=epoch).to_dict(), "crash": crash}
    env = {**os.environ, "EO_FAILPOINTS": failpoints or ""}
    return subprocess.run([sys.executable, os.path.join(ROOT, "tests", "target_child.py"), json.dumps(spec)],
                          env=env, capture_output=True, text=True, timeout=120)


def test_crash_between_the_db_commit_and_the_return(db, table, tmp_path):
    rows = pv_rows("c", 300)
    staged = stage(tmp_path, {PART: split(rows, 3)})
    proc = _child(db, table, staged, epoch=1, crash="after_target_commit")
    assert proc.returncode == 137, proc.stderr
    t = target(db, table)
    assert t.live_epoch(IV) == 1  # recovery reads this: the lost acknowledgement is rolled forward ...
    assert t.publish(txn(epoch=1), staged) == {PART: "already"}  # ... never re-applied
    assert app_rows(db, table) == expected(rows)


def test_crash_before_the_db_commit_publishes_nothing(db, table, tmp_path):
    old = pv_rows("old", 5)
    target(db, table).publish(txn(epoch=1), stage(tmp_path, {PART: [old]}))
    rows = pv_rows("c", 300)
    staged = stage(tmp_path, {PART: split(rows, 3)})
    proc = _child(db, table, staged, epoch=2, failpoints="commit.mid_publish=crash")
    assert proc.returncode == 137, proc.stderr
    t = target(db, table)
    assert t.live_epoch(IV) == 1 and app_rows(db, table) == expected(old)  # rolled back by the server
    assert t.publish(txn(epoch=2), staged) == {PART: "published"}
    assert app_rows(db, table) == expected(rows)


def test_the_seeds_wal_defect_naive_loader_doubles_ours_does_not(db, table, tmp_path):
    """The seed's GenericWriteAheadSink defect: the batch is written, the job dies while the write is being
    acknowledged, the restart writes the batch again. A naive at-least-once loader (INSERT, COMMIT, then
    record the acknowledgement) doubles the rows; the target, whose acknowledgement is the marker committed
    with the rows, does not."""
    rows = pv_rows("w", 50)
    naive = f"n_{uuid.uuid4().hex[:10]}"
    db.run(app_pv_ddl(db.kind, naive, unique=False))  # a target with no transactions of ours: no key either
    ack = tmp_path / "acknowledged"
    code = (
        "import os, sys\n"
        f"sys.path[:0] = [{os.path.join(ROOT, 'tests')!r}]\n"
        "from target_helpers import Db\n"
        f"db = Db({db.url!r})\n"
        f"rows = {[(DAY, r['app_id'], r['pv'], r['uv'], r['cumulative_pv']) for r in rows]!r}\n"
        f"if not os.path.exists({str(ack)!r}):\n"
        "    with db.conn.cursor() as cur:\n"
        f"        cur.executemany('INSERT INTO {db.q(naive)} VALUES (%s, %s, %s, %s, %s)', rows)\n"
        "    db.conn.commit()\n"
        "    if os.environ.get('CRASH'): os._exit(137)  # dies while acknowledging\n"
        f"    open({str(ack)!r}, 'w').close()\n")
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, "CRASH": "1"}).returncode == 137
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0  # the restart
    assert db.count(naive) == 2 * len(rows)  # the defect: every row twice

    staged = stage(tmp_path, {PART: [rows]})
    assert _child(db, table, staged, epoch=1, crash="after_target_commit").returncode == 137
    proc = _child(db, table, staged, epoch=1)  # the restart publishes the same committed transaction
    assert proc.returncode == 0 and json.loads(proc.stdout) == {PART: "already"}
    assert app_rows(db, table) == expected(rows)


# ------------------------------------------------------------------------- bad tables, bad types
def test_a_table_that_does_not_exist(db, tmp_path):
    t = target(db, "no_such_table")
    with pytest.raises(TargetSchemaError, match=r"no_such_table does not exist .*create it"):
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 3)]}))
    assert t.live_epoch(IV) is None


def test_create_sql_makes_a_missing_table_once(db, tmp_path):
    name = f"t_{uuid.uuid4().hex[:10]}"
    t = target(db, name, create_sql=app_pv_ddl(db.kind, name))
    rows = pv_rows("a", 5)
    t.check(txn(epoch=1), stage(tmp_path, {PART: [rows]}))  # before the decision: made for the dry run too
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    assert t.publish(txn(epoch=2), stage(tmp_path, {PART: [rows]})) == {PART: "published"}  # exists: not rerun
    assert app_rows(db, name) == expected(rows)


def test_a_table_another_process_creates_meanwhile_is_used(db, tmp_path, monkeypatch, caplog):
    """Two first publishes with create_sql at once: the other process creates the table between our look and our
    CREATE, which fails as 'already exists' - the target goes on with that table and publishes, at once (not
    starting over as if the server had gone away)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    ddl = app_pv_ddl(db.kind, name)
    t = target(db, name, create_sql=ddl)
    dialect, raced = type(t.dialect), []
    real = dialect.table_info

    def table_info(self, cur, table, *a, **kw):
        if table == name and not raced:  # our look: absent; then the other process creates it
            raced.append(db.run(ddl))
            return None
        return real(self, cur, table, *a, **kw)

    monkeypatch.setattr(dialect, "table_info", table_info)
    rows = pv_rows("a", 3)
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    assert raced and app_rows(db, name) == expected(rows)
    assert not [r.getMessage() for r in caplog.records if "starting over" in r.getMessage()]


def test_a_column_that_does_not_exist(db, table, tmp_path):
    rows = [{**r, "surprise": 1} for r in pv_rows("a", 3)]
    t = target(db, table)
    with pytest.raises(TargetSchemaError, match=r"no column\(s\) \['surprise'\].*ALTER TABLE"):
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]}))
    assert db.count(table) == 0 and t.live_epoch(IV) is None


@pytest.mark.parametrize("mode", ["replace", "upsert"])
def test_a_not_null_column_the_rows_lack_is_refused_before_the_decision(db, tmp_path, mode):
    """A NOT NULL column without a default that the staged rows do not carry: the database refuses the
    load (MariaDB 1364, PostgreSQL 23502) and the dry run says so as a schema refusal - the interval aborts
    before the decision, never retried as if the server were away."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, k int NOT NULL, v varchar(20), must int NOT NULL, "
           "PRIMARY KEY (dt, k))")
    t = target(db, name, mode=mode, key_columns=("dt", "k") if mode == "upsert" else (), retries=0)
    with pytest.raises(TargetSchemaError) as err:
        t.check(txn(epoch=1), stage(tmp_path, {PART: [[{"k": 1, "v": "a"}]]}))
    assert "must" in str(err.value), err.value
    assert db.count(name) == 0 and t.live_epoch(IV) is None


def test_staged_files_that_disagree_on_columns_publish_nothing(db, table, tmp_path):
    """The second file lacks a column: found while the bulk load streams (in the prefetch thread), raised
    in the publisher, rolled back."""
    t = target(db, table, batch_rows=10)
    good = pv_rows("g", 30)
    short = [{k: v for k, v in r.items() if k != "uv"} for r in pv_rows("s", 30, start=100)]
    with pytest.raises(TargetSchemaError, match=r"lacks column\(s\) \['uv'\].*nothing was published"):
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [good, short]}))
    assert db.count(table) == 0 and t.live_epoch(IV) is None
    # the other way round: the columns are the first file's, so a later file's own column would be dropped
    # (its values lost, or - a partition key in another case - never checked against its directory)
    with pytest.raises(TargetSchemaError, match=r"has column\(s\) \['uv'\] that other staged files lack"):
        t.check(txn(epoch=1), stage(tmp_path, {PART: [short, good]}))
    assert db.count(table) == 0 and t.live_epoch(IV) is None


def test_two_staged_columns_that_are_one_column_of_the_table_are_refused(db, tmp_path):
    """MariaDB's column names ignore case: ``v`` and ``V`` of one file would both load into ``v`` (LOAD DATA
    keeps the last, without a word): refused before the decision. PostgreSQL's table has no ``V``."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, k int, v varchar(20))")
    rows = [{"k": 1, "v": "lower", "V": "upper"}]
    with pytest.raises(TargetSchemaError, match="one column" if db.kind == "mysql" else "no column") as err:
        DatabaseTarget(name, url=db.url).check(txn(epoch=1), stage(tmp_path, {PART: [rows]}))
    assert "'V'" in str(err.value), err.value
    assert db.count(name) == 0


@pytest.mark.parametrize("mode", ["replace", "upsert"])
def test_a_type_mismatch_rolls_back_and_publishes_nothing(db, table, tmp_path, mode):
    t = target(db, table, mode=mode, key_columns=("dt", "app_id"))
    good = pv_rows("g", 20)
    t.publish(txn(epoch=1), stage(tmp_path, {PART: [good]}))
    bad = [{**r, "pv": str(r["pv"])} for r in pv_rows("b", 20)]
    bad[13]["pv"] = "not a number"
    with pytest.raises(TargetSchemaError, match="nothing was published") as err:
        t.publish(txn(epoch=2), stage(tmp_path, {PART: split(bad, 2)}))
    assert "not a number" in str(err.value) or "pv" in str(err.value)
    assert app_rows(db, table) == expected(good) and t.live_epoch(IV) == 1  # the delete rolled back too


def test_a_target_that_is_not_a_transactional_table_is_refused(db, table, tmp_path):
    """A view is refused on both; on MySQL/MariaDB so is a table whose engine has no transactions (the
    rows and the marker could not commit together)."""
    view = f"v_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE VIEW {db.q(view)} AS SELECT * FROM {db.q(table)}")
    with pytest.raises(TargetSchemaError, match="not a table"):
        target(db, view).publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
    if db.kind == "mysql":
        name = f"t_{uuid.uuid4().hex[:10]}"
        db.run(app_pv_ddl(db.kind, name).replace("ENGINE=InnoDB", "ENGINE=MyISAM"))
        with pytest.raises(TargetSchemaError, match="no transactions.*ENGINE=InnoDB"):
            target(db, name).publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
        assert db.count(name) == 0
    assert db.count(table) == 0 and target(db, view).live_epoch(IV) is None


# ------------------------------------------------------------------------- SQL metacharacters
@pytest.mark.parametrize("kind", ["postgresql", "mysql"])  # a kind: make mutants' rows run it
@pytest.mark.parametrize("bad", ['app_pv"; DROP TABLE x; --', "app_pv`; DROP TABLE x", "a b", "1abc", "t;",
                                 "s.t.u", "", "app_pv'--"])
def test_unsafe_identifiers_are_refused(bad, kind):
    url = f"{kind}://root@127.0.0.1:{PORTS[kind]}/x"
    with pytest.raises(UnsafeIdentifierError):
        DatabaseTarget(bad, url=url)
    with pytest.raises(UnsafeIdentifierError):
        DatabaseTarget("t", url=url, mode="upsert", key_columns=(bad,))
    with pytest.raises(UnsafeIdentifierError):
        DatabaseTarget("t", url=url, commit_table=bad)


def test_values_and_reserved_word_columns_travel_verbatim(db, tmp_path):
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, {db.q('select')} varchar(200), {db.q('order')} int, "
           f"{db.q('from')} double precision)")
    nasty = ["'); DROP TABLE " + name + "; --", 'quote " double', "back\\slash \\N \\n", "comma, semi; colon:",
             "line\nbreak\r\nwindows", "NULL", "", None, "tab\there", "ünïcödé ✓ 𝄞", "%s %(x)s {}", "`tick`"]
    rows = [{"select": s, "order": i, "from": (i / 3 if i % 2 else None)} for i, s in enumerate(nasty)]
    t = target(db, name)
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    got = db.rows(name, f"{db.q('select')}, {db.q('order')}, {db.q('from')}", db.q("order"))
    assert [(g[0], g[1], g[2]) for g in got] == [(r["select"], r["order"], r["from"]) for r in rows]
    assert db.count(name) == len(nasty)  # the table is still there


# ------------------------------------------------------------------------- the server goes away
def _kill_target_session(db) -> None:
    if db.kind == "postgresql":
        pids = db.run("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND "
                      "application_name = 'exactly-once' AND pid <> pg_backend_pid()")
        assert len(pids) == 1, pids
        db.run("SELECT pg_terminate_backend(%s)", (pids[0][0],))
    else:
        ids = db.run("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()")
        assert len(ids) == 1, ids
        db.run(f"KILL CONNECTION {int(ids[0][0])}")


@pytest.mark.parametrize("retries", [0, 2])
def test_a_server_that_goes_away_mid_load_and_the_retry_ends_exact(db, table, tmp_path, monkeypatch, retries):
    old = pv_rows("old", 8)
    target(db, table).publish(txn(epoch=1), stage(tmp_path, {PART: [old]}))
    rows = pv_rows("n", 3000)
    staged = stage(tmp_path, {PART: split(rows, 3)})
    real = DatabaseTarget._batches
    killed = []

    def batches(self, *args):
        for i, b in enumerate(real(self, *args)):
            if i == 1 and not killed:  # the previous rows are deleted, the load has begun
                killed.append(1)
                _kill_target_session(db)
            yield b

    monkeypatch.setattr(DatabaseTarget, "_batches", batches)
    t = target(db, table, retries=retries, batch_rows=500)
    if retries == 0:
        with pytest.raises(TargetUnavailableError, match="publishing again is safe"):
            t.publish(txn(epoch=2), staged)
        assert killed and app_rows(db, table) == expected(old) and t.live_epoch(IV) == 1
        assert t.publish(txn(epoch=2), staged) == {PART: "published"}  # the protocol's retry
    else:
        assert t.publish(txn(epoch=2), staged) == {PART: "published"}  # started over on a new connection
        assert killed
    assert app_rows(db, table) == expected(rows) and t.live_epoch(IV) == 2


def test_a_column_named_like_a_partition_key_in_another_case(db, tmp_path):
    """``DT`` beside the partition key ``dt``: PostgreSQL's quoted names are case-sensitive, so it is a column
    of its own and keeps the job's values; MariaDB's are not, so it is the partition column and a value that
    disagrees with its directory is refused before anything is written."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    rows = [{"k": 1, "DT": "mine"}, {"k": 2, "DT": "also mine"}]
    if db.kind == "postgresql":
        db.run(f'CREATE TABLE {db.q(name)} (dt date NOT NULL, k int, "DT" varchar(20))')
        assert DatabaseTarget(name, url=db.url).publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == \
            {PART: "published"}
        assert [(str(r[0]), r[1], r[2]) for r in db.rows(name, 'dt, k, "DT"', "k")] == \
            [(DAY, 1, "mine"), (DAY, 2, "also mine")]
    else:
        db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, k int) ENGINE=InnoDB")
        other_day = [{"k": 1, "DT": "2026-01-05"}]  # was: silently loaded as the directory's day
        with pytest.raises(TargetSchemaError, match="partition column") as err:
            DatabaseTarget(name, url=db.url).check(txn(epoch=1), stage(tmp_path, {PART: [other_day]}))
        assert "2026-01-05" in str(err.value), err.value
        assert db.count(name) == 0
        agree = [{"k": 1, "DT": DAY}]
        assert DatabaseTarget(name, url=db.url).publish(txn(epoch=1), stage(tmp_path, {PART: [agree]})) == \
            {PART: "published"}
        assert [(str(r[0]), r[1]) for r in db.rows(name, "dt, k", "k")] == [(DAY, 1)]
