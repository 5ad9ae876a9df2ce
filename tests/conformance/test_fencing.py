"""Fencing: of two attempts at one interval only the newest publishes; the older one is refused before
it decides, whichever step it is in when the newer one begins (writing, or pre-committed and waiting for
its gate - an ungated pre-committed attempt is committed by the newer begin's recovery instead)."""
from __future__ import annotations

import pytest

from exactly_once import State
from exactly_once.errors import ExactlyOnceError
from protocol_helpers import make_rows

from .conftest import IV, PART


@pytest.mark.parametrize("older_at", ["writing", "validating"])
def test_only_the_newest_of_two_attempts_publishes(world, older_at):
    gated = older_at == "validating"
    sink, other = world.sink(require_validation=gated), world.sink(require_validation=gated)
    old, new = make_rows("old", 4), make_rows("new", 3, start=50)
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
