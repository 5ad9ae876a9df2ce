"""The database targets' reservations, against the real servers (PostgreSQL and MariaDB on loopback), each test on
both: an interval's check - the dry run before its decision - reserves what it brings that is new to the table
(partitions new to it, its range), so another interval bringing an equal partition or an overlapping range is
refused at *its* check, before its decision, and a decided commit is never refused at its publish for what
another interval brought meanwhile (review 44, fifth round: it stayed decided and unpublishable for good)."""
from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from target_helpers import stage

from exactly_once import Interval
from exactly_once.errors import TargetSchemaError
from exactly_once.ids import TxnRef

from .db_cases import DAY, PART, db, db_url, target  # noqa: F401


def hour(h: int) -> Interval:
    start = datetime(2026, 1, 1, h, tzinfo=timezone.utc)
    return Interval(start, start + timedelta(hours=1))


def _partitioned(db):
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, hour int NOT NULL, k varchar(20) NOT NULL)")
    return name, (lambda: target(db, name, commit_table=f"c_{name}"))


def _reserved(db, name, iv: Interval):
    rows = db.run(f"SELECT reserved FROM {db.q('c_' + name)} WHERE target = %s AND interval_token = %s",
                  (name, iv.token))
    return json.loads(rows[0][0]) if rows and rows[0][0] else None


def test_a_check_reserves_its_new_partitions_and_a_decided_commit_publishes_after_a_rival_check(db, tmp_path):
    """03:00's check passes (its commit would be decided next); before it publishes, 05:00's job writes
    ``hour=3`` - equal to 03:00's ``hour=03`` in the int column. 05:00's check is refused (naming the
    reservation), nothing of it published; 03:00 then publishes - not refused after its decision - and its
    publish clears the reservation."""
    name, t = _partitioned(db)
    mine, theirs = f"{PART}/hour=03", f"{PART}/hour=3"
    ours = stage(tmp_path, {mine: [[{"k": "a"}]]})
    t().check(TxnRef("p", "s", hour(3), 1), ours)
    assert _reserved(db, name, hour(3)) == {"epoch": 1, "partitions": [mine]}
    with pytest.raises(TargetSchemaError, match=rf"reserved by its check.*`eo recover`.*WHERE target = '{name}' AND"):
        t().check(TxnRef("p", "s", hour(5), 1), stage(tmp_path, {theirs: [[{"k": "stray"}]]}))
    assert t().publish(TxnRef("p", "s", hour(3), 1), ours) == {mine: "published"}
    assert [r[0] for r in db.rows(name, "k")] == ["a"] and _reserved(db, name, hour(3)) is None
    assert t().live_epoch(hour(3)) == 1 and t().live_epoch(hour(5)) is None


def test_a_stale_reservation_is_replaced_by_its_intervals_next_check_and_never_by_an_older_epoch(db, tmp_path):
    """05:00's job once wrote ``hour=3`` and its check reserved it, but it never committed; fixed, its next
    check (epoch 2) reserves ``hour=05`` instead, and the owner of ``hour=03`` passes. A late check of the old
    epoch 1 (a zombie) does not put its reservation back over epoch 2's."""
    name, t = _partitioned(db)
    t().check(TxnRef("p", "s", hour(5), 1), stage(tmp_path, {f"{PART}/hour=3": [[{"k": "stray"}]]}))
    with pytest.raises(TargetSchemaError, match="reserved by its check"):
        t().check(TxnRef("p", "s", hour(3), 1), stage(tmp_path, {f"{PART}/hour=03": [[{"k": "a"}]]}))
    fixed = stage(tmp_path, {f"{PART}/hour=05": [[{"k": "e"}]]})
    t().check(TxnRef("p", "s", hour(5), 2), fixed)
    t().check(TxnRef("p", "s", hour(5), 1), stage(tmp_path, {f"{PART}/hour=3": [[{"k": "zombie"}]]}))
    assert _reserved(db, name, hour(5)) == {"epoch": 2, "partitions": [f"{PART}/hour=05"]}
    ours = stage(tmp_path, {f"{PART}/hour=03": [[{"k": "a"}]]})
    t().check(TxnRef("p", "s", hour(3), 1), ours)
    assert t().publish(TxnRef("p", "s", hour(3), 1), ours) == {f"{PART}/hour=03": "published"}
    assert t().publish(TxnRef("p", "s", hour(5), 2), fixed) == {f"{PART}/hour=05": "published"}
    assert sorted(r[0] for r in db.rows(name, "k")) == ["a", "e"]


