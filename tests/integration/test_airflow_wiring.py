"""The Airflow wiring (exactly_once.airflow): nested task groups, several sinks per DAG, refusals at DAG
build time, and the abort teardown when begin handed no transaction on. No JVM: operators are executed
with the context Airflow would give them."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
from airflow.sdk import DAG, CronDataIntervalTimetable, CronTriggerTimetable, TaskGroup

from exactly_once.airflow import exactly_once_group
from exactly_once.airflow.operators import AbortOperator, BeginOperator, PhaseOperator
from exactly_once.protocol.config import PipelineConfig
from exactly_once.errors import FailpointError, LayoutError
from exactly_once.ids import Interval
from exactly_once.protocol.layout import Source
from exactly_once.records.txlog import State

START = datetime(2013, 1, 1, tzinfo=timezone.utc)
HOURLY = "dt={start:%Y-%m-%d}/hour={start:%H}"


def config(root: Any, sink: str = "t", partitions: str = HOURLY, **kw: Any) -> PipelineConfig:
    """A pipeline of the DAG being built (its pipeline is the DAG id), else of ``daily`` (the DAG the tests
    build for a config made first)."""
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    kw.setdefault("sources", Source("s", format="csv"))
    kw.setdefault("pipeline", getattr(DagContext.get_current(), "dag_id", "daily"))
    return PipelineConfig(sink=sink, root=str(root), application="/job.py", partitions=partitions, **kw)


def hourly_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"), start_date=START)


def test_nested_groups_pull_the_transaction_by_the_real_task_id(tmp_path):
    with hourly_dag("nested") as dag:
        with TaskGroup("outer"), TaskGroup("inner"):
            exactly_once_group(config(tmp_path))
    begin_id = "outer.inner.t.begin"
    assert isinstance(dag.task_dict[begin_id], BeginOperator)
    phases = [t for t in dag.tasks if isinstance(t, PhaseOperator)]
    assert len(phases) == 5 and {t.begin_task_id for t in phases} == {begin_id}
    write = dag.task_dict["outer.inner.t.write"]
    spec_arg = write.application_args[1]
    pulls = {begin_id: {"spec": "s3://b/spec.json"}}
    ti = SimpleNamespace(xcom_pull=lambda task_ids: pulls.get(task_ids))
    assert jinja2.Template(spec_arg).render(ti=ti) == "s3://b/spec.json"


def test_several_sinks_in_one_dag_and_one_table_written_twice_is_refused(tmp_path):
    with hourly_dag("two") as dag:
        exactly_once_group(config(tmp_path, sink="a", application_args=["--x", "1"],
                                  spark_conf={"spark.executor.memory": "1g"}))
        exactly_once_group(config(tmp_path, sink="b"))
    assert {"a.commit", "b.commit"} <= set(dag.task_dict)
    assert dag.task_dict["a.write"].application_args[2:] == ["--x", "1"]
    assert dag.task_dict["a.write"].conf["spark.executor.memory"] == "1g"
    from airflow.sdk import AssetAlias

    aliases = {t.task_id: o.name for t in dag.tasks for o in t.outlets if isinstance(o, AssetAlias)}
    assert aliases == {f"{s}.{p}": f"exactly_once:two/{s}" for s in "ab" for p in ("begin", "commit", "abort")}
    with pytest.raises(LayoutError, match="both write a"), hourly_dag("dup"):
        exactly_once_group(config(tmp_path, sink="a"))
        exactly_once_group(config(tmp_path, sink="a"), group_id="a_again")


def test_a_group_whose_pipeline_is_not_its_dag_id_is_refused_at_dag_build(tmp_path):
    """The pipeline is the DAG id: the table page authorizes a table's readers and editors, and triggers its
    actions, on the DAG of that name - a copied config naming another DAG gave them that DAG's."""
    from exactly_once.errors import ConfigError

    with pytest.raises(ConfigError, match=r"DAG 'nightly_orders' declares table t with PipelineConfig\(pipeline="
                                          r"'pv_pipeline'\): the pipeline is the DAG id .* Set "
                                          r"pipeline='nightly_orders'"), hourly_dag("nightly_orders"):
        exactly_once_group(config(tmp_path, pipeline="pv_pipeline"))


