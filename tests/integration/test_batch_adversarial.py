"""Adversarial scenarios on the batched path (exactly_once.protocol.batch), found by breaking it (helper advb):
each a race or a change forced at its exact point, without a JVM (the write is
tests/batch_helpers.stage_batch_write), asserted on the published data and on leftovers.

The batch covers days 2-4 of a stateful pv_pipeline whose day 1 is committed (a template root every
test copies).
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import batch_helpers
from batch_helpers import batch_task, pv_oracle
from fault_helpers import Driver, Setup, epoch_problems, leftovers, sink_of, visible_rows

import exactly_once.protocol.batch as batch_mod
import exactly_once.protocol.pipeline as pipeline_mod
from exactly_once import liveness
from exactly_once.ids import Interval
from exactly_once.records.txlog import State
from tools.sample_data import generate

pytestmark = pytest.mark.timeout(300)
D1, DAYS = "2026-01-01", ["2026-01-02", "2026-01-03", "2026-01-04"]
ALL = [D1, *DAYS]


class World:
    """The template root (landing for days 1-4, day 1 committed)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.setup = Setup(root=str(base / "tmpl"), start=D1, reports=str(base / "reports"),
                           env={"EO_REPORTS_DIR": str(base / "reports")})
        generate(str(base / "tmpl" / "landing"), ALL, events_per_day=80)
        Driver(self.setup).clean_run(D1)

    def fresh(self) -> Setup:
        dst = self.base / f"s-{uuid.uuid4().hex[:10]}"
        shutil.copytree(self.setup.root, dst, symlinks=True)
        return self.setup.replace(root=str(dst))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return World(tmp_path_factory.mktemp("batch-adversarial"))


def oracle(setup: Setup) -> dict[str, list]:
    return pv_oracle(setup.root, ALL)


def states(setup: Setup) -> dict[str, dict[int, State]]:
    sink = sink_of(setup)
    return {d: {e: s.state for e, s in sink.status(Interval.daily(d)).items()} for d in DAYS}


def test_a_takeover_during_the_write_leaves_nothing_of_the_attempts_it_aborted(world, monkeypatch):
    """`eo recover --stale-after 0` (or gc / maintenance taking stale attempts over) runs while the batch's
    write job runs, after the job read its specs: every attempt is aborted and its staging removed, and
    the job then writes into them anyway. The batch's finish reports them failed and must remove what
    the write recreated (before: their staging stayed behind, with data, state and counts); the retry
    publishes every day."""
    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", "begin", child=False).ok
    taken = []
    monkeypatch.setattr(batch_helpers, "failpoint", lambda name: taken.extend(sink_of(setup).recover(stale_after=0)))
    assert batch_task(setup, DAYS, "b1", "write", child=False).ok
    monkeypatch.undo()
    assert len(taken) == 3
    done = batch_task(setup, DAYS, "b1", "finish", child=False)
    assert [o["status"] for o in done.result] == ["failed"] * 3, done.result
    assert leftovers(sink_of(setup)) == []
    assert visible_rows(setup) == {D1: oracle(setup)[D1]}

    again = batch_task(setup, DAYS, "b1", child=False)
    assert [o["status"] for o in again.result] == ["committed"] * 3, again.result
    assert visible_rows(setup) == oracle(setup) and leftovers(sink_of(setup)) == []
    assert states(setup) == {d: {1: State.ABORTED, 2: State.COMMITTED} for d in DAYS}


def test_a_single_run_that_fences_the_batch_mid_write_leaves_nothing_of_its_attempt(world, monkeypatch):
    """A single run of day 2 runs whole while the batch's write job runs (its begin fences the batch's
    attempt): the job writes into the fenced attempt anyway; the batch's finish skips day 2 (committed by
    the single run) and must end what its write left there."""
    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", "begin", child=False).ok
    monkeypatch.setattr(batch_helpers, "failpoint", lambda name: Driver(setup).clean_run(DAYS[0]))
    assert batch_task(setup, DAYS, "b1", "write", child=False).ok
    monkeypatch.undo()
    done = batch_task(setup, DAYS, "b1", "finish", child=False)
    assert [o["status"] for o in done.result] == ["skipped", "failed", "failed"], done.result
    assert leftovers(sink_of(setup)) == []
    again = batch_task(setup, DAYS, "b1", child=False)
    assert [o["status"] for o in again.result] == ["skipped", "committed", "committed"], again.result
    assert visible_rows(setup) == oracle(setup) and leftovers(sink_of(setup)) == []


