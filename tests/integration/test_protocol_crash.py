"""Crash tests: a child process dies (``os._exit(137)``, like ``kill -9``) at every failpoint of the
protocol; a fresh process recovers. Whatever the order of the recovery steps, readers see exactly one
complete version - the previous one if the crash came before the commit decision, the new one after it -
and once the interval is idle no staging is left and the log is consistent.
"""
from __future__ import annotations

import pytest

from exactly_once import Interval, State
from exactly_once.failpoints import CRASH_EXIT_CODE
from protocol_helpers import (assert_exact_version, commit_version, is_local, leftovers, log_problems, make_rows,
                              open_sink, refresh, run_child, split, stray_data_files,
                              table_url)  # noqa: F401

IV = Interval.daily("2026-01-01")
PART = "dt=2026-01-01"
PRIOR = make_rows("prior", 5)
NEW = make_rows("new", 10, start=100)
NEW_FILES = {PART: split(NEW, 4)}  # 4 files in one partition: an S3 mid-publish is really halfway

WRITE = [{"op": "begin"}, {"op": "write", "files": NEW_FILES}]
CRASH_SCRIPTS = {
    "begin.after": [{"op": "begin"}],
    "pre_commit.after": WRITE + [{"op": "pre_commit"}],
    "commit.before_publish": WRITE + [{"op": "pre_commit"}, {"op": "commit"}],
    "commit.mid_publish": WRITE + [{"op": "pre_commit"}, {"op": "commit"}],
    "commit.after_publish": WRITE + [{"op": "pre_commit"}, {"op": "commit"}],
    "abort.mid": WRITE + [{"op": "pre_commit"}, {"op": "abort"}],
}
COMMIT_DECIDED = {"commit.before_publish", "commit.mid_publish", "commit.after_publish"}


def recovery_script(mode: str, crashed_epoch: int) -> list[dict]:
    crashed = {"op": "use", "epoch": crashed_epoch}
    if mode == "recover":  # an on-demand recover, then the crashed attempt's teardown
        return [{"op": "recover"}, crashed, {"op": "abort"}]
    if mode == "teardown":  # the crashed attempt's teardown runs first, then a recover
        return [crashed, {"op": "abort"}, {"op": "recover"}]
    # an Airflow retry: a new attempt replays the same inputs (same rows), then the old teardown
    return WRITE + [{"op": "pre_commit"}, {"op": "commit"}, crashed, {"op": "abort"}]


def expected_after_recovery(failpoint: str, mode: str) -> str:
    if mode == "retry":
        return "retry"
    if failpoint in COMMIT_DECIDED:
        return "crashed"  # the decision was taken: every path rolls the same commit forward
    if failpoint == "pre_commit.after" and mode == "recover":
        return "crashed"  # recoverAndCommit: a pre-committed newest epoch is committed, not recomputed
    return "prior"


@pytest.mark.parametrize("mode,with_prior", [("recover", True), ("teardown", True), ("retry", False)])
@pytest.mark.parametrize("failpoint", list(CRASH_SCRIPTS))
def test_crash_then_recover_in_a_fresh_process(table_url, failpoint, mode, with_prior):
    sink = open_sink(table_url)
    prior = commit_version(sink, IV, {PART: split(PRIOR, 2)}) if with_prior else None
    prior_rows = PRIOR if with_prior else []

    rc, results, err = run_child(table_url, IV, CRASH_SCRIPTS[failpoint], failpoints_spec=f"{failpoint}=crash")
    assert rc == CRASH_EXIT_CODE, f"child did not crash at {failpoint}: rc={rc}\n{results}\n{err}"
    assert f"[failpoint] {failpoint}" in err
    assert all(r.get("ok") for r in results), results  # every op before the crash succeeded
    refresh(sink)
    crashed = sink.ref(IV, max(sink.status(IV)))
    assert crashed.epoch == (2 if with_prior else 1)

    # at the moment of the crash: never a partial or mixed version
    at_crash = NEW if failpoint == "commit.after_publish" else prior_rows
    assert_exact_version(sink, PART, at_crash, crashed if failpoint == "commit.after_publish" else prior)
    if failpoint == "commit.mid_publish" and not is_local(sink):
        half = [f for f in stray_data_files(sink) if f.startswith(f"{PART}/{crashed.name}--")]
        assert len(half) == 2, f"expected a half-copied version on S3, found {half}"

    rc, results, err = run_child(table_url, IV, recovery_script(mode, crashed.epoch))
    assert rc == 0 and all(r.get("ok") for r in results), f"{results}\n{err}"

    refresh(sink)
    winner = expected_after_recovery(failpoint, mode)
    final = {e: s.state for e, s in sink.status(IV).items()}
    if winner == "prior":
        assert final[crashed.epoch] is State.ABORTED
        assert_exact_version(sink, PART, prior_rows, prior)
    elif winner == "crashed":
        assert final[crashed.epoch] is State.COMMITTED
        assert_exact_version(sink, PART, NEW, crashed)
    else:
        retry = sink.ref(IV, max(final))
        assert retry.epoch == crashed.epoch + 1 and final[retry.epoch] is State.COMMITTED
        assert_exact_version(sink, PART, NEW, retry)
    assert leftovers(sink) == []
    assert log_problems(sink, IV) == []


@pytest.mark.parametrize("failpoint", ["commit.mid_publish", "abort.mid"])
def test_repeated_crashes_at_the_same_point_then_recovery(table_url, failpoint):
    """A recovery that itself crashes at the same point (a retry dying again) is finished by the next."""
    sink = open_sink(table_url)
    prior = commit_version(sink, IV, {PART: split(PRIOR, 2)})
    rc, _, err = run_child(table_url, IV, CRASH_SCRIPTS[failpoint], failpoints_spec=f"{failpoint}=crash")
    assert rc == CRASH_EXIT_CODE, err
    refresh(sink)
    crashed = sink.ref(IV, max(sink.status(IV)))
    again = [{"op": "use", "epoch": crashed.epoch}, {"op": "abort"}]
    rc, _, err = run_child(table_url, IV, again, failpoints_spec=f"{failpoint}=crash")
    assert rc == CRASH_EXIT_CODE, f"the roll-forward/cleanup did not pass {failpoint} again: {err}"
    rc, results, err = run_child(table_url, IV, again)
    assert rc == 0 and all(r.get("ok") for r in results), f"{results}\n{err}"
    refresh(sink)
    if failpoint == "abort.mid":
        assert_exact_version(sink, PART, PRIOR, prior)
    else:
        assert_exact_version(sink, PART, NEW, crashed)
    assert leftovers(sink) == []
    assert log_problems(sink, IV) == []