def test_a_schedule_the_partitions_cannot_express_is_refused_at_dag_build(tmp_path):
    with pytest.raises(LayoutError, match="would both own partition dt=2013-01-01"), hourly_dag("daily_parts"):
        exactly_once_group(config(tmp_path, partitions="dt={start:%Y-%m-%d}"))
    with pytest.raises(LayoutError, match="zero-length data intervals"), \
            DAG("trigger", schedule=CronTriggerTimetable("0 * * * *", timezone="UTC"), start_date=START):
        exactly_once_group(config(tmp_path))
    with DAG("monthly", schedule=CronDataIntervalTimetable("0 0 1 * *", timezone="UTC"), start_date=START):
        exactly_once_group(config(tmp_path, partitions="month={start:%Y-%m}"))  # fine: one month each
    with pytest.raises(LayoutError, match=r"'@continuous' \(ContinuousTimetable\) starts a run as soon as the last "
                                          r"one ends.*use CronDataIntervalTimetable"), \
            DAG("continuous", schedule="@continuous", start_date=START, max_active_runs=1):
        exactly_once_group(config(tmp_path))  # its "intervals" end at the clock: refused, not a crash on them


def test_the_dag_build_check_covers_a_whole_year_and_names_the_collision(tmp_path):
    """Issue 46: DAGs from January 2026 whose only collision is in October, built for real. An hourly Berlin
    DAG partitioned by local date and hour: the repeated 02:00 of 10-25 is refused, the hint naming it and
    saying to add the UTC offset (with it the DAG builds). A daily UTC DAG whose partition callable moves a
    holiday (10-03) to the business day before: refused naming both October days and that the template
    repeats a value - not "add finer fields". (Before, the check saw the first 48 intervals and the days
    around each daylight-saving change: the holiday passed, and failed at its run's pre_commit.)"""
    from datetime import date, timedelta
    from zoneinfo import ZoneInfo

    berlin, jan = ZoneInfo("Europe/Berlin"), datetime(2026, 1, 1, tzinfo=timezone.utc)

    def local_hour(iv: Interval) -> str:
        s = iv.start.astimezone(berlin)
        return f"dt={s:%Y-%m-%d}/hour={s:%H}"

    def local_hour_offset(iv: Interval) -> str:
        s = iv.start.astimezone(berlin)
        return f"dt={s:%Y-%m-%d}/hour={s:%H%z}"

    def business_day(iv: Interval) -> str:
        day = iv.start.date()
        return f"dt={day - timedelta(days=1) if day == date(2026, 10, 3) else day}"

    hourly_berlin = CronDataIntervalTimetable("0 * * * *", timezone="Europe/Berlin")
    with pytest.raises(LayoutError, match=r"local time 2026-10-25 02:00 \(Europe/Berlin\), which occurs twice.*"
                                          r"put the UTC offset in the partition"), \
            DAG("berlin_hourly", schedule=hourly_berlin, start_date=jan):
        exactly_once_group(config(tmp_path, partitions=local_hour))
    with DAG("berlin_hourly_ok", schedule=hourly_berlin, start_date=jan):
        exactly_once_group(config(tmp_path, partitions=local_hour_offset))
    with pytest.raises(LayoutError, match=r"2026-10-02T.*2026-10-03T.*would both own partition dt=2026-10-02: .*"
                                          r"gives the same partition to two intervals 1 day, 0:00:00 apart, after "
                                          r"telling the earlier ones apart"), \
            DAG("holidays", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=jan):
        exactly_once_group(config(tmp_path, partitions=business_day))


def test_a_task_process_checks_only_the_first_interval_of_the_schedule(tmp_path, monkeypatch):
    """Parsed to run one task (every task start parses the DAG file again) the schedule check computes one
    interval, not 48 (~40 ms of croniter per task start): the dag-processor made the full check before it
    registered the file, and the partition claims at pre_commit refuse a shared partition whatever the schedule
    (review 38). Zero-length intervals are still refused."""
    from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID

    with monkeypatch.context() as task_runner:  # what Airflow's task runner sets while it parses the file
        task_runner.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, "daily_parts")
        task_runner.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "t.begin")
        with hourly_dag("daily_parts") as dag:
            exactly_once_group(config(tmp_path, partitions="dt={start:%Y-%m-%d}"))
        assert "t.begin" in dag.task_dict
        with pytest.raises(LayoutError, match="zero-length data intervals"), \
                DAG("trigger", schedule=CronTriggerTimetable("0 * * * *", timezone="UTC"), start_date=START):
            exactly_once_group(config(tmp_path))
    with pytest.raises(LayoutError, match="would both own partition"), hourly_dag("daily_parts"):
        exactly_once_group(config(tmp_path, partitions="dt={start:%Y-%m-%d}"))


