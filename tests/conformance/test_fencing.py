"""Fencing: of two attempts at one interval only the newest publishes; the older one is refused before
it decides, whichever step it is in when the newer one begins (writing, or pre-committed and waiting for
its gate - an ungated pre-committed attempt is committed by the newer begin's recovery instead - or
pre-committing right between the newer begin's recovery and its epoch: only the commit's own check of
the newest epoch fences it then)."""
from __future__ import annotations

import pytest

from exactly_once import State
from exactly_once.errors import ExactlyOnceError
from protocol_helpers import interleave, make_rows

from .conftest import IV, IV2, PART, PART2


@pytest.mark.parametrize("older_at", ["writing", "validating", "pre-committing"])
def test_only_the_newest_of_two_attempts_publishes(world, monkeypatch, older_at):
    gated = older_at == "validating"
    sink, other = world.sink(require_validation=gated), world.sink(require_validation=gated)
    old, new = make_rows("old", 4), make_rows("new", 3, start=50)
    if older_at == "pre-committing":  # begins, writes and pre-commits after the newer begin's recovery
        older: list = []                # and before its epoch: only the commit's own check fences it

        def older_runs() -> None:
            older.append(sink.begin(IV))
            world.stage(sink, older[0], {PART: [old]})
            sink.pre_commit(older[0])

        state = interleave(monkeypatch, other.log, "append", lambda iv, e, kind, *a: kind == "open", older_runs)
        second = other.begin(IV)
        monkeypatch.undo()
        first = older[0]
        assert state["fired"] and sink.status(IV)[first.epoch].state is State.PRE_COMMITTED
    else:
        first = sink.begin(IV)
        world.stage(sink, first, {PART: [old]})
        if gated:
            sink.pre_commit(first)
        second = other.begin(IV)  # fences the first attempt
    world.stage(other, second, {PART: [new]})

    def finish_first():
        sink.pre_commit(first)
        if gated:
            sink.record_validation(first, True, {})
        sink.commit(first)

    with pytest.raises(ExactlyOnceError):
        finish_first()
    other.pre_commit(second)
    if gated:
        other.record_validation(second, True, {})
    other.commit(second)
    assert world.read_rows() == world.rows({PART: [new]})
    statuses = sink.status(IV)
    assert statuses[first.epoch].state is State.ABORTED and statuses[second.epoch].published
    with pytest.raises(ExactlyOnceError):  # a zombie's retry changes nothing
        finish_first()
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
    assert not sink.storage.exists(sink.rejected_dir(first))  # a fenced attempt's output is deleted, not kept


def test_recovery_aborts_a_superseded_pre_commit_and_leaves_a_running_validation(world, monkeypatch):
    """``recover`` without ``abort_open`` (``eo recover``, a teardown, maintenance beside live runs): an older
    attempt that pre-committed after the newer one began is superseded and aborted, though its gate never
    failed; the newest epoch, pre-committed with its gate still running (no verdict yet, its attempt alive),
    is left alone - a running validation is never overtaken - and publishes once its verdict passes."""
    sink, other = world.sink(require_validation=True), world.sink(require_validation=True)
    old, new = make_rows("old", 4), make_rows("new", 3, start=50)
    older: list = []

    def older_runs() -> None:  # between the newer begin's recovery and its epoch
        older.append(sink.begin(IV))
        world.stage(sink, older[0], {PART: [old]})
        sink.pre_commit(older[0])

    interleave(monkeypatch, other.log, "append", lambda iv, e, kind, *a: kind == "open", older_runs)
    newer = other.begin(IV)
    monkeypatch.undo()
    world.stage(other, newer, {PART: [new]})
    other.pre_commit(newer)  # its gate runs now
    assert world.sink(require_validation=True).recover(IV) == [
        f"{older[0].name}: aborted (pre-committed but superseded or not validated)"]
    statuses = sink.status(IV)
    assert statuses[older[0].epoch].state is State.ABORTED
    assert statuses[newer.epoch].state is State.PRE_COMMITTED  # not overtaken
    other.record_validation(newer, True, {})
    other.commit(newer)
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(other, IV) == [] and world.leftovers() == []


def test_a_pre_commit_with_the_writers_counts_is_never_committed_without_its_verdict(world):
    """A pipeline's pre_commit hands the writer's row counts to a sink that requires validation (they are
    trusted because the gate checks them): the log records the transaction as gated, so a recoverer that
    requires nothing itself (``eo recover``, another pipeline's maintenance) leaves it to its gate instead of
    committing it without a verdict; it publishes once the verdict passes."""
    sink = world.sink(require_validation=True)
    rows = make_rows("a", 3)
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [rows]})
    sink.pre_commit(txn, rows={PART: len(rows)})
    assert world.sink().recover(IV) == [] and sink.status(IV)[txn.epoch].state is State.PRE_COMMITTED
    sink.record_validation(txn, True, {})
    sink.commit(txn)
    assert world.read_rows() == world.rows({PART: [rows]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
    ungated = world.sink()  # no gate asked for: the writer's counts alone make it neither gated nor refused
    t2 = ungated.begin(IV2)
    world.stage(ungated, t2, {PART2: [rows]})
    ungated.pre_commit(t2, rows={PART2: len(rows)})
    ungated.commit(t2)
    assert ungated.status(IV2)[t2.epoch].published
