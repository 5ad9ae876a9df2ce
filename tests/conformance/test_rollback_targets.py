"""Rollback on the targets that replace rows in place (issue 28): PostgreSQL, MariaDB and Redis.

They keep no copy of a superseded version themselves, so the protocol keeps each published version's
sealed staged files (its write-ahead log) in its checkpoint: ``eo rollback`` republishes them as a new,
fenced epoch, exactly like the files and Delta targets; gc removes them with the checkpoint only after
the grace period (storage clock), and a rollback after that is refused with that reason. The servers run
on loopback; the worlds come from tests/conformance/conftest.py (one database / key prefix per kind).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from exactly_once import State, TransactionStateError
from exactly_once.cli import main as eo
from exactly_once.ops.history import history
from exactly_once.ops.maintenance import gc
from exactly_once.ops.inspection import stale_intervals
from exactly_once.ops.rollback import rollback
from protocol_helpers import make_rows

from .conftest import IV, IV2, PART, PART2, Place

HOUR = 3600.0


@pytest.fixture(scope="module", params=["postgresql", "mysql", "redis"])
def place(request, tmp_path_factory):
    p = Place(request.param, tmp_path_factory.mktemp(request.param), request)
    yield p
    p.close()


@pytest.fixture
def world(place, monkeypatch, tmp_path):
    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    return place.world()


def idle(world, sink) -> bool:
    """The log of IV is idle and consistent with the target; nothing is left behind."""
    assert world.log_problems(sink, IV) == []
    assert world.leftovers() == []
    return True


def two_versions(world):
    sink = world.sink()
    v1, v2 = make_rows("v1", 5), make_rows("v2", 3, start=50)
    e1 = world.commit(sink, IV, {PART: [v1[:2], v1[2:]]})
    e2 = world.commit(sink, IV, {PART: [v2]})
    assert world.read_rows() == world.rows({PART: [v2]})
    return sink, e1, e2, v1, v2


def test_rollback_republishes_an_earlier_version_as_a_new_epoch(world, capsys):
    sink, e1, e2, v1, _ = two_versions(world)
    # a stateful successor computed on e2's state: stale once e1 is live again
    day2 = sink.begin(IV2, reads=e2)
    world.stage(sink, day2, {PART2: [make_rows("d2", 2, start=90)]})
    sink.pre_commit(day2)
    sink.commit(day2)
    result = rollback(sink, IV, e1.epoch, meta={"run": {"by": "admin"}})
    assert result.txn.epoch == 3 and result.extra["rollback_of"] == e1.name
    assert result.extra["stale"] == [day2.name]
    assert world.read_rows() == world.rows({PART: [v1], PART2: [make_rows("d2", 2, start=90)]})
    assert sink.target.live_epoch(IV) == 3
    # the checkpoint (state) came with it
    assert sink.storage.exists(sink.storage.join(sink.checkpoint_dir(result.txn), "state", "counts.json"))
    rows = {r.epoch: r for r in history(sink) if r.interval_start == IV.start.isoformat()}
    assert [e for e, r in rows.items() if r.live] == [3] and rows[3].state == State.COMMITTED.value
    assert sink.status(IV)[3].records["open"]["meta"]["rollback_of"] == e1.name
    # and back again through `eo rollback`: e2 is kept as well
    url = world.log_url("p", "t")
    assert stale_intervals(sink) == [IV2.token]                   # day 2 read e2, e1 is live: as the page says
    assert eo(["rollback", url, "--interval", IV.start.isoformat(), "--to", "e2"]) == 0
    out = capsys.readouterr().out
    assert "is live again" in out and "no stale interval" in out  # e2 live again (as e4): day 2 is current
    assert stale_intervals(sink) == []
    assert eo(["status", url]) == 0 and f"its rows are in {sink.target.describe()}" in capsys.readouterr().out
    assert world.read_rows() == world.rows({PART: [make_rows("v2", 3, start=50)],
                                            PART2: [make_rows("d2", 2, start=90)]})
    assert idle(world, sink)


def test_gc_keeps_a_version_for_the_grace_period_then_the_refusal_says_so(world, capsys):
    sink, e1, e2, v1, v2 = two_versions(world)
    report = gc(world.sink(), min_age=HOUR)
    assert not report["failed"] and world.missing_of(sink, e1) == []
    result = rollback(sink, IV, e1.epoch)  # within the grace period: still possible
    assert world.read_rows() == world.rows({PART: [v1]})
    report = gc(world.sink(), min_age=0)  # the grace is over for e1 and e2
    assert not report["failed"]
    assert sink.checkpoint_dir(e1) in report["checkpoints"] and sink.checkpoint_dir(e2) in report["checkpoints"]
    for old in (e1, e2):
        with pytest.raises(TransactionStateError, match=f"gc removed {old.name} after the grace period"):
            rollback(sink, IV, old.epoch)
    url = world.log_url("p", "t")
    assert eo(["rollback", url, "--interval", IV.start.isoformat(), "--to", "e2"]) == 1
    assert "after the grace period" in capsys.readouterr().err
    assert world.read_rows() == world.rows({PART: [v1]})  # refused: what was live stays live
    assert {e: s.state for e, s in sink.status(IV).items()} == {1: State.COMMITTED, 2: State.COMMITTED,
                                                                  3: State.COMMITTED}
    assert world.missing_of(sink, result.txn) == []  # the live version keeps its copies
    assert idle(world, sink)
    st = sink.storage
    assert sorted(st.list_names(st.join(sink.home, "_checkpoints"))) == [result.txn.name]
    assert st.list_names(st.join(sink.home, "_staging")) == []


def test_the_refusal_names_gc_when_only_the_kept_rows_are_gone(world):
    """gc removed the checkpoint (with the kept rows) but not yet the manifest: the reason is still gc."""
    sink, e1, e2, _, v2 = two_versions(world)
    sink.storage.remove_tree(sink.checkpoint_dir(e1))
    with pytest.raises(TransactionStateError, match=f"gc removed version {e1.name} after the grace period"):
        rollback(sink, IV, e1.epoch)
    assert world.read_rows() == world.rows({PART: [v2]})
    assert idle(world, sink)


@pytest.mark.s3
def test_rollback_with_the_log_on_s3(place, request):
    """The log (and so the kept staged rows) on S3, where the data dir is sealed in place."""
    from conftest import make_bucket
    from protocol_helpers import open_sink

    world = place.world()
    url = f"s3://{make_bucket(request.getfixturevalue('s3_server'))}/{world.name}/t"
    sink = open_sink(url, **world.sink_kwargs())
    v1, v2 = make_rows("v1", 4), make_rows("v2", 2, start=50)
    e1 = world.commit(sink, IV, {PART: [v1[:1], v1[1:]]})
    world.commit(sink, IV, {PART: [v2]})
    result = rollback(sink, IV, e1.epoch)
    assert world.read_rows() == world.rows({PART: [v1]})
    assert not gc(sink, min_age=0)["failed"]
    with pytest.raises(TransactionStateError, match=f"gc removed {e1.name} after the grace period"):
        rollback(sink, IV, e1.epoch)
    assert world.read_rows() == world.rows({PART: [v1]})
    assert world.log_problems(sink, IV) == [] and world.leftovers(sink) == []
    st = sink.storage
    assert st.list_names(st.join(sink.home, "_checkpoints")) == [result.txn.name]


def test_a_partly_lost_kept_copy_is_refused_naming_the_missing_files(world):
    """brk-actions kept_copies_partial_wrong_reason: one of e1's two kept staged files is gone from its
    checkpoint (the rest is there). The refusal names that file - not "published before the target kept
    staged rows", which sent the operator after an upgrade problem. A version whose checkpoint has no
    staged rows at all still gets that reason."""
    sink, e1, e2, _, v2 = two_versions(world)
    st = sink.storage
    sealed = sink.sealed_dir(e1)[len(sink.staging_dir(e1)) + 1:]
    kept = st.join(sink.checkpoint_dir(e1), sealed, PART)
    names = sorted(n for n in st.list_names(kept) if n.endswith(".parquet"))
    assert len(names) == 2
    st.remove_tree(st.join(kept, names[0]))
    with pytest.raises(TransactionStateError) as refused:
        rollback(sink, IV, e1.epoch)
    message = str(refused.value)
    assert "1 of its kept staged files are missing from its checkpoint" in message
    assert f"{sealed}/{PART}/{names[0]}" in message and names[1] not in message
    assert "published before" not in message and "were not kept" not in message
    st.remove_tree(st.join(sink.checkpoint_dir(e1), sealed))        # nothing kept at all: the old reason
    with pytest.raises(TransactionStateError, match="was published before .* kept staged rows"):
        rollback(sink, IV, e1.epoch)
    assert world.read_rows() == world.rows({PART: [v2]}) and sorted(sink.status(IV)) == [1, 2]
    assert idle(world, sink)
