"""The exactly-once group's phase tasks executed with the context Airflow would give them (``wiring_helpers``;
no scheduler, no JVM): the abort teardown when begin handed no transaction on, begin's refusals and waits (lost
inputs, a running predecessor), what commit reports when it is cleared, and when it skips the teardown. The DAG
build and wiring checks are ``test_airflow_wiring``'s."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG, CronDataIntervalTimetable

from exactly_once.airflow import exactly_once_group
from exactly_once.airflow.operators import AbortOperator, BeginOperator
from exactly_once.errors import FailpointError
from exactly_once.ids import Interval
from exactly_once.records.txlog import State
from wiring_helpers import START, begun_daily_with_output, config, context, one_csv_day


def test_teardown_aborts_the_epoch_its_own_failed_begin_opened_and_no_other(tmp_path, monkeypatch):
    cfg, iv, begin = one_csv_day(tmp_path)
    abort = AbortOperator(task_id="abort", config=cfg, begin_task_id="t.begin")
    # run A's begin opens epoch 1, then dies before returning it (no XCom)
    monkeypatch.setenv("EO_FAILPOINTS", "begin.after=error")
    with pytest.raises(FailpointError):
        begin.execute(context("run_A", iv))
    monkeypatch.delenv("EO_FAILPOINTS")
    sink = cfg.sink_handle()
    assert sink.status(iv)[1].state is State.OPEN
    staging = sink.staging_dir(sink.ref(iv, 1))
    assert os.path.isdir(staging)
    # another run's teardown (no XCom either) leaves run A's attempt alone ...
    assert abort.execute(context("run_B", iv)) == "nothing to abort"
    assert sink.status(iv)[1].state is State.OPEN
    # ... run A's own teardown finds it in the log and aborts it: nothing OPEN, no staging left
    assert abort.execute(context("run_A", iv)) == [f"{sink.ref(iv, 1).name}: ABORTED"]
    assert sink.status(iv)[1].state is State.ABORTED and not os.path.exists(staging)


def test_a_reprocess_trigger_that_lost_inputs_fails_at_once_and_allow_shrinking_lets_it_through(tmp_path):
    """Issue 13 case 1 through the begin task: conf {"reprocess": true} over a landing folder that lost
    a file the committed version read fails without retries and says how to proceed; adding
    "allow_shrinking": true (what the error advises) begins the reprocess."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from airflow.sdk.exceptions import AirflowFailException

    from exactly_once.ids import TxnRef

    landing = tmp_path / "landing" / "s" / "dt=2013-01-01"
    landing.mkdir(parents=True)
    for name in ("a.csv", "b.csv"):
        (landing / name).write_text("x\n1\n")
    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}")
    iv = Interval.daily("2013-01-01")
    begin = BeginOperator(task_id="begin", config=cfg, begin_task_id="t.begin")
    sink = cfg.sink_handle()
    txn = TxnRef.from_dict(begin.execute(context("scheduled", iv))["txn"])
    out = os.path.join(sink.data_dir(txn), "dt=2013-01-01")
    os.makedirs(out)
    pq.write_table(pa.table({"x": [1, 1]}), os.path.join(out, "part-0.parquet"))
    sink.pre_commit(txn)
    sink.record_validation(txn, True, {})
    sink.commit(txn)
    (landing / "a.csv").unlink()
    with pytest.raises(AirflowFailException, match=r"InputsShrankError.*dt=2013-01-01/a.csv.*"
                       r"`eo reprocess \S+/warehouse/t --interval 2013-01-01T00:00:00\+00:00 --allow-shrinking`"):
        begin.execute(context("manual__reprocess", iv, conf={"reprocess": True}))
    assert sorted(sink.status(iv)) == [1]
    began = begin.execute(context("manual__reprocess2", iv, conf={"reprocess": True, "allow_shrinking": True}))
    meta = sink.status(iv)[TxnRef.from_dict(began["txn"]).epoch].records["open"]["meta"]
    assert meta["dropped_inputs"] == ["s:dt=2013-01-01/a.csv"] and began["inputs"] == 1


