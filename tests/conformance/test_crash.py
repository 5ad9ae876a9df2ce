"""A real process killed (``os._exit`` via ``EO_FAILPOINTS``) at every failpoint of a transaction, then
recovery and Airflow's retry: the target ends with exactly the committed rows, once, and nothing left
behind. Replaces the per-target copies of this test (test_targets_protocol.py, test_delta_target.py)."""
from __future__ import annotations

import pytest

from exactly_once import State
from protocol_helpers import CRASH_EXIT, make_rows, run_child

from .conftest import IV, PART

FAILPOINTS = ["begin.after", "pre_commit.after", "commit.before_publish", "commit.mid_publish",
              "commit.after_publish"]
RECOVERED = {"begin.after": "aborted (open, older attempt)", "pre_commit.after": "recovered and committed",
             **{f: "commit finished (rolled forward)" for f in FAILPOINTS if f.startswith("commit.")}}


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_crash_at_every_failpoint_ends_with_the_rows_once(world, failpoint):
    first = make_rows("a", 5)
    ops = [{"op": "begin"}, {"op": "write", "files": {PART: [first[:2], first[2:]]}}, {"op": "pre_commit"},
           {"op": "commit"}]
    code, _, err = run_child(world.log_url("p", "t"), IV, ops, failpoints_spec=f"{failpoint}=crash",
                             sink_kwargs=world.sink_kwargs())
    assert code == CRASH_EXIT, err
    sink = world.sink()
    did = sink.recover(IV, abort_open=True)  # what the next begin, the teardown or `eo recover` does
    assert did == [f"{sink.ref(IV, 1).name}: {RECOVERED[failpoint]}"]  # and says so (`eo recover` prints it)
    states = {e: s.state for e, s in sink.status(IV).items()}
    decided = failpoint.startswith("commit.") or failpoint == "pre_commit.after"  # no gate: recoverAndCommit
    assert (State.COMMITTED in states.values()) is decided, states
    assert world.read_rows() == (world.rows({PART: [first]}) if decided else [])
    if not decided:  # Airflow's retry of the run
        world.commit(sink, IV, {PART: [first]})
        assert world.read_rows() == world.rows({PART: [first]})
    again = make_rows("b", 3, start=100)  # a reprocess replaces the interval's rows, exactly once
    world.commit(sink, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