def test_an_interval_column_check_reserves_its_range(db, tmp_path):
    """Replace by ``event_time``: the hour's check passes; the day holding it is refused at its own check
    while the hour is reserved, not yet published; the hour then publishes."""
    name, t, version = _by_time(db, tmp_path)
    h = version("05:30", "hour")
    t().check(TxnRef("p", "s", hour(5), 1), h)
    with pytest.raises(TargetSchemaError, match="overlaps.*reserved by its check"):
        t().check(TxnRef("p", "s", Interval.daily(DAY), 1), version("10:30", "day"))
    assert t().publish(TxnRef("p", "s", hour(5), 1), h) == {PART: "published"}
    assert [r[0] for r in db.rows(name, "k")] == ["hour"] and t().live_epoch(Interval.daily(DAY)) is None


def test_a_commit_table_made_before_reservations_gets_the_column_at_a_check(db, tmp_path):
    """A commit table of an earlier release (no ``reserved`` column) with a published interval in it: the next
    check adds the column and reserves; the publish that follows works."""
    name, t = _partitioned(db)
    first = stage(tmp_path, {f"{PART}/hour=01": [[{"k": "one"}]]})
    assert t().publish(TxnRef("p", "s", hour(1), 1), first) == {f"{PART}/hour=01": "published"}
    db.run(f"ALTER TABLE {db.q('c_' + name)} DROP COLUMN reserved")
    ours = stage(tmp_path, {f"{PART}/hour=02": [[{"k": "two"}]]})
    t().check(TxnRef("p", "s", hour(2), 1), ours)
    assert _reserved(db, name, hour(2)) == {"epoch": 1, "partitions": [f"{PART}/hour=02"]}
    assert t().publish(TxnRef("p", "s", hour(2), 1), ours) == {f"{PART}/hour=02": "published"}
    assert sorted(r[0] for r in db.rows(name, "k")) == ["one", "two"]


