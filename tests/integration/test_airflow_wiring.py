"""The Airflow wiring (exactly_once.airflow): nested task groups, several sinks per DAG, refusals at DAG
build time (schedules, partitions, suites), the heap the phase tasks run with, and the write's default Spark
connection. No JVM: operators are executed with the context Airflow would give them (``wiring_helpers``);
the phase tasks' own behaviour is ``test_airflow_phase_tasks``'s."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import jinja2
import pytest
from airflow.sdk import DAG, CronDataIntervalTimetable, CronTriggerTimetable, TaskGroup

from exactly_once.airflow import exactly_once_group
from exactly_once.airflow.operators import BeginOperator, PhaseOperator
from exactly_once.protocol.config import PipelineConfig
from exactly_once.errors import FailpointError, LayoutError
from exactly_once.ids import Interval
from exactly_once.records.txlog import State
from eo_testing import berlin_hour, berlin_hour_offset
from wiring_helpers import START, begun_daily_with_output, config, context, hourly_dag, one_csv_day


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

    jan = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def business_day(iv: Interval) -> str:
        day = iv.start.date()
        return f"dt={day - timedelta(days=1) if day == date(2026, 10, 3) else day}"

    hourly_berlin = CronDataIntervalTimetable("0 * * * *", timezone="Europe/Berlin")
    with pytest.raises(LayoutError, match=r"local time 2026-10-25 02:00 \(Europe/Berlin\), which occurs twice.*"
                                          r"put the UTC offset in the partition"), \
            DAG("berlin_hourly", schedule=hourly_berlin, start_date=jan):
        exactly_once_group(config(tmp_path, partitions=berlin_hour))
    with DAG("berlin_hourly_ok", schedule=hourly_berlin, start_date=jan):
        exactly_once_group(config(tmp_path, partitions=berlin_hour_offset))
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
