"""The database targets' partitions another interval publishes in another spelling, against the real servers
(PostgreSQL and MariaDB on loopback), each test on both: a job writing a partition outside its own interval that
the database finds equal to a published one (``hour=3`` / ``hour=03`` in an int column, ``eu`` / ``EU`` under a
case-insensitive collation, keys in another order, the whole day) never deletes that interval's rows - refused
before the decision, in either order, empty partitions included, and when the two first publishes race."""
from __future__ import annotations

import uuid

import pytest
from target_helpers import stage, txn

from exactly_once import Interval
from exactly_once.errors import TargetSchemaError
from exactly_once.targets import DatabaseTarget

from .db_cases import DAY, IV, PART, db, db_url, rival_inside_load, target  # noqa: F401


def _hours_table(db, col: str = "hour int") -> tuple[str, DatabaseTarget]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, {col} NOT NULL, k varchar(20) NOT NULL, v int)")
    return name, target(db, name, commit_table=f"c_{name}")  # its own: a check may come before any marker


@pytest.mark.parametrize("col,ours,theirs", [("hour int", "hour=03", "hour=3"), ("hour int", "hour=03", "hour=3/dt"),
                                             ("hour int", "hour=03", "dt"), ("region varchar(8)", "region=EU", "region=eu")])
def test_a_partition_another_interval_publishes_in_another_spelling_is_not_deleted(db, tmp_path, col, ours, theirs):
    """A job writing a partition outside its own interval, spelled so that the text claims differ but the
    database finds the values equal (``hour=3`` beside the published ``hour=03`` in an int column, also with
    its keys in another order, or the whole day with the hour in its rows; ``eu`` beside ``EU`` under MariaDB's case-insensitive collation): its publish
    would delete the other interval's rows while that interval's marker says published. Refused by the check
    (before the decision) and by the publish; the other interval's rows stay. Where the values differ
    (PostgreSQL's ``EU``/``eu``) both publish."""
    name, t = _hours_table(db, col)
    mine = f"{PART}/{ours}"
    stray = f"{theirs.split('/')[0]}/{PART}" if theirs.endswith("/dt") else PART if theirs == "dt" else f"{PART}/{theirs}"
    key = col.split()[0]  # theirs "dt": the whole day, its hour a column of the rows - a key only one side has
    t.check(txn(epoch=1), stage(tmp_path, {mine: [[{"k": "a", "v": 1}, {"k": "b", "v": 2}]]}))  # no commit table yet
    assert t.publish(txn(epoch=1), stage(tmp_path, {mine: [[{"k": "a", "v": 1}, {"k": "b", "v": 2}]]})) == \
        {mine: "published"}
    staged = stage(tmp_path, {stray: [[{"k": "z", "v": 9, **({"hour": 3} if theirs == "dt" else {})}]]})  # off its day
    rows = lambda: sorted((str(r[0]), str(r[1]), r[2], int(r[3])) for r in db.rows(name, f"dt, {key}, k, v", "k"))
    before = rows()
    if db.kind == "postgresql" and key == "region":  # case-sensitive text: two values, two partitions
        assert t.publish(txn("2026-01-02", epoch=1), staged) == {stray: "published"}
        assert rows() == sorted(before + [(DAY, "eu", "z", 9)])
        return
    for step in (t.check, t.publish):
        with pytest.raises(TargetSchemaError, match=f"interval {IV.token}") as err:
            step(txn("2026-01-02", epoch=1), staged)
        assert "outside its own interval" in str(err.value), err.value
        assert rows() == before and t.live_epoch(IV) == 1
    assert t.live_epoch(Interval.daily("2026-01-02")) is None
    # the interval's own reprocess still replaces its rows, in either spelling
    assert t.publish(txn(epoch=2), stage(tmp_path, {mine: [[{"k": "c", "v": 3}]]})) == {mine: "published"}
    assert [r[2:] for r in rows()] == [("c", 3)]


