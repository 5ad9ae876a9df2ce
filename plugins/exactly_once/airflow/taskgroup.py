"""The reusable task group: begin (setup) -> write (Spark) -> pre_commit -> validate -> commit, abort (teardown).

Any DAG can publish any number of sinks exactly once, one group per sink, at any depth of TaskGroups::

    with DAG(..., schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC")):
        exactly_once_group(PipelineConfig(pipeline="flights_hourly", sink="flights_by_origin", ...))

The write task is a :class:`~exactly_once.airflow.write.WriteOperator` - a real ``SparkSubmitOperator``
on the ``spark_default`` connection (``local[*]`` by default, ``spark://host:7077`` for a cluster) that
runs the same job as a Spark Connect client when ``EO_SPARK_REMOTE`` or the connection says ``sc://``:
no code change. Its arguments are ``--spec <URL of the
job spec begin wrote>`` followed by the pipeline's ``application_args``; its conf is the defaults below
plus the pipeline's ``spark_conf``. Every task retries with exponential backoff.

At DAG build time the group refuses (LayoutError) a timetable without real data intervals, a partition
template under which two scheduled intervals would own one partition, and a second group writing the
same table in the DAG, and an expectation suite file that is not a valid suite (ConfigError naming the
file and the field: :func:`exactly_once.quality.suites.check_suites`).
"""
from __future__ import annotations

import os
import sys
import weakref
from datetime import timedelta
from typing import Any

from airflow.sdk import AssetAlias, TaskGroup, get_parsing_context

from ..protocol.config import PipelineConfig
from ..errors import ConfigError, LayoutError
from ..protocol.timetables import timetable_intervals, year_of_intervals, zone
from ..quality.suites import check_suites
from .compat import exponential_backoff
from .notes import asset_uri
from .operators import AbortOperator, BeginOperator, CommitOperator, PreCommitOperator, ValidateOperator
from .write import WriteOperator

SPARK_DEFAULTS = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
                  "spark.sql.shuffle.partitions": "8"}
# per DAG object (by identity: a DAG's hash changes as tasks are added): table URL -> group id
_TABLES: dict[int, tuple["weakref.ref[Any]", dict[str, str]]] = {}


def retry_args(retries: int | None = None, delay_seconds: float | None = None) -> dict[str, Any]:
    """Retries with exponential backoff; ``EO_RETRIES`` / ``EO_RETRY_DELAY_SECONDS`` override (tests)."""
    retries = int(os.environ.get("EO_RETRIES", retries if retries is not None else 3))
    delay = float(os.environ.get("EO_RETRY_DELAY_SECONDS", delay_seconds if delay_seconds is not None else 30))
    return {"retries": retries, "retry_delay": timedelta(seconds=delay), "retry_exponential_backoff": exponential_backoff(),
            "max_retry_delay": timedelta(minutes=30)}