def test_an_input_changed_after_the_freeze_does_not_poison_the_whole_batch(world):
    """A file of day 3 grows after the batch froze it and before the write. The write job refuses a
    changed input (replay impossible) - and with it the whole batch; before, its retry resumed the same
    attempts with the same frozen inputs and failed again, for ever, publishing nothing of days 2-4. Now
    the retry begins that attempt again (freezing the file as it is now, as a new begin of a single run
    would) and the ones chained on it, resumes the others, and publishes all three days; each equals an
    interval-by-interval run over the landing as it is now."""
    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", "begin", child=False).ok
    victim = sorted((Path(setup.root) / "landing" / "app_logs" / f"dt={DAYS[1]}").rglob("*.jsonl"))[0]
    with open(victim, "a") as f:
        f.write('{"event_id": "grown-1", "app_id": "app_grown", "user_id": "u1", "event": "page_view", '
                f'"ts": "{DAYS[1]}T10:00:00Z"}}\n')
    out = batch_task(setup, DAYS, "b1", child=False)
    assert out.ok and [o["status"] for o in out.result] == ["committed"] * 3, out
    seen = visible_rows(setup)
    assert seen == oracle(setup) and ("app_grown", 1, 1, 1) in seen[DAYS[1]]
    assert states(setup) == {DAYS[0]: {1: State.COMMITTED}, **{d: {1: State.ABORTED, 2: State.COMMITTED}
                                                               for d in DAYS[1:]}}
    sink = sink_of(setup)
    assert all(epoch_problems(sink, Interval.daily(d)) == [] for d in ALL) and leftovers(sink) == []


def _backdate(setup: Setup, days: list[str], seconds: float) -> None:
    """Make every sign of life of the newest attempt of ``days`` ``seconds`` older (time passing)."""
    sink = sink_of(setup)
    for day in days:
        iv = Interval.daily(day)
        epoch, st = max(sink.status(iv).items())
        paths = [sink.log.record_path(iv, epoch, kind) for kind in st.records]
        paths.append(liveness.txn_heartbeat(sink, sink.ref(iv, epoch)))
        for path in paths:
            if os.path.exists(path):
                t = os.stat(path).st_mtime - seconds
                os.utime(path, (t, t))


def test_an_attempt_waiting_for_its_turn_in_a_long_finish_stays_alive(world, monkeypatch):
    """The batch's finish runs gate after gate; an attempt late in the batch waits its turn for as long
    as they take. Here day 2's gate "takes an hour" (every sign of life of days 3-4 made an hour older
    right after day 2 commits), then `eo recover --stale-after 600` runs while day 3 is validated. Before,
    the batch beat its attempts' heartbeats only during the write: day 4 - alive, waiting - was taken
    over and lost by the batch. Now the finish runs under the heartbeat too: every day publishes."""
    setup = world.fresh()
    monkeypatch.setenv("EO_HEARTBEAT_SECONDS", "0.05")
    sink = sink_of(setup)
    hour_ago: list[float] = []

    def between(name: str) -> None:
        if not hour_ago:
            _backdate(setup, DAYS[1:], 3600)
            iv4 = Interval.daily(DAYS[2])
            hour_ago.append(os.stat(liveness.txn_heartbeat(sink, sink.ref(iv4, 1))).st_mtime)

    def validated(name: str) -> None:
        if name != "validate.after" or not hour_ago or len(hour_ago) > 1:
            return
        beat = liveness.txn_heartbeat(sink, sink.ref(Interval.daily(DAYS[2]), 1))
        for _ in range(400):  # the heartbeat thread's next beat (EO_HEARTBEAT_SECONDS apart), if it runs
            if os.stat(beat).st_mtime > hour_ago[0] + 60:
                break
            time.sleep(0.05)
        hour_ago.append(len(sink.recover(stale_after=600)))

    monkeypatch.setattr(batch_mod, "failpoint", between)
    monkeypatch.setattr(pipeline_mod, "failpoint", validated)
    out = batch_task(setup, DAYS, "b1", child=False)
    monkeypatch.undo()
    assert out.ok and [o["status"] for o in out.result] == ["committed"] * 3, out
    assert states(setup) == {d: {1: State.COMMITTED} for d in DAYS}
    assert visible_rows(setup) == oracle(setup) and leftovers(sink_of(setup)) == []