class FakeTI:
    """What the operators use of a task instance: identity and XCom."""

    def __init__(self, run_id: str, xcom: dict[str, Any] | None = None) -> None:
        self.run_id, self.try_number, self.dag_id, self.task_id = run_id, 1, "d", "t.begin"
        self.xcom = xcom or {}
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcom.get(task_ids) if key == "return_value" else self.pushed.get(key)  # another key: its own

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def get_task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str]) -> dict[str, Any]:
        return {run_id: {t: "success" for t in task_ids} for run_id in run_ids}  # what ran before this task


def context(run_id: str, iv: Interval, conf: dict[str, Any] | None = None, **xcom: Any) -> dict[str, Any]:
    return {"ti": FakeTI(run_id, xcom), "data_interval_start": iv.start, "data_interval_end": iv.end,
            "dag_run": SimpleNamespace(conf=conf or {})}


def one_csv_day(tmp_path: Any) -> tuple[PipelineConfig, Interval, BeginOperator]:
    """A daily pipeline with one landing file for 2013-01-01: ``(config, interval, its begin operator)``."""
    landing = tmp_path / "landing" / "s" / "dt=2013-01-01"
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text("x\n1\n")
    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", sources=Source("s", format="csv", allow_empty=True))
    return cfg, Interval.daily("2013-01-01"), BeginOperator(task_id="begin", config=cfg, begin_task_id="t.begin")


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