def test_a_stateful_begin_waits_while_its_predecessors_run_is_running_and_only_then(tmp_path, monkeypatch):
    """Issue 13 case 4: the runs of a parallel backfill start together. Day 2's begin defers to the triggerer
    (no retry used, nothing written; not a reschedule, which Airflow may count as a try) while day 1's run is
    queued or running: its trigger fires once day 1 is committed, never sooner than EO_RESUME_SETTLE_SECONDS
    after deferring, and the deferral times out after EO_PREDECESSOR_POKE_SECONDS (begin looks itself). It
    fails with a clear error EO_PREDECESSOR_TIMEOUT_SECONDS after the try first waited, at once (no retries)
    when day 1's run has finished without a commit or does not exist, and begins on day 1's committed state
    once it is there - resumed by the trigger or by the deferral's timeout."""
    import asyncio
    import time
    from datetime import timedelta

    from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

    from exactly_once.airflow.operators import WAIT_SINCE
    from exactly_once.airflow.triggers import PredecessorWaitTrigger
    from exactly_once.ids import TxnRef

    for day in ("2013-01-01", "2013-01-02"):
        folder = tmp_path / "landing" / "s" / f"dt={day}"
        folder.mkdir(parents=True)
        (folder / "a.csv").write_text("x\n1\n")
    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", stateful=True, start=START)
    day1, day2 = Interval.daily("2013-01-01"), Interval.daily("2013-01-02")
    begin = BeginOperator(task_id="begin", config=cfg, begin_task_id="t.begin")
    sink = cfg.sink_handle()
    monkeypatch.setenv("EO_PREDECESSOR_POKE_SECONDS", "60")
    monkeypatch.setenv("EO_PREDECESSOR_TIMEOUT_SECONDS", "3600")
    monkeypatch.setenv("EO_RESUME_SETTLE_SECONDS", "45")

    def ctx(prev_state: str | None, since: float | None = None) -> dict[str, Any]:
        c = context("backfill__day2", day2)
        c["ti"].get_previous_dagrun = lambda state=None: None if prev_state is None else SimpleNamespace(
            state=prev_state, data_interval_end=day2.start)
        if since is not None:
            c["ti"].pushed[WAIT_SINCE] = since  # an earlier part of this try waited already
        return c

    for state in ("queued", "running"):
        c, before = ctx(state), time.time()
        with pytest.raises(TaskDeferred) as waiting:
            begin.execute(c)
        trigger = waiting.value.trigger
        assert isinstance(trigger, PredecessorWaitTrigger) and waiting.value.method_name == "after_predecessor_wait"
        assert waiting.value.timeout == timedelta(seconds=60)
        assert trigger.ends_at == day2.start.isoformat() and before + 45 <= trigger.not_before <= time.time() + 45
        assert before <= c["ti"].pushed[WAIT_SINCE] <= time.time()
    monkeypatch.setenv("EO_RESUME_SETTLE_SECONDS", "90")  # the deferral's timeout never resumes it sooner either
    c = ctx("running", since=time.time() - 100)
    with pytest.raises(TaskDeferred) as waiting:
        begin.execute(c)
    assert waiting.value.timeout == timedelta(seconds=90)
    assert c["ti"].pushed[WAIT_SINCE] < time.time() - 99   # the try's first wait counts, not this look
    assert sink.status(day2) == {}  # nothing was written while waiting
    with pytest.raises(AirflowFailException, match=r"PredecessorPendingError.*run that interval first.*waited 35\d\d s"):
        begin.execute(ctx("running", since=time.time() - 3590))
    final = r"PredecessorPendingError.*run that interval first"  # at once, no retry: nothing could commit it
    with pytest.raises(AirflowFailException, match=final):  # day 1's run is over and committed nothing
        begin.execute(ctx("failed"))
    with pytest.raises(AirflowFailException, match=final):  # no run of day 1 at all
        begin.execute(ctx(None))
    # the trigger (as the triggerer rebuilds it from its serialized form) waits while day 1 is not committed
    path, kwargs = trigger.serialize()
    assert path == "exactly_once.airflow.triggers.PredecessorWaitTrigger"
    rebuilt = PredecessorWaitTrigger(**{**kwargs, "not_before": time.time() + 0.3})
    assert rebuilt.look(rebuilt.open_sink()) is None
    # day 1 commits; the trigger fires, not before not_before; day 2 begins on its state
    first = TxnRef.from_dict(begin.execute(context("day1", day1))["txn"])
    assert rebuilt.look(rebuilt.open_sink()) is None  # day 1 began, not committed
    out = os.path.join(sink.data_dir(first), "dt=2013-01-01")
    os.makedirs(out)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"x": [1]}), os.path.join(out, "part-0.parquet"))
    sink.pre_commit(first)
    sink.record_validation(first, True, {})
    sink.commit(first)

    async def first_event():
        async for event in rebuilt.run():
            return event.payload, time.time()

    payload, fired = asyncio.run(first_event())
    assert payload == {"interval": day2.token, "why": f"its predecessor {day1.token} is committed"}
    assert fired >= rebuilt.not_before
    began = begin.after_predecessor_wait(ctx("running"), payload)
    assert sink.status(day2)[TxnRef.from_dict(began["txn"]).epoch].reads == first
    # a deferral that timed out (no triggerer) looks again, and goes on as well
    again = begin.resume_execution("__fail__", {"error": "Trigger timeout"}, ctx("running"))
    assert sink.status(day2)[TxnRef.from_dict(again["txn"]).epoch].reads == first


