"""Two pipelines (or two sinks) on one target: the second is refused before it decides - never taken as
"already published" because the target holds the first one's version at an equal epoch - and the first
one's rows stay intact; the first pipeline goes on publishing."""
from __future__ import annotations

import pytest

from exactly_once import State
from exactly_once.errors import ExactlyOnceError
from protocol_helpers import make_rows

from .conftest import IV, PART


@pytest.mark.parametrize("second", [("q", "t"), ("p", "u")], ids=["other-pipeline", "other-sink"])
def test_a_second_pipeline_on_one_target_is_refused_before_deciding(world, second):
    first, theirs, again = make_rows("a", 4), make_rows("b", 3, start=20), make_rows("c", 2, start=40)
    a = world.sink()
    world.commit(a, IV, {PART: [first]})
    b = world.sink(*second)
    before = set(b.status(IV))
    with pytest.raises(ExactlyOnceError):
        with b.transaction(IV) as txn:
            world.stage(b, txn, {PART: [theirs]})
    ended = {e: s.state for e, s in b.status(IV).items() if e not in before}
    assert all(s is State.ABORTED for s in ended.values()), ended  # refused before its decision
    assert world.read_rows() == world.rows({PART: [first]})
    world.commit(a, IV, {PART: [again]})  # the owner is not disturbed
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(a, IV) == [] and world.leftovers(a) == [] and world.leftovers(b) == []
