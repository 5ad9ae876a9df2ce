"""Clock skew per actor: the writer's, the publisher's or gc's clock (``time.time`` of that actor only)
runs 2 h off; the storage's clock is right. Nothing that was live is deleted before the grace period, and
a live writer is never taken over. The skews are the dangerous directions: a slow publisher (its
``published`` time looks old), a fast gc (everything looks old), a slow writer (its records look old);
``none`` is the baseline - the grace period covers data files, manifests and checkpoints alike."""
from __future__ import annotations

from contextlib import nullcontext

import pytest

from exactly_once import State
from exactly_once.ops.maintenance import gc
from protocol_helpers import make_rows

from .conftest import IV, PART

SKEW, GRACE = 2 * 3600.0, 3600.0


@pytest.mark.parametrize("actor,offset", [("none", 0), ("publisher", -SKEW), ("gc", SKEW)])
def test_gc_keeps_a_version_replaced_within_the_grace_period(world, actor, offset):
    sink = world.sink()
    old, new = make_rows("old", 3), make_rows("new", 2, start=30)
    t1 = world.commit(sink, IV, {PART: [old]})
    with world.clock(offset) if actor == "publisher" else nullcontext():
        world.commit(sink, IV, {PART: [new]})  # t1 stops being live now (storage time)
    with world.clock(offset) if actor == "gc" else nullcontext():
        gc(world.sink(), min_age=GRACE)
    assert world.missing_of(sink, t1) == []  # replaced 0 s ago: rollback and pinned readers still work
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("actor,offset", [("writer", -SKEW), ("gc", SKEW)])
def test_a_live_writer_is_not_taken_over(world, actor, offset):
    sink = world.sink()
    rows = make_rows("a", 3)
    with world.clock(offset) if actor == "writer" else nullcontext():
        txn = sink.begin(IV)
        world.stage(sink, txn, {PART: [rows]})
    with world.clock(offset) if actor == "gc" else nullcontext():
        gc(world.sink(), min_age=GRACE, stale_after=GRACE)  # it began 0 s ago (storage time)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    with world.clock(offset) if actor == "writer" else nullcontext():
        sink.pre_commit(txn)
        sink.commit(txn)
    assert world.read_rows() == world.rows({PART: [rows]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
