"""Exactly-once on the batched path (exactly_once.protocol.batch): faults, races and re-runs of a batch of
pv_pipeline intervals, without a JVM (the write is tests/batch_helpers.stage_batch_write: the job's
output contract computed by the independent oracle).

The batch covers days 2-4 of a stateful pipeline whose day 1 is committed (a template root every
scenario copies). A batch "task" (begin, the write, finish: what the Airflow host task runs) runs in a
child process; a ``crash`` failpoint kills it for real (``os._exit(137)``); then the retry runs the
whole batch again in a fresh process. Checked after every scenario: the visible table equals the
oracle's rows for every day, every epoch ended COMMITTED+published or ABORTED, the live version is the
newest committed epoch, no staging or scratch is left, and which attempts were resumed (kept their
epoch) or begun again. At the moment of the fault a reader sees, for every day, nothing or the complete
version - never a part.

Races are forced, not slept: the batch's phases run one by one, and a single (scheduled) run of one of
its intervals runs in between - before the batch commits anything, between two of its commits, and
after the batch validated the interval but before it decided.
"""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

import reference_pv as ref
from batch_helpers import batch_task
from fault_helpers import (Driver, Setup, epoch_problems, leftovers, log_problems, sink_of, visible_rows,
                           warm_children)

from exactly_once.failpoints import BATCH_NAMES, CRASH_EXIT_CODE, NAMES
from exactly_once.ids import Interval
from exactly_once.records.txlog import State
from tools.sample_data import generate

pytestmark = pytest.mark.timeout(900)
D1, DAYS = "2026-01-01", ["2026-01-02", "2026-01-03", "2026-01-04"]
ALL = [D1, *DAYS]
LATE = [{"event_id": f"late-{i}", "app_id": "app_late", "user_id": f"u{i}", "event": "page_view",
         "ts": f"{DAYS[1]}T23:59:0{i}Z"} for i in range(4)]