def begun_daily_with_output(tmp_path, cfg: PipelineConfig, run_id: str, xs: list[int]):
    """A daily DAG of ``cfg`` whose begin task ran for 2013-01-01 (one landing file), with one Parquet
    file of column ``x`` = ``xs`` staged as the write's output: ``(iv, sink, tasks, began, txn)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exactly_once.ids import TxnRef

    landing = tmp_path / "landing" / "s" / "dt=2013-01-01"
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text("x\n1\n")
    with DAG("daily", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=START) as dag:
        exactly_once_group(cfg)
    iv, sink, tasks = Interval.daily("2013-01-01"), cfg.sink_handle(), dag.task_dict
    began = tasks["t.begin"].execute(context(run_id, iv))
    txn = TxnRef.from_dict(began["txn"])
    out = os.path.join(sink.data_dir(txn), "dt=2013-01-01")
    os.makedirs(out)
    pq.write_table(pa.table({"x": xs}), os.path.join(out, "part-0.parquet"))
    return iv, sink, tasks, began, txn


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


def _suite_file(path: Any, expectations: list[dict[str, Any]]) -> str:
    import json

    path.write_text(json.dumps({"name": "t", "expectations": expectations, "meta": {}}))
    return str(path)


def test_a_broken_suite_is_refused_when_the_dag_is_built_naming_the_file_and_the_field(tmp_path):
    """Issue 28: a suite in GX 0.x form (``expectation_type``) is a DAG import error naming the file and
    the field, not a validate task that fails three retries later with a pydantic traceback."""
    from exactly_once.errors import ConfigError

    bad = _suite_file(tmp_path / "t.json", [{"expectation_type": "expect_column_values_to_not_be_null",
                                            "kwargs": {"column": "x"}}])
    with pytest.raises(ConfigError, match=r"t\.json: .*expectations\[0\]\.expectation_type: unknown field "
                                          r"\(GX 1\.x calls it type\)"):
        with hourly_dag("broken_suite"):
            exactly_once_group(config(tmp_path, suite=bad))


def test_a_suite_broken_after_the_dag_was_built_fails_validate_at_once_and_ends_the_transaction(tmp_path):
    """The suite file was edited after the DAG was parsed: the validate task fails for good (no retry
    can fix a file), naming the file and the field, and the transaction is aborted."""
    from airflow.sdk.exceptions import AirflowFailException

    suite = _suite_file(tmp_path / "t.json", [{"type": "expect_column_values_to_not_be_null",
                                               "kwargs": {"column": "x"}}])
    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", suite=suite)
    iv, sink, tasks, began, txn = begun_daily_with_output(tmp_path, cfg, "run", [1])
    sink.pre_commit(txn, extra={"counts": {"version": 1, "records_in": 1, "records_out": 1,
                                           "rows_written": {"dt=2013-01-01": 1}}})
    _suite_file(tmp_path / "t.json", [{"type": "expect_column_values_to_not_be_null", "kwarg": {"column": "x"}}])
    with pytest.raises(AirflowFailException, match=r"ConfigError: .*t\.json: .*expectations\[0\]\.kwarg: "
                                                   r"unknown field \(did you mean kwargs\?\)"):
        tasks["t.validate"].execute(context("run", iv, **{"t.begin": began}))
    assert sink.status(iv)[txn.epoch].state is State.ABORTED
    assert not os.path.exists(sink.staging_dir(txn))


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


def test_young_heap_collects_only_what_the_block_made_and_leaves_the_heap_as_it_found_it():
    """``young_heap`` freezes the process's heap for a block (a full collection in it - a validation's, a Connect
    session's stop - walks only what the block made, not Airflow's, GX's and pandas' objects), and unfreezes it
    after - also when the block fails; a process that froze its heap itself is left alone."""
    import gc

    from exactly_once.airflow.heap import young_heap

    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), young_heap():
        before = gc.get_freeze_count()
        made = [{"cycle": None}]
        made[0]["cycle"] = made
        del made
        assert gc.collect() >= 1  # what the block made is still collected
        raise RuntimeError("the job failed")
    assert before > 1000 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()  # left alone: not frozen further (the count would grow by the young
        with young_heap():  # objects), not unfrozen (0); frozen objects that die meanwhile leave the count -
            assert 0 < gc.get_freeze_count() <= frozen  # a thread of an earlier test (asgiref's) may free some
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_every_phase_task_runs_with_the_heap_it_started_with_frozen(tmp_path, monkeypatch):
    """The phase operators and the write operator run their task inside ``young_heap`` (a validate task's full
    collection walked the ~470,000 objects a task process inherits: 0.2-0.3 s of its CPU), and leave the heap
    unfrozen, also when the phase fails."""
    import gc

    from exactly_once.airflow.write import WriteOperator

    seen: dict[str, int] = {}

    def spy(name: str, real: Any) -> Any:
        def call(self: Any, *args: Any) -> Any:
            seen[name] = gc.get_freeze_count()
            return real(self, *args)
        return call

    monkeypatch.setattr(BeginOperator, "call", spy("begin", BeginOperator.call))
    monkeypatch.setattr(WriteOperator, "_run", spy("write", lambda self, args, context, options: {"ran": args}))
    cfg, iv, begin = one_csv_day(tmp_path)
    assert gc.get_freeze_count() == 0
    monkeypatch.setenv("EO_FAILPOINTS", "begin.after=error")
    with pytest.raises(FailpointError):
        begin.execute(context("run_A", iv))
    assert seen.pop("begin") > 1000 and gc.get_freeze_count() == 0
    monkeypatch.delenv("EO_FAILPOINTS")
    began = begin.execute(context("run_B", iv))
    assert seen.pop("begin") > 1000 and gc.get_freeze_count() == 0
    write = WriteOperator(task_id="write", application="/job.py", application_args=["--spec", began["spec"]])
    assert write.execute(context("run_B", iv)) == {"ran": ["--spec", began["spec"]]}
    assert seen.pop("write") > 1000 and gc.get_freeze_count() == 0


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


def test_without_a_spark_connection_the_write_submits_to_local_and_says_so(monkeypatch, caplog):
    """The README promises ``local[*]`` by default; the Spark provider alone submits to ``yarn`` when the
    connection does not exist (every write of a fresh deployment failed). The write task defines it as
    ``local[*]`` for its process and logs so; an existing connection is left as it is."""
    import json

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from exactly_once.airflow.write import default_local

    monkeypatch.delenv("AIRFLOW_CONN_EO_NO_SUCH_SPARK", raising=False)       # restored (absent) afterwards
    assert SparkSubmitHook(conn_id="eo_no_such_spark")._connection["master"] == "yarn"   # the provider alone
    with caplog.at_level("WARNING", logger="exactly_once.airflow.write"):
        assert default_local("eo_no_such_spark") is True
    assert "no Airflow connection 'eo_no_such_spark': spark-submit runs the job on local[*]" in caplog.text
    command = SparkSubmitHook(conn_id="eo_no_such_spark")._build_spark_submit_command("job.py")
    assert command[command.index("--master") + 1] == "local[*]"
    monkeypatch.setenv("AIRFLOW_CONN_EO_CLUSTER", json.dumps({"conn_type": "spark", "host": "spark://h", "port": 7077}))
    assert default_local("eo_cluster") is False
    assert SparkSubmitHook(conn_id="eo_cluster")._connection["master"] == "spark://h:7077"