@pytest.mark.parametrize("empty", [False, True])
def test_a_stray_partition_published_first_refuses_the_owner_and_loses_nothing(db, tmp_path, empty):
    """The other order: the stray (``hour=3`` of the next day's job, with rows or empty) is published before
    the owner's interval; the owner's first publish of ``hour=03`` is refused then - an empty partition is
    claimed too: accepted, the stray job's next run would delete the owner's rows while its marker says
    published - nothing is lost, and once the stray is fixed (its job run again without it) the owner
    publishes."""
    name, t = _hours_table(db)
    stray, mine = f"{PART}/hour=3", f"{PART}/hour=03"
    assert t.publish(txn("2026-01-02", epoch=1), stage(tmp_path, {stray: [] if empty else [[{"k": "z", "v": 9}]]})) \
        == {stray: "published"}
    for step in (t.check, t.publish):
        with pytest.raises(TargetSchemaError, match="interval 20260102"):
            step(txn(epoch=1), stage(tmp_path, {mine: [[{"k": "a", "v": 1}]]}))
    assert db.rows(name, "k", "k") == ([] if empty else [("z",)]) and t.live_epoch(IV) is None
    fixed = {"dt=2026-01-02/hour=3": [[{"k": "y", "v": 8}]]}  # the next day's job writes its own day
    assert t.publish(txn("2026-01-02", epoch=2), stage(tmp_path, fixed)) == {"dt=2026-01-02/hour=3": "published"}
    assert t.publish(txn(epoch=1), stage(tmp_path, {mine: [[{"k": "a", "v": 1}]]})) == {mine: "published"}
    assert [(str(r[0]), int(r[1]), r[2]) for r in db.rows(name, "dt, hour, k", "k")] == \
        [(DAY, 3, "a"), ("2026-01-02", 3, "y")]


def test_a_first_publish_racing_a_stray_of_its_partition_is_seen_by_it(db, tmp_path, monkeypatch):
    """The owner's first publish of ``hour=03`` has loaded its rows, not yet committed; the stray ``hour=3``
    of another interval is published meanwhile. It must queue on the table's partition lock (seen waiting)
    and, once the owner commits, see its rows and be refused - not delete them (its delete reads the latest
    committed rows, its check would have found none)."""
    name, t = _hours_table(db)
    mine, stray = f"{PART}/hour=03", f"{PART}/hour=3"
    result = rival_inside_load(monkeypatch, db, lambda: target(db, name, commit_table=f"c_{name}").publish(
        txn("2026-01-02", epoch=1), stage(tmp_path, {stray: [[{"k": "z", "v": 9}]]})))
    assert t.publish(txn(epoch=1), stage(tmp_path, {mine: [[{"k": "a", "v": 1}, {"k": "b", "v": 2}]]})) == \
        {mine: "published"}
    result["thread"].join(120)
    assert isinstance(result["rival"], TargetSchemaError), result["rival"]
    assert db.rows(name, "k", "k") == [("a",), ("b",)] and t.live_epoch(IV) == 1


@pytest.mark.parametrize("at", [499, 500], ids=["last-of-the-first-batch", "first-of-the-second"])
def test_a_spelling_past_the_probes_first_insert_batch_is_compared_too(db, tmp_path, at):
    """Another interval's marker names 600 partitions (empty: a marker claims them all the same), more spellings
    than one INSERT of the guard's probe carries (500): ours equals, in another spelling, one at the batch
    boundary (the 500th or the 501st in the probe's order) - refused like any other, nothing published."""
    name, t = _hours_table(db, "n int")
    theirs = [f"{PART}/n={i}" for i in range(600)]
    assert t.publish(txn("2026-01-02", epoch=1), stage(tmp_path, {p: [] for p in theirs})) == \
        {p: "published" for p in theirs}
    _, edge = sorted({("dt", DAY)} | {("n", str(i)) for i in range(600)})[at]  # (column, spelling), as probed
    mine = f"{PART}/n=0{edge}"
    with pytest.raises(TargetSchemaError, match=f"n={edge}'"):
        t.publish(txn(epoch=1), stage(tmp_path, {mine: [[{"k": "a", "v": 1}]]}))
    assert db.count(name) == 0 and t.live_epoch(IV) is None
