"""Refusals before the decision: staged output the target can never take (a column of the wrong type or
unknown to the table, a NULL key, a duplicate key) is refused BEFORE the outcome record - the
transaction ends ABORTED, nothing is published, and the interval is not stuck: a correct re-run commits.
A target with no such constraint (files; Delta has no keys) publishes the version whole instead. Never
COMMITTED and unpublishable."""
from __future__ import annotations

import pyarrow as pa
import pytest

from exactly_once import State
from exactly_once.errors import ExactlyOnceError
from protocol_helpers import make_rows

from .conftest import IV, PART

BAD = {
    "wrong_type": {PART: [pa.table({"k": pa.array(["x", "y"]), "v": pa.array(["a", "b"])})]},
    "unknown_column": {PART: [pa.table({"k": pa.array([1], pa.int64()), "v": pa.array(["a"]),
                                        "surprise": pa.array([1.5])})]},
    "null_key": {PART: [pa.table({"k": pa.array([1, None], pa.int64()), "v": pa.array(["a", "b"])})]},
    "duplicate_key": {PART: [[(1, "a")], [(1, "b")]]},
}


def staged_rows(files) -> list:
    """The ``(k, v)`` rows of staged files (``[(k, v)]`` lists or tables with k and v columns)."""
    return [row for f in files for row in (zip(f.column("k").to_pylist(), f.column("v").to_pylist())
                                           if isinstance(f, pa.Table) else f)]


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_refusal_comes_before_the_decision(world, bad):
    sink = world.sink()
    good = make_rows("g", 3)
    world.commit(sink, IV, {PART: [good]})
    try:
        with sink.transaction(IV) as txn:
            world.stage(sink, txn, BAD[bad])
        refused = None
    except ExactlyOnceError as exc:
        refused = exc
    st = sink.status(IV)[txn.epoch]
    if refused is not None:
        assert st.state is State.ABORTED, f"{bad} refused after the decision ({st.state.value}): {refused}"
        assert world.read_rows() == world.rows({PART: [good]})
    else:  # taken whole: readers get back exactly the staged rows, nothing of the old version
        assert st.state is State.COMMITTED and st.published
        assert world.read_rows() == world.rows({PART: [staged_rows(BAD[bad][PART])]})
    again = make_rows("r", 2, start=40)  # the interval is not stuck: a correct re-run commits
    world.commit(world.sink(), IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
