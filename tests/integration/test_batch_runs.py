"""The Airflow side of batched backfills (exactly_once.airflow.batching): what a run's ``begin`` does when a
batch holds its interval - finish at once, wait, resume its own batch, or host one. Found by an adversarial
review of the early finish (helper-29, reproducers in tests/repro/batch/r09-r12); each race is forced at its
exact point, without a JVM or a scheduler (the write is tests/batch_helpers.stage_batch_write; the operator
and context are what Airflow would hand ``begin``). Days 2-4 of a stateful pv_pipeline whose day 1 is
committed; asserted on versions, notes and the published rows."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from batch_helpers import batch_task, first_event, pv_oracle, stage_batch_write
from batch_runs_helpers import D1, DAYS, IVS, Begin
from fault_helpers import Driver, Setup, leftovers, sink_of, visible_rows

import exactly_once.protocol.batch as batch_mod
import exactly_once.protocol.pipeline as pipeline_mod
from exactly_once.airflow import batching
from exactly_once.ids import Interval
from exactly_once.protocol.batch import claim_intervals, mark_done
from tools.sample_data import generate

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    base = tmp_path_factory.mktemp("batch-runs")
    setup = Setup(root=str(base / "tmpl"), start=D1, reports=str(base / "reports"),
                  env={"EO_REPORTS_DIR": str(base / "reports")})
    generate(str(base / "tmpl" / "landing"), [D1, *DAYS], events_per_day=60)
    Driver(setup).clean_run(D1)
    return base, setup


@pytest.fixture
def setup(template):
    base, tmpl = template
    dst = base / f"s-{uuid.uuid4().hex[:10]}"
    shutil.copytree(tmpl.root, dst, symlinks=True)
    return tmpl.replace(root=str(dst))


def epochs(setup: Setup) -> dict[str, dict[int, str]]:
    sink = sink_of(setup)
    return {d: {e: s.state.value for e, s in sink.status(Interval.daily(d)).items()} for d in DAYS}


def oracle(setup: Setup, stateful: bool = True) -> dict[str, list]:
    if stateful:
        return pv_oracle(setup.root, [D1, *DAYS])
    return {d: pv_oracle(setup.root, [d])[d] for d in [D1, *DAYS]}


def test_a_hosts_retry_resumes_a_day_whose_own_run_finished_meanwhile(setup, monkeypatch):
    """Stateless (as flights_hourly). The host (day 2's run) hosts days 2-4; day 2's pre_commit hits a
    transient error, day 3 commits, the host dies (day 4 written, not pre-committed). Day 3's run finishes at
    once - its DAG run is over. The host's retry must still resume day 4's written attempt: before, it
    claimed only the days whose runs were still active, released day 4, and day 4's run wrote it again."""
    begin = Begin(setup, stateful=False)
    real_pre, flaky = pipeline_mod.IntervalRun.pre_commit, {"left": 1}

    def pre_commit(self: Any, txn: Any, *a: Any, **k: Any) -> Any:
        if txn.interval == IVS[0] and flaky["left"]:
            flaky["left"] = 0
            raise OSError("transient: storage timeout")
        return real_pre(self, txn, *a, **k)

    def die(name: str) -> None:
        if name == "batch.between_commits":
            raise RuntimeError("host worker killed")

    monkeypatch.setattr(pipeline_mod.IntervalRun, "pre_commit", pre_commit)
    monkeypatch.setattr(batch_mod, "failpoint", die)
    with pytest.raises(RuntimeError, match="killed"):
        begin.run(DAYS[0])
    monkeypatch.setattr(batch_mod, "failpoint", lambda name: None)
    assert epochs(setup) == {DAYS[0]: {1: "OPEN"}, DAYS[1]: {1: "COMMITTED"}, DAYS[2]: {1: "OPEN"}}
    assert begin.run(DAYS[1]).startswith("finished: published e1")
    assert begin.run(DAYS[2], {DAYS[0], DAYS[2]}) == "waits"
    assert begin.run(DAYS[0], {DAYS[0], DAYS[2]}, try_number=2).startswith("finished: published e1")
    assert begin.run(DAYS[2], {DAYS[2]}).startswith("finished: published e1")
    assert epochs(setup) == {d: {1: "COMMITTED"} for d in DAYS} and begin.writes == 1
    assert visible_rows(setup) == oracle(setup, stateful=False) and leftovers(sink_of(setup)) == []


def test_a_hosts_retry_resumes_its_batch_although_its_own_day_is_committed(setup, monkeypatch):
    """Stateful. The host dies after days 2 and 3 committed. Its retry finds its own day committed: before,
    it finished at once and never resumed - day 4 waited for the batch to go stale (5 minutes), then was
    written again. Now the retry resumes the batch first: day 4 commits its written attempt, the batch is
    done, no second write."""
    begin, deaths = Begin(setup), {"n": 0}

    def die_after_day3(name: str) -> None:
        if name == "batch.between_commits":
            deaths["n"] += 1
            if deaths["n"] == 2:
                raise RuntimeError("host worker killed")

    monkeypatch.setattr(batch_mod, "failpoint", die_after_day3)
    with pytest.raises(RuntimeError, match="killed"):
        begin.run(DAYS[0])
    monkeypatch.setattr(batch_mod, "failpoint", lambda name: None)
    assert epochs(setup)[DAYS[2]] == {1: "OPEN"}
    assert begin.run(DAYS[0], try_number=2).startswith("finished: published e1")
    assert begin.run(DAYS[2]).startswith("finished: published e1")
    assert epochs(setup) == {d: {1: "COMMITTED"} for d in DAYS} and begin.writes == 1
    assert visible_rows(setup) == oracle(setup) and leftovers(sink_of(setup)) == []


def test_a_run_waits_while_a_live_batch_that_did_not_commit_its_version_holds_its_day(setup):
    """Days 2-4 committed (e1) by batch b-old, done. A late file lands for day 3 and a reprocess batch holds
    days 2-4, live, not yet at day 3. A (non-reprocess) backfill run of day 3 waits for it: finishing at
    once on e1 raced that batch's commit - its note and asset event could name a version whose publish had
    not finished. Once the reprocess batch is done, the run finishes on what the batch published, and says so."""
    begin, sink = Begin(setup), sink_of(setup)
    assert claim_intervals(sink, IVS, "b-old", {}, stale_after=300) == IVS
    assert batch_task(setup, DAYS, "b-old", child=False).ok
    mark_done(sink, "b-old")
    late = Path(setup.root) / "landing" / "app_logs" / f"dt={DAYS[1]}" / "hour=23" / "late.jsonl"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text(json.dumps({"event_id": "late-1", "app_id": "app_late", "user_id": "u1", "event": "page_view",
                                "ts": f"{DAYS[1]}T23:59:00Z"}) + "\n")
    assert claim_intervals(sink, IVS, "b-reproc", {}, stale_after=300) == IVS  # live, nothing committed yet
    assert begin.run(DAYS[1]) == "waits"
    assert batch_task(setup, DAYS, "b-reproc", child=False, reprocess=True).ok
    mark_done(sink, "b-reproc")
    assert begin.run(DAYS[1]) == "finished: published e2: 6 rows, 1 file in batch b-reproc"
    assert ("app_late", 1, 1, 1) in visible_rows(setup)[DAYS[1]]


def test_a_reprocess_range_over_unchanged_inputs_reprocesses_every_day(setup):
    """`make backfill ... REPROCESS=1` runs a range (conf eo_batch + reprocess): the run hosts its own batch.
    Over days an earlier batch (done) committed, inputs unchanged, it used to take that batch's version for
    its own day and finish - nothing reprocessed, success reported. A range run now counts only its own
    batch's versions: every day gets a new epoch."""
    begin, sink = Begin(setup), sink_of(setup)
    assert claim_intervals(sink, IVS, "b-old", {}, stale_after=300) == IVS
    assert batch_task(setup, DAYS, "b-old", child=False).ok
    mark_done(sink, "b-old")
    conf = {"reprocess": True, "eo_batch": {"end": IVS[-1].start.isoformat()}}
    done = begin.run(DAYS[0], {DAYS[0]}, reprocess=True, conf=conf, run_type="manual")  # no other run of these days
    assert done.startswith("finished: published e2") and "in batch b-" in done and "b-old" not in done, done
    assert epochs(setup) == {d: {1: "COMMITTED", 2: "COMMITTED"} for d in DAYS} and begin.writes == 1
    assert visible_rows(setup) == oracle(setup) and leftovers(sink) == []


def test_a_range_run_after_a_failed_batch_batches_the_failed_days_again(setup):
    """Found running `make backfill` as a new user: a range whose batch failed its gate (too many rejected
    records) and was resumed after the fix (`max_malformed_ratio` raised) ran every day as a single run - one
    Spark job per day - because each day's attempt had failed in a batch. A range run is a new request for its
    whole range: it hosts one batch again (one write job) and every day commits in it. A backfill run of a
    day its batch failed still goes on alone (its own write, gate and report show why)."""
    from exactly_once.protocol.batch import BatchRun

    begin, sink = Begin(setup), sink_of(setup)
    assert claim_intervals(sink, IVS, "b-failed", {}, stale_after=300) == IVS
    failed = BatchRun(begin.config, IVS, batch_id="b-failed", storage_options=setup.options())
    failed.begin()
    failed.abort()  # what a failed gate leaves: every day's attempt of the batch aborted
    mark_done(sink, "b-failed")
    assert epochs(setup) == {d: {1: "ABORTED"} for d in DAYS}
    assert begin.run(DAYS[1]) == "went on alone" and begin.writes == 0  # a backfill run: alone, shows why
    conf = {"eo_batch": {"end": IVS[-1].start.isoformat()}}
    done = begin.run(DAYS[0], {DAYS[0]}, conf=conf, run_type="manual")  # the backfill run above is over
    assert done.startswith("finished: published e2") and "b-failed" not in done, done
    assert epochs(setup) == {d: {1: "ABORTED", 2: "COMMITTED"} for d in DAYS} and begin.writes == 1
    assert visible_rows(setup) == oracle(setup) and leftovers(sink) == []


# ------------------------------------------------------------------ one task: a batch of one (issue 48)
def test_a_scheduled_run_with_one_task_publishes_its_day_alone_in_its_begin(setup, monkeypatch):
    """``one_task``: a scheduled run's begin publishes its own day as a batch of one (one write job, the day's
    own transaction, the group's other tasks skipped) - never a later day, though runs of them are active; a
    transient error in its finish leaves it pending and the task's retry resumes it without a second write;
    without ``one_task`` the run goes on through the phase tasks, as before."""
    assert Begin(setup).run(DAYS[0], run_type="scheduled") == "went on alone"
    begin = Begin(setup, one_task=True)
    real_commit, flaky = pipeline_mod.IntervalRun.commit, {"left": 1}

    def commit(self: Any, txn: Any, *a: Any, **k: Any) -> Any:
        if flaky["left"]:
            flaky["left"] = 0
            raise OSError("transient: storage timeout")
        return real_commit(self, txn, *a, **k)

    monkeypatch.setattr(pipeline_mod.IntervalRun, "commit", commit)
    with pytest.raises(Exception, match="1 intervals not finished"):
        begin.run(DAYS[0], run_type="scheduled")
    assert epochs(setup) == {DAYS[0]: {1: "PRE_COMMITTED"}, DAYS[1]: {}, DAYS[2]: {}} and begin.writes == 1
    done = begin.run(DAYS[0], run_type="scheduled", try_number=2)
    assert done.startswith("finished: published e1") and "in batch b-" in done, done
    assert begin.run(DAYS[1], run_type="manual").startswith("finished: published e1")
    assert epochs(setup) == {DAYS[0]: {1: "COMMITTED"}, DAYS[1]: {1: "COMMITTED"}, DAYS[2]: {}}
    assert begin.writes == 2
    rows = visible_rows(setup)
    assert {d: rows[d] for d in (D1, *DAYS[:2])} == {d: oracle(setup)[d] for d in (D1, *DAYS[:2])}
    assert leftovers(sink_of(setup)) == []


def test_a_one_task_reprocess_records_who_asked_it_and_why(setup):
    """A reprocess asked of a ``one_task`` pipeline (the table page, ``eo reprocess``) is published by its begin
    as a batch of one: its version records who triggered it, what and why, as the begin task records them -
    the table page and ``eo history`` show "reprocess by alice because ..." (the batch's provenance had the
    task ids only). A batch of one is a single run: a reprocess with the inputs unchanged (a fixed job)
    publishes a new version, its note naming that one only, and a clear of the scheduled run goes on through
    the phase tasks, which replay it as a new version (before, both found the day "published by the batch
    that holds it" and finished at once: nothing recomputed)."""
    from exactly_once.ops.inspection import interval_view

    begin = Begin(setup, one_task=True)
    assert begin.run(DAYS[0], run_type="scheduled").startswith("finished: published e1")
    fixed = begin.run(DAYS[0], run_type="manual", reprocess=True, conf={"reprocess": True})
    assert fixed.startswith("finished: published e2") and "e1" not in fixed, fixed
    assert begin.run(DAYS[0], run_type="scheduled", clears=1) == "went on alone"
    assert epochs(setup)[DAYS[0]] == {1: "COMMITTED", 2: "COMMITTED"} and begin.writes == 2
    late = Path(setup.root) / "landing" / "app_logs" / f"dt={DAYS[0]}" / "hour=23" / "late.jsonl"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text(json.dumps({"app_id": "app_late", "user_id": "u1", "ts": f"{DAYS[0]}T23:30:00Z",
                                "event_id": "late-1", "event": "page_view"}) + "\n")
    conf = {"reprocess": True, "sinks": ["app_pv"], "eo_action": "reprocess", "eo_reason": "late files\nfrom the feed"}
    done = begin.run(DAYS[0], run_type="manual", reprocess=True, conf=conf, by="alice", clears=1)
    assert done.startswith("finished:") and "published e3: 6 rows" in done, done   # the late file taken in
    e3 = interval_view(sink_of(setup), IVS[0], with_recover=False).epochs[-1]
    assert (e3.epoch, e3.action, e3.by, e3.asked_reason) == (3, "reprocess", "alice", "late files from the feed")


def test_a_one_task_run_whose_gate_fails_goes_on_through_the_phase_tasks(setup):
    """A batch of one whose gate fails aborts its attempt (nothing published, no leftovers) and the run goes on
    as a single run: its write, pre_commit and validate tasks run and the validate task fails with the gate's
    report. A run whose predecessor is not committed goes on alone too (its begin waits for it, as always)."""
    begin = Begin(setup, one_task=True, max_malformed_ratio=0.0)  # every day has malformed lines
    assert begin.run(DAYS[0], run_type="scheduled") == "went on alone" and begin.writes == 1
    assert epochs(setup)[DAYS[0]] == {1: "ABORTED"} and leftovers(sink_of(setup)) == []
    assert DAYS[0] not in visible_rows(setup)
    assert Begin(setup, one_task=True).run(DAYS[2], run_type="scheduled") == "went on alone"  # day 3 not committed
    assert epochs(setup)[DAYS[2]] == {}


# ------------------------------------------------------------------ waiting in the triggerer (issue 26)
def test_a_waiting_run_is_deferred_until_the_batch_commits_its_day(setup, monkeypatch):
    """A run whose day a live batch holds hands its wait to Airflow's triggerer (no worker slot, no task start
    per poke): the trigger does not fire while the batch runs, fires once the batch committed the day (forced
    between the batch's commits), and the resumed begin finishes at once on the batch's version. Its
    arguments name the table and the batch, never a credential."""
    monkeypatch.setenv("EO_BATCH_WAIT_POLL_SECONDS", "0.05")
    monkeypatch.setenv("EO_RESUME_SETTLE_SECONDS", "0")  # when it looks; its settle time: the next test
    begin, sink = Begin(setup), sink_of(setup)
    assert claim_intervals(sink, IVS, "b-live", {"host": {"run_id": "r-host"}}, stale_after=300) == IVS
    assert begin.run(DAYS[1]) == "waits"
    trigger = begin.deferred
    path, kwargs = trigger.serialize()
    assert path == "exactly_once.airflow.triggers.BatchWaitTrigger"
    assert kwargs["interval"] == IVS[1].token and kwargs["batch"] == "b-live" and kwargs["seen"] is None
    assert kwargs["table"] == setup.config().table_url and kwargs["conn_id"] is None and kwargs["poll"] == 0.05
    assert first_event(trigger, 0.5) is None  # live, day 2 not committed
    seen: dict[int, Any] = {}

    def between(name: str) -> None:  # called after each committed day of the batch
        if name == "batch.between_commits":
            seen[len(seen)] = first_event(trigger, 0.3)

    monkeypatch.setattr(batch_mod, "failpoint", between)
    out = batch_task(setup, DAYS, "b-live", child=False)
    assert out.ok and [o["status"] for o in out.result] == ["committed"] * 3, out
    assert seen[0] is None  # day 1 of the batch committed, not ours
    assert seen[1] == {"interval": IVS[1].token, "why": f"committed {sink.committed(IVS[1])[0].name}"}, seen
    assert begin.run(DAYS[1]).startswith("finished: published e1") and begin.writes == 0
    assert epochs(setup) == {d: {1: "COMMITTED"} for d in DAYS}


def test_a_waiting_run_never_resumes_within_the_settle_time_of_its_deferral(setup, monkeypatch):
    """Issue 48 (a 30-day backfill reported a run FAILED although its day was published): Airflow's scheduler
    fails a task as killed externally ("the executor reported ... success, but the task instance's state
    attribute is queued") when the executor's event for the process that deferred reaches it after the task
    was queued again for the same try - both processes have the same key (3.1.8: any such state; 3.3: queued).
    Forced here at the two resumes that did it: the batch publishes the day right after the run deferred, and
    a deferral that timed out while the batch was still live, resumed, deferred again and was fired at once.
    Each trigger holds its event until EO_RESUME_SETTLE_SECONDS after its deferral; the deferral's timeout is
    no shorter than EO_BATCH_STALE_SECONDS (a live batch's write is not cut short). And no settle time where
    the batch published the day between the run's look and its deferral: it does not defer, it finishes."""
    import asyncio
    import time

    from exactly_once.airflow.triggers import BatchWaitTrigger

    monkeypatch.setenv("EO_BATCH_WAIT_POLL_SECONDS", "0.05")
    monkeypatch.setenv("EO_RESUME_SETTLE_SECONDS", "0.6")
    begin, sink = Begin(setup), sink_of(setup)
    assert claim_intervals(sink, IVS, "b-live", {"host": {"run_id": "r-host"}}, stale_after=300) == IVS
    deferred = time.time()
    assert begin.run(DAYS[1]) == "waits"  # day 2's run defers while the batch writes
    first = begin.deferred
    assert deferred + 0.6 <= first.not_before <= time.time() + 0.6
    assert begin.deferral_timeout.total_seconds() == 300  # EO_BATCH_STALE_SECONDS: the batch is over by then
    monkeypatch.setenv("EO_BATCH_POKE_SECONDS", "0.2")
    again = time.time()  # the deferral timed out, the batch still live: begin looks again and defers again
    assert begin.run(DAYS[1]) == "waits"
    second = begin.deferred
    assert again + 0.6 <= second.not_before and begin.deferral_timeout.total_seconds() == 0.6  # never sooner

    real, raced = batching.published, []

    def then_the_batch_commits(run, *args, **kwargs):  # the batch publishes every day right after a run looked
        found = real(run, *args, **kwargs)
        if run.interval == IVS[2] and not raced:
            raced.append(batch_task(setup, DAYS, "b-live", child=False))
        return found

    monkeypatch.setattr(batching, "published", then_the_batch_commits)
    begin.deferred = None
    assert begin.run(DAYS[2]).startswith("finished: published e1") and begin.deferred is None  # no deferral
    assert raced[0].ok and [o["status"] for o in raced[0].result] == ["committed"] * 3, raced

    async def fired(trigger: BatchWaitTrigger) -> tuple[Any, float]:
        async for event in trigger.run():  # as the triggerer rebuilds it from its serialized form
            return event.payload, time.time()
        raise AssertionError("no event")

    for trigger in (first, second):  # the day is published: each fires on its first look, held till not_before
        path, kwargs = trigger.serialize()
        assert kwargs["not_before"] == trigger.not_before
        held = BatchWaitTrigger(**{**kwargs, "not_before": time.time() + 0.3})  # still ahead (these passed)
        payload, at = asyncio.run(fired(held))
        assert payload == {"interval": IVS[1].token, "why": f"committed {sink.committed(IVS[1])[0].name}"}
        assert at >= held.not_before
    assert begin.run(DAYS[1]).startswith("finished: published e1") and begin.writes == 0
    assert epochs(setup) == {d: {1: "COMMITTED"} for d in DAYS}


def test_the_wait_ends_when_the_batch_is_over_or_stale_and_without_a_triggerer_begin_looks_again(setup, monkeypatch):
    """The trigger also fires when the batch holding the day is released (marked done) or its heartbeat is
    older than EO_BATCH_STALE_SECONDS; a look that fails does not fire (a loop of task starts) - the
    deferral's timeout makes begin look itself. A deferral that times out (no triggerer ran it, or a
    failing look) makes begin look again; any other trigger failure stays Airflow's."""
    import os
    import time

    from exactly_once.airflow.operators import BeginOperator
    from exactly_once.airflow.triggers import BatchWaitTrigger

    sink = sink_of(setup)
    claim_intervals(sink, IVS[:1], "b-done", {}, stale_after=300)
    claim_intervals(sink, IVS[1:2], "b-stale", {}, stale_after=300)
    args = dict(table=setup.config().table_url, pipeline="pv_pipeline", sink=sink.sink, seen=None, stale_after=60,
                poll=0.05)
    done = BatchWaitTrigger(interval=IVS[0].token, batch="b-done", **args)
    stale = BatchWaitTrigger(interval=IVS[1].token, batch="b-stale", **args)
    assert first_event(done, 0.3) is None and first_event(stale, 0.3) is None
    mark_done(sink, "b-done")
    assert first_event(done, 1) == {"interval": IVS[0].token, "why": "batch b-done is over"}
    beat = sink.storage.join(sink.home, "_batches", "b-stale", "_intervals.json")
    os.utime(beat, (time.time() - 120, time.time() - 120))  # no heartbeat for 2 minutes
    assert first_event(stale, 1) == {"interval": IVS[1].token, "why": "batch b-stale is over"}
    broken = BatchWaitTrigger(interval="not-a-token", batch="b-stale", **args)
    assert first_event(broken, 0.5) is None  # logged; the deferral's timeout makes the task look itself

    op = BeginOperator(task_id="begin", config=setup.config(), begin_task_id="app_pv.begin")
    looks: list[Any] = []
    monkeypatch.setattr(op, "execute", lambda context: looks.append(context) or "looked again")
    assert op.resume_execution("__fail__", {"error": "Trigger timeout"}, {"c": 1}) == "looked again"
    assert op.resume_execution(batching.RESUME, {"event": {"interval": "x", "why": "y"}}, {"c": 2}) == "looked again"
    from airflow.sdk.exceptions import TaskDeferralError

    with pytest.raises(TaskDeferralError):
        op.resume_execution("__fail__", {"error": "Trigger failure"}, {"c": 3})
    assert looks == [{"c": 1}, {"c": 2}]
