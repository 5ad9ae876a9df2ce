"""A late finisher: epoch 1 decided COMMITTED and stalled inside its publish; meanwhile the next run's
begin finished epoch 1 and epoch 2 went live. When epoch 1's publisher wakes, it changes nothing live:
the rows stay epoch 2's, and epoch 1's version - live a moment ago, a reader may still be on it - is not
deleted before the grace period (gc's job, by the log)."""
from __future__ import annotations

from protocol_helpers import make_rows

from .conftest import IV, PART


def test_a_late_finisher_of_an_older_epoch_changes_nothing_live(world, monkeypatch):
    sink, other = world.sink(), world.sink()
    old, new = make_rows("old", 4), make_rows("new", 3, start=50)
    t1 = sink.begin(IV)
    world.stage(sink, t1, {PART: [old[:2], old[2:]]})
    sink.pre_commit(t1)
    state = world.during_publish(monkeypatch, t1, lambda: world.commit(other, IV, {PART: [new]}))
    result = sink.commit(t1)
    monkeypatch.undo()
    assert state["fired"] and set(result.partitions.values()) == {"superseded"}, result.partitions
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.missing_of(sink, t1) == []  # replaced 0 s ago: kept for the grace period
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
