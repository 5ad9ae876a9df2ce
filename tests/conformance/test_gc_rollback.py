"""gc and rollback beside a commit, forced at the exact step (never sleeps): gc (another process) runs
while a commit decides or publishes; gc runs inside a rollback, between its checks and its copy. Nothing
live or needed is deleted, and a rollback never publishes a version without its state (checkpoint)."""
from __future__ import annotations

import pytest

from exactly_once.errors import ExactlyOnceError
from exactly_once.ops.maintenance import gc
from exactly_once.ops.rollback import rollback
from protocol_helpers import interleave, make_rows

from .conftest import IV, IV2, PART, PART2


@pytest.mark.parametrize("at", ["deciding", "publishing"])
def test_gc_beside_a_commit_loses_nothing(world, monkeypatch, at):
    sink, other = world.sink(), world.sink()
    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    world.commit(sink, IV, {PART: [old]})
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [new[:2], new[2:]]})
    sink.pre_commit(txn)
    collect = lambda: gc(other, min_age=0)  # noqa: E731 - another process's whole gc
    if at == "deciding":
        state = interleave(monkeypatch, sink.log, "append", lambda iv, e, kind, *a: kind == "intent", collect)
    else:
        state = world.during_publish(monkeypatch, txn, collect)
    sink.commit(txn)
    monkeypatch.undo()
    assert state["fired"] and not state["result"]["failed"], state
    assert sink.status(IV)[txn.epoch].published
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_gc_removes_what_is_superseded_and_keeps_what_is_live(world):
    """gc with no grace period: the replaced version's files (kept by the target, or by the protocol for
    databases and Redis) go; the live version stays whole, and so do its files for a rollback."""
    sink = world.sink()
    old, new = make_rows("old", 3), make_rows("new", 2, start=30)
    t1 = world.commit(sink, IV, {PART: [old]})
    t2 = world.commit(sink, IV, {PART: [new]})
    stored = world.stored_paths(sink, t1)
    assert stored and all(sink.storage.exists(p) for p in stored)
    gc(world.sink(), min_age=0)
    assert [p for p in stored if sink.storage.exists(p)] == [], "gc left the superseded version's files"
    assert world.missing_of(sink, t2) == []
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_rollback_beside_gc_never_publishes_a_version_without_its_state(world, monkeypatch):
    """gc (grace period 1 h) runs right after the rollback checked the old version's files and checkpoint.
    The rollback either refuses (nothing changes) or publishes the old rows WITH the old state."""
    sink, other = world.sink(), world.sink()
    old, new = make_rows("old", 3), make_rows("new", 2, start=30)
    t1 = world.commit(sink, IV, {PART: [old]})
    world.commit(sink, IV, {PART: [new]})
    interleave(monkeypatch, sink, "begin", lambda *a: True, lambda: gc(other, min_age=3600))
    try:
        result = rollback(sink, IV, t1.epoch)
    except ExactlyOnceError:
        result = None
    monkeypatch.undo()
    if result is None:  # refused: what was live stays live
        assert world.read_rows() == world.rows({PART: [new]})
    else:
        assert world.read_rows() == world.rows({PART: [old]})
        state = sink.storage.join(sink.checkpoint_dir(result.txn), "state", "counts.json")
        assert sink.storage.exists(state), f"{result.txn.name} was published without {t1.name}'s state"
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_rollback_is_fenced_by_a_newer_run(world, monkeypatch):
    """A normal run of the interval begins while a rollback copies the old version: the rollback is fenced
    (it never publishes over the newer run), the newer run's rows go live."""
    sink, other = world.sink(), world.sink()
    old, new, newest = make_rows("old", 3), make_rows("new", 2, start=30), make_rows("z", 2, start=60)
    t1 = world.commit(sink, IV, {PART: [old]})
    world.commit(sink, IV, {PART: [new]})
    runs = []
    interleave(monkeypatch, sink, "pre_commit", lambda *a: True, lambda: runs.append(other.begin(IV)))
    with pytest.raises(ExactlyOnceError):
        rollback(sink, IV, t1.epoch)
    monkeypatch.undo()
    assert runs  # every target keeps the version (databases, Redis: in its checkpoint): it reached pre_commit
    world.stage(other, runs[0], {PART: [newest]})
    other.pre_commit(runs[0])
    other.commit(runs[0])
    assert world.read_rows() == world.rows({PART: [newest]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_rollback_to_a_version_missing_one_of_its_files_is_refused_and_changes_nothing(world):
    """One of an old version's two stored files (kept by the target, or by the protocol for databases and
    Redis) is lost outside the protocol: a rollback to it is refused before anything is decided - never a
    version with half its rows - and what was live stays live."""
    sink = world.sink()
    old, new = make_rows("old", 4), make_rows("new", 2, start=30)
    t1 = world.commit(sink, IV, {PART: [old[:2], old[2:]]})
    world.commit(sink, IV, {PART: [new]})
    stored = world.stored_paths(sink, t1)
    assert len(stored) == 2, stored
    sink.storage.remove_tree(stored[-1])
    with pytest.raises(ExactlyOnceError) as refused:
        rollback(sink, IV, t1.epoch)
    said = str(refused.value)
    assert t1.name in said and ("are gone" in said or "are missing" in said), said  # says why, not a raw error
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_gc_sweeps_every_partition_not_only_the_first(world):
    """gc walks the table partition by partition: one with nothing to remove (its only version live) must not
    end the sweep before a later one whose replaced version is garbage."""
    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("a", 2)]})  # the first partition: nothing to sweep
    t1 = world.commit(sink, IV2, {PART2: [make_rows("b", 2, start=10)]})
    world.commit(sink, IV2, {PART2: [make_rows("c", 3, start=20)]})  # the second: t1 replaced
    stored = world.stored_paths(sink, t1)
    assert stored and all(sink.storage.exists(p) for p in stored)
    gc(world.sink(), min_age=0)
    assert [p for p in stored if sink.storage.exists(p)] == [], "gc stopped before the second partition"
    assert world.read_rows() == world.rows({PART: [make_rows("a", 2)], PART2: [make_rows("c", 3, start=20)]})
    assert world.leftovers() == []


def test_who_asked_for_a_version_outlives_gc_compaction(world):
    """A transaction's request (its begin's ``meta["request"]``: an Airflow run's id, a table-page action's
    key, by which a re-sent action finds what it already did) is repeated in its commit decision, so it is
    still known after gc compacts the superseded epoch's records; a version nobody named has none."""
    sink = world.sink()
    first = sink.begin(IV, meta={"request": "eo_rollback/run-7"})
    world.stage(sink, first, {PART: [make_rows("old", 3)]})
    sink.pre_commit(first)
    sink.commit(first)
    second = world.commit(sink, IV, {PART: [make_rows("new", 2, start=30)]})
    gc(world.sink(), min_age=0)
    statuses = sink.status(IV)
    assert "open" not in statuses[first.epoch].records  # compacted: the begin's meta is gone
    assert statuses[first.epoch].request == "eo_rollback/run-7" and statuses[second.epoch].request is None