def _commit_first_version(begin: BeginOperator, sink: Any, iv: Interval, run_id: str) -> Any:
    """begin through the operator, then a stand-in write and the protocol's pre_commit/verdict/commit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exactly_once.ids import TxnRef

    txn = TxnRef.from_dict(begin.execute(context(run_id, iv))["txn"])
    out = os.path.join(sink.data_dir(txn), f"dt={iv.day}")
    os.makedirs(out)
    pq.write_table(pa.table({"x": [1, 2]}), os.path.join(out, "part-0.parquet"))
    sink.pre_commit(txn)
    sink.record_validation(txn, True, {})
    sink.commit(txn)
    return txn


@pytest.mark.parametrize("committed_before", [True, False])
def test_clearing_the_commit_task_reports_the_truth_and_never_retries(tmp_path, committed_before):
    """Issue 13 case 2: Airflow's own clear (DAG.partial_subset) of the commit task also re-runs its
    setup (begin: a new, empty attempt) and teardown (abort). Commit then sees an attempt that never
    wrote: if the interval is committed and live it succeeds saying so (nothing published twice, the
    teardown aborts the empty attempt); if nothing is committed it fails at once - no retries - naming
    the task to clear instead. Either way the live data is what it was and nothing is left staged."""
    from airflow.sdk.exceptions import AirflowFailException

    from exactly_once.ids import TxnRef

    landing = tmp_path / "landing" / "s" / "dt=2013-01-01"
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text("x\n1\n")
    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}")
    with DAG("daily", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=START) as dag:
        exactly_once_group(cfg)
    iv, sink = Interval.daily("2013-01-01"), cfg.sink_handle()
    first = _commit_first_version(dag.task_dict["t.begin"], sink, iv, "scheduled") if committed_before else None
    cleared = dag.partial_subset(task_ids=["t.commit"], include_downstream=True, include_upstream=False)
    assert sorted(cleared.task_dict) == ["t.abort", "t.begin", "t.commit"]  # what "Clear" re-runs
    began = cleared.task_dict["t.begin"].execute(context("scheduled", iv))
    again = TxnRef.from_dict(began["txn"])
    ctx = context("scheduled", iv, **{"t.begin": began})
    if committed_before:
        result = cleared.task_dict["t.commit"].execute(ctx)
        assert result == {"version": first.name, "already_committed": True, "attempt": again.name}
    else:
        with pytest.raises(AirflowFailException, match="CommitWithoutWriteError.*clear the write task"):
            cleared.task_dict["t.commit"].execute(ctx)
    cleared.task_dict["t.abort"].execute(ctx)
    statuses = sink.status(iv)
    assert statuses[again.epoch].state is State.ABORTED
    assert sink.live_version("dt=2013-01-01") == (first.name if first else None)
    assert not os.path.exists(sink.staging_dir(again))


@pytest.mark.parametrize("finisher", ["t.abort", "t.begin"])
def test_a_publish_finished_by_the_teardown_or_the_next_begin_still_gets_its_asset_event_and_summary(
        tmp_path, monkeypatch, finisher):
    """Issue 13 case 3: the commit task decided COMMITTED and died before publishing (every try, or
    "Mark failed"). Whoever finishes the publish - the run's teardown, or the next run's begin - emits the
    table's asset event (through its AssetAlias outlet, with the commit's extra), leaves the run note
    and writes the run summary; a teardown with nothing to finish emits nothing."""
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import OutletEventAccessors

    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", reports=str(tmp_path / "reports"))
    iv, sink, tasks, began, txn = begun_daily_with_output(tmp_path, cfg, "scheduled", [1, 2])
    sink.pre_commit(txn)
    sink.record_validation(txn, True, {})
    monkeypatch.setenv("EO_FAILPOINTS", "commit.before_publish=error")
    with pytest.raises(FailpointError):  # decided, then died: nothing live, no event from commit
        tasks["t.commit"].execute(context("scheduled", iv, **{"t.begin": began}))
    monkeypatch.delenv("EO_FAILPOINTS")
    assert sink.status(iv)[txn.epoch].state is State.COMMITTED and sink.live_version("dt=2013-01-01") is None
    ctx = context("scheduled", iv, **{"t.begin": began}) if finisher == "t.abort" else context("next", iv)
    ctx["outlet_events"] = events = OutletEventAccessors()
    ctx["ti"].task_id = finisher
    tasks[finisher].execute(ctx)
    assert sink.live_version("dt=2013-01-01") == txn.name
    [alias] = tasks[finisher].outlets
    [event] = events[alias].asset_alias_events
    assert event.dest_asset_key.uri == Asset(uri=f"file://{cfg.table_url}").uri
    assert event.extra["version"] == txn.name and event.extra["rows"] == 2
    assert ctx["ti"].pushed["eo_note"] == f"published e1: 2 rows, 1 file (publish finished by {finisher})"
    assert (tmp_path / "reports" / "runs" / "daily" / f"{txn.name}.json").is_file()
    quiet = context("scheduled", iv, **{"t.begin": began})
    quiet["outlet_events"] = nothing = OutletEventAccessors()
    tasks["t.abort"].execute(quiet)  # already published: nothing to announce
    assert nothing[alias].asset_alias_events == [] and "eo_note" not in quiet["ti"].pushed


@pytest.mark.parametrize("wrote, skipped", [
    ({"spark": "connect", "attempt": 1}, True), ({"spark": "submit", "attempt": 1}, True),
    ({"spark": "connect", "attempt": 2}, False),  # an earlier, dead try's queries may still run: abort interrupts
    (None, False)])                               # the write left no XCom (marked success, an older version)
def test_commit_skips_the_teardown_only_when_the_first_write_try_wrote_what_it_published(tmp_path, wrote, skipped):
    """After a publish, the teardown's only work is interrupting Spark Connect queries of dead write tries.
    When the write's first try wrote (its XCom says so), commit skips the teardown (no task start; the
    summary is still its XCom); otherwise the teardown runs."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from exactly_once.airflow.compat import DownstreamTasksSkipped

    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", reports=str(tmp_path / "reports"))
    iv, sink, tasks, began, txn = begun_daily_with_output(tmp_path, cfg, "scheduled", [1, 2])
    sink.pre_commit(txn)
    sink.record_validation(txn, True, {})
    ctx = context("scheduled", iv, **{"t.begin": began, "t.write": wrote})
    ctx["outlet_events"] = OutletEventAccessors()
    if skipped:
        with pytest.raises(DownstreamTasksSkipped) as raised:
            tasks["t.commit"].execute(ctx)
        assert raised.value.tasks == ["t.abort"]
        summary = ctx["ti"].pushed["return_value"]
    else:
        summary = tasks["t.commit"].execute(ctx)
        assert "return_value" not in ctx["ti"].pushed  # Airflow pushes what execute returns
    assert summary["version"] == txn.name and sink.live_version("dt=2013-01-01") == txn.name
    assert not os.path.exists(sink.staging_dir(txn))  # nothing the teardown would have removed


def test_commit_keeps_the_teardown_when_airflow_cannot_say_the_task_states(tmp_path):
    """An Airflow whose task instance cannot query task states (or a failing query): the teardown runs."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", reports=str(tmp_path / "reports"))
    iv, sink, tasks, began, txn = begun_daily_with_output(tmp_path, cfg, "scheduled", [1, 2])
    sink.pre_commit(txn)
    sink.record_validation(txn, True, {})
    ctx = context("scheduled", iv, **{"t.begin": began, "t.write": {"spark": "submit", "attempt": 1}})
    ctx["outlet_events"] = OutletEventAccessors()

    def unavailable(**_: Any) -> Any:
        raise AttributeError("'RuntimeTaskInstance' object has no attribute 'get_task_states'")

    ctx["ti"].get_task_states = unavailable
    assert tasks["t.commit"].execute(ctx)["version"] == txn.name  # published, no skip raised
    assert sink.live_version("dt=2013-01-01") == txn.name