def _by_time(db, tmp_path):
    """A table replaced by ``event_time``, its target, and the staged row of ``which`` (hour 05:30 / day 10:30)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    ts_type = "timestamptz" if db.kind == "postgresql" else "datetime(6)"
    db.run(f"CREATE TABLE {db.q(name)} (event_time {ts_type} NOT NULL, k varchar(20) NOT NULL)")
    schema = pa.schema([("event_time", pa.timestamp("us", tz="UTC")), ("k", pa.string())])

    def version(at: str, k: str):
        return stage(tmp_path, {PART: [[{"event_time": datetime.fromisoformat(f"{DAY}T{at}:00+00:00"), "k": k}]]},
                     schema)
    return name, (lambda: target(db, name, interval_column="event_time", partition_columns=False,
                                 commit_table=f"c_{name}")), version


@pytest.mark.parametrize("by", ["partitions", "time"])
def test_two_checks_racing_to_reserve_leave_one_reservation(db, tmp_path, monkeypatch, by):
    """03:00's dry run has passed and is about to reserve; meanwhile 05:00's check of an equal partition (or, by
    time, the day's check of a range holding the hour) runs until it is done or waits for the table's lock
    (MariaDB's GET_LOCK is held by a session from its dry run on, once there are markers). Done: it reserved
    first, and 03:00's reservation - checked once more under the table's lock - is refused. Waiting: it sees
    03:00's reservation and is refused. Either way exactly one check passes and only its reservation is there:
    never two decided commits of one partition or of overlapping ranges."""
    import threading

    from exactly_once.targets import DatabaseTarget

    from .db_cases import blocked

    if by == "partitions":
        name, t = _partitioned(db)
        ours, rival_iv = stage(tmp_path, {f"{PART}/hour=03": [[{"k": "a"}]]}), hour(5)
        theirs = stage(tmp_path, {f"{PART}/hour=3": [[{"k": "b"}]]})
    else:
        name, t, version = _by_time(db, tmp_path)
        ours, rival_iv, theirs = version("03:30", "hour"), Interval.daily(DAY), version("10:30", "day")
    real, rival = DatabaseTarget._reserve, {}

    def reserve(self, conn, cur, txn, staged):
        if txn.interval == hour(3) and "thread" not in rival:
            def check() -> None:
                try:
                    t().check(TxnRef("p", "s", rival_iv, 1), theirs)
                    rival["error"] = None
                except TargetSchemaError as exc:
                    rival["error"] = exc
            rival["thread"] = threading.Thread(target=check)
            rival["thread"].start()
            end = time.monotonic() + 60  # until the rival's check is done, or waits for our table lock
            while rival["thread"].is_alive() and not blocked(db, user_lock=True):
                assert time.monotonic() < end, "the rival check neither finished nor waited"
                time.sleep(0.15)
        return real(self, conn, cur, txn, staged)

    monkeypatch.setattr(DatabaseTarget, "_reserve", reserve)
    try:
        t().check(TxnRef("p", "s", hour(3), 1), ours)
        mine = None
    except TargetSchemaError as exc:
        mine = exc
    rival["thread"].join(60)
    refused = [iv for iv, err in ((hour(3), mine), (rival_iv, rival["error"])) if err is not None]
    assert len(refused) == 1, (mine, rival["error"])  # which one: whichever reserved second
    kept = rival_iv if refused == [hour(3)] else hour(3)
    assert _reserved(db, name, kept)["epoch"] == 1 and _reserved(db, name, refused[0]) is None


def test_an_overlapping_check_waits_for_a_reservation_being_made(db, tmp_path, monkeypatch):
    """By time: 03:00's check has checked its range under the table's lock and is writing its reservation, not
    yet committed; the day's check of a range holding the hour runs then. It must wait for that lock and then
    see 03:00's reservation (refused), never check beside it, see nothing committed yet, and reserve too: two
    overlapping ranges both decided, the second unpublishable for good once the first publishes."""
    import threading

    from exactly_once.targets import db_claims

    from .db_cases import blocked

    name, t, version = _by_time(db, tmp_path)
    real, rival = db_claims.reserve, {}

    def reserve(d, cur, commit_table, table, iv, epoch, new):
        if iv == hour(3) and "thread" not in rival:
            def check() -> None:
                try:
                    t().check(TxnRef("p", "s", Interval.daily(DAY), 1), version("10:30", "day"))
                    rival["error"] = None
                except TargetSchemaError as exc:
                    rival["error"] = exc
            rival["thread"] = threading.Thread(target=check)
            rival["thread"].start()
            end = time.monotonic() + 60  # until the rival waits for our table lock, or (wrongly) is done
            while rival["thread"].is_alive() and not blocked(db, user_lock=True):
                assert time.monotonic() < end, "the rival check neither finished nor waited"
                time.sleep(0.15)
        return real(d, cur, commit_table, table, iv, epoch, new)

    monkeypatch.setattr(db_claims, "reserve", reserve)
    t().check(TxnRef("p", "s", hour(3), 1), version("03:30", "hour"))
    rival["thread"].join(60)
    assert isinstance(rival["error"], TargetSchemaError), rival  # it waited, then saw ours
    assert _reserved(db, name, hour(3))["epoch"] == 1 and _reserved(db, name, Interval.daily(DAY)) is None


def test_a_stray_fixed_and_reprocessed_through_the_protocol_lets_the_owner_publish(db, tmp_path):
    """Through the protocol (its reprocess publishes the partitions an earlier version had and this one drops
    as empty, to empty them): 05:00's job writes ``hour=3`` and publishes; 03:00's ``hour=03`` is refused at its
    check. 05:00, fixed, is reprocessed with ``hour=05``: its stray rows are emptied and its marker no longer
    holds ``hour=3`` - so 03:00 now publishes, and 05:00's next reprocess (which carries ``hour=3`` again, from
    its first version) leaves 03:00's rows alone."""
    from exactly_once import State
    from protocol_helpers import commit_version, open_sink, write_output

    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, hour int NOT NULL, k bigint NOT NULL, v varchar(20))")
    sink = open_sink(str(tmp_path / "log"), pipeline="p", sink="t",
                     target={"kind": "database", "url": db.url, "table": name, "commit_table": f"c_{name}"})
    commit_version(sink, hour(5), {f"{PART}/hour=3": [[(1, "stray")]]})
    owner = sink.begin(hour(3))
    write_output(sink, owner, {f"{PART}/hour=03": [[(3, "owner")]]})
    sink.pre_commit(owner)
    with pytest.raises(Exception):
        sink.commit(owner)
    assert sink.status(hour(3))[owner.epoch].state is State.ABORTED
    commit_version(sink, hour(5), {f"{PART}/hour=05": [[(5, "fixed")]]})
    assert json.loads(db.run(f"SELECT partitions FROM {db.q('c_' + name)} WHERE interval_token = %s",
                             (hour(5).token,))[0][0]) == [f"{PART}/hour=05"]
    commit_version(sink, hour(3), {f"{PART}/hour=03": [[(3, "owner")]]})
    commit_version(sink, hour(5), {f"{PART}/hour=05": [[(5, "again")]]})
    assert sorted((int(h), int(k), v) for h, k, v in db.rows(name, "hour, k, v")) == [(3, 3, "owner"), (5, 5, "again")]