def test_a_reprocess_run_is_not_finished_by_the_batch_of_an_earlier_backfill(world):
    """A batched backfill committed days 2-4 (batch b-old, done); a file lands late for day 3; a REPROCESS
    backfill starts its runs together and day 3's run looks before its own host (day 2's run) claims
    day 3. The newest claim on day 3 is still b-old's, whose version is the current one: before,
    ``published(..., reprocess=True)`` said "published by the batch that holds it" and the run finished at
    once - the reprocess silently dropped, the late file never read. Now that version counts as this
    reprocess's only if it read the inputs as they are now; the current batch's own version still does."""
    from exactly_once.airflow import batching
    from exactly_once.protocol.batch import claim_intervals, holder, mark_done

    setup = world.fresh()
    sink, ivs = sink_of(setup), [Interval.daily(d) for d in DAYS]
    assert claim_intervals(sink, ivs, "b-old", {"host": {"run_id": "r-old"}}, stale_after=300) == ivs
    assert [o["status"] for o in batch_task(setup, DAYS, "b-old", child=False).result] == ["committed"] * 3
    mark_done(sink, "b-old")
    run3 = setup.run(DAYS[1])
    assert batching.published(run3, holder(sink, ivs[1]), reprocess=True)  # nothing new: nothing to redo

    late = Path(setup.root) / "landing" / "app_logs" / f"dt={DAYS[1]}" / "hour=23" / "late.jsonl"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text('{"event_id": "late-1", "app_id": "app_late", "user_id": "u1", "event": "page_view", '
                    f'"ts": "{DAYS[1]}T23:59:00Z"}}\n')
    assert not batching.published(run3, holder(sink, ivs[1]), reprocess=True)

    # this backfill's host claims days 2-4 and reprocesses them: its version now is the run's
    assert claim_intervals(sink, ivs, "b-new", {"host": {"run_id": "r-new"}}, stale_after=300) == ivs
    out = batch_task(setup, DAYS, "b-new", child=False, reprocess=True)
    assert [o["status"] for o in out.result] == ["committed"] * 3, out
    assert batching.published(run3, holder(sink, ivs[1]), reprocess=True)
    assert ("app_late", 1, 1, 1) in visible_rows(setup)[DAYS[1]]


def test_gc_collects_the_bookkeeping_of_batches_that_are_over_and_keeps_the_live_ones(world):
    """A finished batch's dir (spec, heartbeat, intervals) and every claim but each interval's newest go
    once gc's grace period has passed; a batch still live keeps its dir and claims; the collected
    batch reads as over, and a new batch claims past the newest generation kept."""
    from exactly_once.ops.maintenance import gc

    setup = world.fresh()
    assert batch_task(setup, DAYS, "b1", child=False).ok
    sink = sink_of(setup)
    ivs = [Interval.daily(d) for d in DAYS]
    assert batch_mod.claim_intervals(sink, ivs, "b-old", {}, stale_after=60) == ivs
    batch_mod.mark_done(sink, "b-old")
    assert batch_mod.claim_intervals(sink, ivs[:1], "b-live", {}, stale_after=60) == ivs[:1]  # g2 of day 2
    home = Path(sink.home) / batch_mod.BATCHES
    assert {"b1", "b-old", "b-live"} <= {p.name for p in home.iterdir()}

    assert gc(sink, min_age=3600)["batches"] == []  # within the grace period: nothing goes
    report = gc(sink, min_age=0, stale_after=3600)
    gone = {Path(p).name for p in report["batches"]}
    assert {"b-old", "g000001.json"} <= gone and not {"b1", "b-live"} & gone, report["batches"]
    assert {p.name for p in home.iterdir()} == {"_claims", "b1", "b-live"}  # b1: not marked done, beat recently
    batch_mod.mark_done(sink, "b1")  # what the Airflow host does when its batch ends
    assert [Path(p).name for p in gc(sink, min_age=0, stale_after=3600)["batches"]] == ["b1"]
    assert sorted(p.name for p in (home / "_claims" / ivs[0].token).iterdir()) == ["g000002.json"]
    assert batch_mod.holder(sink, ivs[1])[1]["batch"] == "b-old" and not batch_mod.batch_live(sink, "b-old", 3600)
    assert batch_mod.claim_intervals(sink, ivs[1:], "b-next", {}, stale_after=60) == ivs[1:]  # past g1, gone
    assert batch_mod.holder(sink, ivs[1])[0] == 2
    assert leftovers(sink) == [] and visible_rows(setup) == oracle(setup)


