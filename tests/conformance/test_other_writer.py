"""Another writer on an open table: an SQL INSERT, a Redis SET, an outside Delta commit, a stray file.
Its rows outside our intervals survive our publishes and gc; a rewrite of our interval's rows by another
engine (compaction, OPTIMIZE) never leaves the old rows live beside a reprocess's."""
from __future__ import annotations

from exactly_once.ops.maintenance import gc
from protocol_helpers import make_rows

from .conftest import IV, IV2, OUTSIDE, PART, PART2


def test_another_writers_rows_outside_our_intervals_survive(world):
    sink = world.sink()
    first, again, second, foreign = (make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20),
                                     make_rows("x", 2, start=90))
    world.commit(sink, IV, {PART: [first]})
    world.other_writer(OUTSIDE, foreign)
    world.commit(sink, IV, {PART: [again]})  # a reprocess replaces only our interval's rows
    world.commit(sink, IV2, {PART2: [second]})
    gc(world.sink(), min_age=0)
    assert world.read_rows() == world.rows({PART: [again], PART2: [second], OUTSIDE: [foreign]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_reprocess_after_a_compaction_of_our_rows_replaces_them(world):
    sink = world.sink()
    first, again = make_rows("a", 4), make_rows("b", 3, start=10)
    world.commit(sink, IV, {PART: [first[:2], first[2:]]})
    world.rewrite_in_place(PART)
    assert world.read_rows() == world.rows({PART: [first]})
    world.commit(sink, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