class World:
    """The template root (landing for days 1-4, day 1 committed) and the oracle's rows."""

    def __init__(self, base: Path) -> None:
        self.base = base
        landing = base / "landing"
        generate(str(landing), ALL, events_per_day=150)
        self.setup = Setup(root=str(base / "tmpl"), start=D1, reports=str(base / "reports"),
                           env={"EO_REPORTS_DIR": str(base / "reports")})
        shutil.copytree(landing, base / "tmpl" / "landing")
        Driver(self.setup).clean_run(D1)
        self.expected = self.oracle()

    def oracle(self, root: Path | None = None) -> dict[str, list]:
        state: dict[str, int] = {}
        out = {}
        for day in ALL:
            files = sorted(str(p) for p in ((root or self.base) / "landing" / "app_logs" / f"dt={day}").rglob("*.jsonl"))
            rows, state, _ = ref.compute(files, state, f"dt={day}")
            out[day] = sorted((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)
        return out

    def fresh(self, **kw) -> Setup:
        dst = self.base / f"s-{uuid.uuid4().hex[:10]}"
        shutil.copytree(self.setup.root, dst, symlinks=True)
        return self.setup.replace(root=str(dst), env={**self.setup.env, "EO_FAILPOINTS_STATE": str(dst / "_fp")}, **kw)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    warm_children()
    return World(tmp_path_factory.mktemp("batch-faults"))


def epochs(setup: Setup) -> dict[str, dict[int, State]]:
    sink = sink_of(setup)
    return {d: {e: s.state for e, s in sink.status(Interval.daily(d)).items()} for d in DAYS}


def assert_never_partial(setup: Setup, expected: dict[str, list]) -> None:
    for day, rows in visible_rows(setup).items():
        assert rows == expected[day], f"{day}: a reader saw a part or another version"


def assert_clean(setup: Setup, expected: dict[str, list]) -> None:
    """Every day visible as the oracle computes it; the table idle and consistent."""
    assert visible_rows(setup) == expected
    sink = sink_of(setup)
    for day in ALL:
        iv = Interval.daily(day)
        assert epoch_problems(sink, iv) == [], day
        assert log_problems(sink, iv) == [], day
        committed = [e for e, st in sink.status(iv).items() if st.state is State.COMMITTED]
        assert sink.live_version(f"dt={day}") == sink.ref(iv, max(committed)).name
    assert leftovers(sink) == []
    assert not any((Path(sink.home) / "_batches").glob("*/scratch"))


# ------------------------------------------------------------------------------------------ faults
RESUMED = {d: {1: State.COMMITTED} for d in DAYS}
BEGUN_AGAIN_D2 = {DAYS[0]: {1: State.ABORTED, 2: State.COMMITTED}, **{d: {1: State.COMMITTED} for d in DAYS[1:]}}
ALL_AGAIN = {d: {1: State.ABORTED, 2: State.COMMITTED} for d in DAYS}
CELLS = [(fp, "crash") for fp in NAMES + BATCH_NAMES] + [
    (fp, "error") for fp in ("begin.after", "write.partial", "pre_commit.after", "validate.after",
                             "commit.before_publish", "commit.after_publish", "abort.mid") + BATCH_NAMES]


@pytest.mark.parametrize("fp,action", [pytest.param(f, a, id=f"{f}-{a}") for f, a in CELLS])
def test_a_fault_anywhere_in_a_batch_then_its_retry_ends_like_a_clean_batch(world, fp, action):
    """The batch dies (crash) or fails (error) at ``fp`` - in the first interval that reaches it; a crash
    between two intervals' commits is ``batch.between_commits``. Its retry resumes every attempt that can
    go on (same epoch, nothing recomputed) and begins again only what could not."""
    gate_fails = fp == "abort.mid"  # abort is reached through a failing gate
    setup = world.fresh(max_malformed_ratio=0.0 if gate_fails else 0.05)
    out = batch_task(setup, DAYS, "b1", failpoints=f"{fp}={action}", child=action == "crash")
    if action == "crash":
        assert out.exit == CRASH_EXIT_CODE, out
    else:
        assert out.ok or out.error == "FailpointError", out
    assert_never_partial(setup, world.expected)
    # an error (not a crash) after a decided commit leaves that interval published, and the batch goes on
    goes_on = action == "error" and fp in ("batch.between_commits", "commit.after_publish")
    assert visible_rows(setup).get(DAYS[-1]) is None or goes_on

    retry = batch_task(setup.replace(max_malformed_ratio=0.05), DAYS, "b1")
    assert retry.ok and [o["status"] for o in retry.result] == ["committed"] * 3, retry
    assert_clean(setup, world.expected)
    if gate_fails:
        assert epochs(setup) == ALL_AGAIN  # the gate aborted day 2, so days 3-4 (chained) too
    elif fp == "begin.after":
        assert epochs(setup) == BEGUN_AGAIN_D2  # no spec was written: day 2 begins again
    else:
        assert epochs(setup) == RESUMED
    sink = sink_of(setup)
    for day in DAYS:  # each interval its own transaction, chained on the one before
        iv = Interval.daily(day)
        txn, st = sink.committed(iv)
        assert st.records["open"]["meta"]["run"]["batch"] == "b1" and st.validation["passed"] is True
        assert st.reads == sink.committed(Interval(iv.start - (iv.end - iv.start), iv.start))[0]


# ------------------------------------------------------------------------------------------ races
def test_a_single_run_before_the_batch_commits_fences_the_batch_attempt(world):
    """The batch began and wrote days 2-4; a scheduled run of day 2 runs whole before the batch's
    finish: its begin aborts the batch's open attempt (the newest begun epoch wins) and it publishes.
    The batch then publishes nothing of day 2 and aborts days 3-4 (their state came from the aborted
    attempt); running the batch again publishes them on the scheduled run's day 2."""
    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", "begin", child=False).ok
    assert batch_task(setup, DAYS, "b1", "write", child=False).ok
    Driver(setup).clean_run(DAYS[0])
    done = batch_task(setup, DAYS, "b1", "finish", child=False)
    assert [o["status"] for o in done.result] == ["skipped", "failed", "failed"], done.result
    assert done.result[0]["detail"] == "already committed" and "was aborted" in done.result[1]["detail"]
    assert sorted(visible_rows(setup)) == [D1, DAYS[0]]
    again = batch_task(setup, DAYS, "b1")
    assert [o["status"] for o in again.result] == ["skipped", "committed", "committed"], again.result
    assert_clean(setup, world.expected)
    assert epochs(setup) == {DAYS[0]: {1: State.ABORTED, 2: State.COMMITTED}, **ALL_AGAIN}


def test_a_single_run_between_two_of_the_batch_commits(world):
    """The batch commits day 2 and stops right after it (``batch.between_commits=error``); a scheduled
    run of day 3 - its predecessor now committed - takes over day 3 (its begin aborts the batch's attempt)
    and publishes; the batch's finish goes on: day 3 is no longer its own, day 4 (chained on the aborted
    attempt) is aborted; the batch's next run publishes day 4 on the scheduled run's day 3."""
    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", "begin", child=False).ok
    assert batch_task(setup, DAYS, "b1", "write", child=False).ok
    stopped = batch_task(setup, DAYS, "b1", "finish", child=False, failpoints="batch.between_commits=error")
    assert stopped.error == "FailpointError", stopped.message
    assert sorted(visible_rows(setup)) == [D1, DAYS[0]]
    Driver(setup).clean_run(DAYS[1])
    done = batch_task(setup, DAYS, "b1", "finish", child=False)
    assert [o["status"] for o in done.result] == ["committed", "skipped", "failed"], done.result
    again = batch_task(setup, DAYS, "b1")
    assert [o["status"] for o in again.result] == ["committed", "skipped", "committed"], again.result
    assert_clean(setup, world.expected)
    assert epochs(setup) == {DAYS[0]: {1: State.COMMITTED}, DAYS[1]: {1: State.ABORTED, 2: State.COMMITTED},
                             DAYS[2]: {1: State.ABORTED, 2: State.COMMITTED}}


def test_a_single_run_after_the_batch_validated_but_before_it_decided(world):
    """The batch validated day 2 and stopped before deciding (``validate.after=error``: days 3-4 wait on
    day 2). A scheduled run of day 2 begins: its recovery commits the batch's validated attempt
    (recoverAndCommit, nothing recomputed), then it publishes its own new version of day 2 (replayed
    inputs: the same rows). The batch's day 3 read day 2's older version: its decision is refused
    (input changed), day 4 with it; the batch's next run publishes both on the new day 2."""
    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", "begin", child=False).ok
    assert batch_task(setup, DAYS, "b1", "write", child=False).ok
    stopped = batch_task(setup, DAYS, "b1", "finish", child=False, failpoints="validate.after=error")
    assert [o["status"] for o in stopped.result] == ["pending"] * 3, stopped.result
    Driver(setup).clean_run(DAYS[0])
    assert epochs(setup)[DAYS[0]] == {1: State.COMMITTED, 2: State.COMMITTED}
    done = batch_task(setup, DAYS, "b1", "finish", child=False)
    assert [o["status"] for o in done.result] == ["skipped", "failed", "failed"], done.result
    assert "InputChangedError" in done.result[1]["detail"]
    again = batch_task(setup, DAYS, "b1")
    assert [o["status"] for o in again.result] == ["skipped", "committed", "committed"], again.result
    assert_clean(setup, world.expected)


# ------------------------------------------------------------------------------------- re-runs
def test_a_batch_over_committed_intervals_skips_them_and_replaces_them_only_with_reprocess(world):
    setup = world.fresh()
    first = batch_task(setup, DAYS[:2], "b1", child=False)
    assert [o["status"] for o in first.result] == ["committed", "committed"]
    versions = {d: sink_of(setup).committed(Interval.daily(d))[0].name for d in DAYS[:2]}
    over = batch_task(setup, ALL, "b2", child=False)
    assert [o["status"] for o in over.result] == ["skipped", "skipped", "skipped", "committed"], over.result
    assert {d: sink_of(setup).committed(Interval.daily(d))[0].name for d in DAYS[:2]} == versions
    assert_clean(setup, world.expected)

    # a late file for day 3: only a reprocess takes it in - a new version of days 2-3, day 4 made stale
    late = Path(setup.root) / "landing" / "app_logs" / f"dt={DAYS[1]}" / "hour=23" / "late.jsonl"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text("".join(json.dumps(r) + "\n" for r in LATE))
    assert [o["status"] for o in batch_task(setup, DAYS[:2], "b3", child=False).result] == ["skipped", "skipped"]
    again = batch_task(setup, DAYS[:2], "b4", child=False, reprocess=True)
    assert [o["status"] for o in again.result] == ["committed", "committed"], again.result
    assert again.result[1]["summary"]["stale_intervals"] == [Interval.daily(DAYS[2]).token]
    expected = world.oracle(Path(setup.root))
    seen = visible_rows(setup)
    assert {d: seen[d] for d in ALL[:3]} == {d: expected[d] for d in ALL[:3]}
    assert ("app_late", 4, 4, 4) in seen[DAYS[1]]
    assert epochs(setup) == {DAYS[0]: {1: State.COMMITTED, 2: State.COMMITTED},
                             DAYS[1]: {1: State.COMMITTED, 2: State.COMMITTED}, DAYS[2]: {1: State.COMMITTED}}
    rerun = batch_task(setup, DAYS[:2], "b4", child=False, reprocess=True)  # the same reprocess again:
    assert [o["status"] for o in rerun.result] == ["committed", "committed"]  # its own, not redone
    assert epochs(setup)[DAYS[1]] == {1: State.COMMITTED, 2: State.COMMITTED}