def test_a_run_whose_interval_a_live_batch_committed_finishes_without_waiting_for_the_batch(world, monkeypatch):
    """A backfill's runs start together (``--max-active-runs``: 10 by default in the CLI and the UI's dialog)
    and wait while a live batch holds their interval. Between two of the batch's commits (forced at
    batch.between_commits, after day 2 committed): day 2's run finishes at once - its group's other tasks
    skipped, its note naming the batch -, day 3's run (held, not committed yet) waits. Before, every run
    waited for the end of the whole batch, and the backfill's tail started only then. Nothing either run
    did is written; the batch publishes every day."""
    from types import SimpleNamespace

    from exactly_once.airflow import batching
    from exactly_once.airflow.compat import AirflowRescheduleException, DownstreamTasksSkipped, TaskDeferred
    from exactly_once.airflow.notes import NOTE_KEY
    from exactly_once.airflow.operators import BeginOperator
    from exactly_once.protocol.batch import claim_intervals

    setup = world.fresh()
    sink, ivs = sink_of(setup), [Interval.daily(d) for d in DAYS]
    assert claim_intervals(sink, ivs, "b-live", {"host": {"run_id": "r-host"}}, stale_after=300) == ivs
    begin = BeginOperator(task_id="begin", config=setup.config(), begin_task_id="app_pv.begin")
    seen: dict[str, Any] = {}

    def run_of(day: str) -> str:
        pushed: dict[str, Any] = {}
        ti = SimpleNamespace(run_id=f"backfill__{day}", try_number=1, dag_id="pv_pipeline", task_id="app_pv.begin",
                             xcom_push=lambda key, value: pushed.__setitem__(key, value))
        ctx = {"ti": ti, "dag_run": SimpleNamespace(run_id=ti.run_id, conf={}, clear_number=0), "outlet_events": {},
               "data_interval_start": Interval.daily(day).start, "data_interval_end": Interval.daily(day).end}
        try:
            batching.before_begin(begin, setup.run(day), ctx, reprocess=False)
        except DownstreamTasksSkipped:
            return f"finished: {pushed[NOTE_KEY]}"
        except (AirflowRescheduleException, TaskDeferred):
            return "waits"
        return "went on alone"

    def between(name: str) -> None:
        if name == "batch.between_commits" and not seen:
            seen.update({day: run_of(day) for day in DAYS[:2]})
            seen["epochs"] = {d: sorted(sink.status(Interval.daily(d))) for d in DAYS}

    monkeypatch.setattr(batch_mod, "failpoint", between)
    out = batch_task(setup, DAYS, "b-live", child=False)
    assert out.ok and [o["status"] for o in out.result] == ["committed"] * 3, out
    assert seen[DAYS[0]].startswith("finished: published e1") and seen[DAYS[0]].endswith("in batch b-live"), seen
    assert seen[DAYS[1]] == "waits", seen
    assert seen["epochs"] == {d: [1] for d in DAYS}  # neither run began an attempt of its own
    assert visible_rows(setup) == oracle(setup) and leftovers(sink) == []