def spark_env() -> dict[str, str]:
    """Environment for spark-submit: the Python of driver and executors (as the environment sets them,
    else this interpreter; the write task resolves them again when it runs), and the failpoints."""
    env = {k: os.environ.get(k) or sys.executable for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    for key in ("EO_FAILPOINTS", "EO_FAILPOINTS_STATE", "EO_S3_ENDPOINT_URL", "EO_SPARK_REMOTE"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    return env


def check_schedule(config: PipelineConfig, dag: Any, count: int = 48) -> None:
    """Refuse a DAG whose timetable has no real data intervals, or two of whose scheduled intervals in its
    first year - at least its first ``count`` - would share a partition under ``config.partitions``
    (LayoutError at DAG build time, naming the collision: e.g. a daily template on an hourly schedule, or a
    local hour repeated when daylight saving time ends). A year covers both daylight-saving changes of a
    local-time schedule; its intervals are computed, not asked of the timetable one by one
    (:func:`~exactly_once.protocol.timetables.walk`: an hourly year costs ~0.1 s of parse time).

    Parsed to run one of its tasks (Airflow's parsing context names the task), only the first interval is
    computed: every task start parses the file again, and the dag-processor made the full check before it
    registered the file. This check is an early refusal, not the guarantee: a template that repeats after
    more than a year (``y={start:%y}``) is not seen; the partition claims at pre_commit refuse a second
    interval's claim before anything is published. The cost of skipping it in tasks: a DAG file edited
    after its runs exist (an unversioned bundle) into a schedule the check refuses fails at its pre_commit,
    after the write, instead of at parse (review 38)."""
    start = dag.start_date or config.start
    if start is None:
        raise LayoutError(f"{dag.dag_id}: give the DAG a start_date (or the pipeline a start)")
    if _parsed_for_a_task():
        intervals = timetable_intervals(dag.timetable, start, 1)
    else:
        intervals = year_of_intervals(dag.timetable, start)
        if len(intervals) < count:  # long intervals (monthly, yearly): the first `count` of them
            intervals = timetable_intervals(dag.timetable, start, count)
    config.partitions.check_distinct(intervals, zone=zone(dag.timetable))  # type: ignore[union-attr]


def _parsed_for_a_task() -> bool:
    """Is the DAG file being parsed by Airflow's task runner, to run one task (Airflow's documented way to
    tell, "Optimizing DAG parsing delays during execution")?"""
    return get_parsing_context().task_id is not None


def _register_table(dag: Any, config: PipelineConfig, group_id: str) -> None:
    ref, tables = _TABLES.get(id(dag), (None, {}))
    if ref is None or ref() is not dag:
        tables = {}
        _TABLES[id(dag)] = (weakref.ref(dag, lambda _r, key=id(dag): _TABLES.pop(key, None)), tables)
    other = tables.get(config.table_url)
    if other is not None and other != group_id:
        raise LayoutError(f"{dag.dag_id}: groups {other} and {group_id} both write {config.sink} "
                          f"({config.table_url}); give each sink its own table")
    tables[config.table_url] = group_id


def exactly_once_group(config: PipelineConfig, *, group_id: str | None = None,
                       spark_conn_id: str = "spark_default", spark_conf: dict[str, str] | None = None,
                       retries: int | None = None, retry_delay_seconds: float | None = None) -> TaskGroup:
    """Build the two-phase-commit task group for ``config``'s sink and return it."""
    gid = group_id or config.sink
    check_suites(config.suite)  # a broken suite file is a DAG import error naming the file and field
    retry = retry_args(retries, retry_delay_seconds)
    conf = {**SPARK_DEFAULTS, **config.spark_conf, **(spark_conf or {})}  # type: ignore[dict-item]
    with TaskGroup(group_id=gid, tooltip=f"exactly-once publish of {config.sink}") as group:
        begin_id = group.child_id("begin")  # the real id, with every enclosing group's prefix
        common = {"config": config, "begin_task_id": begin_id, **retry}
        # The table's Asset (its URI is its location: moving EO_DATA_ROOT is a new asset) is announced
        # through an alias by whoever publishes - commit, or begin/the teardown finishing a publish commit
        # did not: an alias outlet emits nothing unless an event is added to it, so a task that published
        # nothing (commit of an interval already committed) announces nothing. A static Asset outlet
        # would emit an event on every success of its task.
        finishers = {"outlets": [AssetAlias(f"exactly_once:{config.pipeline}/{config.sink}")],
                     "asset_uri": asset_uri(config)}
        batch_write = {"application": config.application, "conn_id": spark_conn_id, "conf": conf,
                       "env_vars": spark_env(), "name": f"{config.pipeline}-{config.sink}-batch",
                       "application_args": list(config.application_args),
                       "storage_conn_id": config.storage_conn_id} if config.batched or config.one_task else None
        begin = BeginOperator(task_id="begin", batch_write=batch_write, **finishers, **common)
        write = WriteOperator(
            task_id="write", application=config.application, conn_id=spark_conn_id,
            name=f"{config.pipeline}-{config.sink}", conf=conf, env_vars=spark_env(),
            storage_conn_id=config.storage_conn_id,
            application_args=["--spec", f"{{{{ ti.xcom_pull(task_ids='{begin_id}')['spec'] }}}}",
                              *config.application_args], **retry)
        pre_commit = PreCommitOperator(task_id="pre_commit", **common)
        validate = ValidateOperator(task_id="validate", **common)
        commit = CommitOperator(task_id="commit", write_task_id=write.task_id, **finishers, **common)
        abort = AbortOperator(task_id="abort", spark_conn_id=spark_conn_id,
                              write_attempts=retry["retries"] + 1, **finishers, **common)
        begin >> write >> pre_commit >> validate >> commit >> abort
        abort.as_teardown(setups=begin)
    if begin.task_id != begin_id:
        raise LayoutError(f"task id {begin.task_id} != {begin_id}")  # a TaskGroup API change: fail loudly
    dag = begin.dag
    if dag is not None:
        _check_pipeline(config, dag.dag_id)
        _register_table(dag, config, group.group_id or gid)
        check_schedule(config, dag)
    return group


def _check_pipeline(config: PipelineConfig, dag_id: str) -> None:
    """The pipeline is the DAG id (DESIGN §3): the table page and ``eo`` authorize a table's readers and
    editors, and trigger its actions, on the DAG of that name - another DAG's, were they to differ."""
    if config.pipeline != dag_id:
        raise ConfigError(f"DAG {dag_id!r} declares table {config.sink} with PipelineConfig(pipeline="
                          f"{config.pipeline!r}): the pipeline is the DAG id - who may read the table and act on it, "
                          f"and the DAG its actions run, are taken from it. Set pipeline={dag_id!r} (a table already "
                          f"written as pipeline {config.pipeline!r} keeps that name: give the DAG that id)")