def test_the_hosts_last_failed_try_releases_its_intervals_at_once(world):
    """A host whose write fails keeps its batch live while a retry will come (the retry resumes it). On its
    last try it ends the batch's attempts and marks the batch done: Airflow does not run the teardown of a
    run whose setup failed, so before, the runs waiting on those intervals (and a resumed `make backfill`)
    waited until the batch went stale (EO_BATCH_STALE_SECONDS, 5 minutes)."""
    from exactly_once.airflow import batching

    def broken_write(url: str, attempt: int) -> None:
        raise RuntimeError(f"Cannot execute: spark-submit ... --batch {url} (try {attempt})")

    setup, sink, ivs, begin = _host_with(world, broken_write)
    interrupted: list[tuple[str, int, dict[str, Any]]] = []  # over Spark Connect: the batch's live queries

    def interrupt(batch_id: str, scratch_url: str, attempts: int) -> list[str]:
        assert scratch_url.endswith(f"_batches/{batch_id}/scratch"), scratch_url
        interrupted.append((batch_id, attempts, states(setup)))
        if attempts == 3:
            raise ConnectionError("the Spark Connect server does not answer")
        return []

    begin.interrupt_batch = interrupt

    def host(try_number: int, **max_tries: int) -> str:
        return _host_try(begin, setup, ivs, try_number, RuntimeError, **max_tries)

    bid = host(1)  # a retry will come: the batch stays live, its attempts open for the retry to resume
    assert batching.batch_live(sink, bid, 300) and states(setup) == {d: {1: State.OPEN} for d in DAYS}
    assert host(2, max_tries=3) == bid  # the task was cleared after try 1 (Airflow: max_tries 3): not the last
    assert batching.batch_live(sink, bid, 300) and states(setup) == {d: {1: State.OPEN} for d in DAYS}
    assert interrupted == []
    assert host(3, max_tries=2) == bid  # a last try whose queries cannot be interrupted: no release (goes stale)
    assert batching.batch_live(sink, bid, 300) and states(setup) == {d: {1: State.OPEN} for d in DAYS}
    assert host(4, max_tries=3) == bid  # the last try: its queries interrupted first, then released
    assert [(a, b) for a, b, _ in interrupted] == [(bid, 3), (bid, 4)]
    assert interrupted[-1][2] == {d: {1: State.OPEN} for d in DAYS}  # interrupted before any attempt ended
    assert not batching.batch_live(sink, bid, 300)
    assert states(setup) == {d: {1: State.ABORTED} for d in DAYS} and leftovers(sink) == []


@pytest.mark.parametrize("stop", ["AirflowTaskTimeout", "AirflowTaskTerminated"])
def test_a_host_stopped_by_airflow_on_its_last_try_releases_its_intervals_at_once(world, stop):
    """Airflow's execution timeout and its termination of a task (SIGTERM: "Mark failed", a killed zombie) reach
    the host as BaseExceptions, not Exceptions: on the last try they too end the batch's attempts and mark it
    done (before, the runs waiting on its days waited EO_BATCH_STALE_SECONDS); a try with a retry to come
    keeps the batch live for it."""
    import airflow.sdk.exceptions as sdk_exceptions
    from exactly_once.airflow import batching

    error = getattr(sdk_exceptions, stop)
    assert not issubclass(error, Exception)

    def stopped_write(url: str, attempt: int) -> None:
        raise error(f"stopped by Airflow on try {attempt}")

    setup, sink, ivs, begin = _host_with(world, stopped_write)
    begin.interrupt_batch = lambda batch_id, scratch_url, attempts: []

    def host(try_number: int) -> str:
        return _host_try(begin, setup, ivs, try_number, error, max_tries=1)

    bid = host(1)  # a retry will come
    assert batching.batch_live(sink, bid, 300) and states(setup) == {d: {1: State.OPEN} for d in DAYS}
    assert host(2) == bid  # the last try
    assert not batching.batch_live(sink, bid, 300)
    assert states(setup) == {d: {1: State.ABORTED} for d in DAYS} and leftovers(sink) == []


def _host_with(world: Any, write: Any) -> tuple[Any, Any, list[Interval], Any]:
    """A fresh world's ``(setup, sink, intervals, begin)`` whose begin's batch write is ``write``."""
    from exactly_once.airflow.operators import BeginOperator

    setup = world.fresh()
    begin = BeginOperator(task_id="begin", config=setup.config(), begin_task_id="app_pv.begin", retries=1)
    begin.write_batch = write
    return setup, sink_of(setup), [Interval.daily(d) for d in DAYS], begin


def _host_try(begin: Any, setup: Any, ivs: list[Interval], try_number: int, error: type[BaseException],
              **max_tries: int) -> str:
    """One try of the host's begin over ``ivs`` (its write raises ``error``); the batch's id."""
    from types import SimpleNamespace

    from exactly_once.airflow import batching

    ti = SimpleNamespace(run_id="backfill__h", try_number=try_number, dag_id="pv_pipeline", task_id="app_pv.begin",
                         **max_tries)
    ctx = {"ti": ti, "dag_run": SimpleNamespace(run_id="backfill__h", conf={}, clear_number=0)}
    with pytest.raises(error):
        batching.host(begin, setup.run(DAYS[0]), ctx, ivs, reprocess=False)
    return batching.batch_id(ctx, ivs[0])
