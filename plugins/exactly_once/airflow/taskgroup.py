"""The reusable task group: begin (setup) -> write (Spark) -> pre_commit -> validate -> commit, abort (teardown).

Any DAG can publish any sink exactly once with::

    with DAG(..., schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), max_active_runs=1):
        exactly_once_group(PipelineConfig(pipeline="pv_pipeline", sink="app_pv", ...))

The write task is a real ``SparkSubmitOperator`` on the ``spark_default`` connection (``local[*]`` by
default, ``spark://host:7077`` for a cluster: no code change). Its only argument is the URL of the job
spec that ``begin`` wrote into the staging dir. Every task retries with exponential backoff.
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, TaskGroup

from ..config import PipelineConfig
from .operators import AbortOperator, BeginOperator, CommitOperator, PreCommitOperator, ValidateOperator


def retry_args(retries: int | None = None, delay_seconds: float | None = None) -> dict[str, Any]:
    """Retries with exponential backoff; ``EO_RETRIES`` / ``EO_RETRY_DELAY_SECONDS`` override (tests)."""
    retries = int(os.environ.get("EO_RETRIES", retries if retries is not None else 3))
    delay = float(os.environ.get("EO_RETRY_DELAY_SECONDS", delay_seconds if delay_seconds is not None else 30))
    return {"retries": retries, "retry_delay": timedelta(seconds=delay), "retry_exponential_backoff": 2.0,
            "max_retry_delay": timedelta(minutes=30)}


def spark_env() -> dict[str, str]:
    """Environment for spark-submit: the same Python for driver and executors, and the failpoints."""
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for key in ("EO_FAILPOINTS", "EO_FAILPOINTS_STATE", "EO_S3_ENDPOINT_URL"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    return env


def exactly_once_group(config: PipelineConfig, *, group_id: str | None = None,
                       spark_conn_id: str = "spark_default", spark_conf: dict[str, str] | None = None,
                       retries: int | None = None, retry_delay_seconds: float | None = None) -> TaskGroup:
    """Build the two-phase-commit task group for ``config``'s sink and return it."""
    gid = group_id or config.sink
    common = {"config": config, "begin_task_id": f"{gid}.begin", **retry_args(retries, retry_delay_seconds)}
    conf = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "8", **(spark_conf or {})}
    with TaskGroup(group_id=gid, tooltip=f"exactly-once publish of {config.sink}") as group:
        begin = BeginOperator(task_id="begin", **common)
        write = SparkSubmitOperator(
            task_id="write", application=config.application, conn_id=spark_conn_id,
            name=f"{config.pipeline}-{config.sink}", conf=conf, env_vars=spark_env(),
            application_args=["--spec", f"{{{{ ti.xcom_pull(task_ids='{gid}.begin')['spec'] }}}}"],
            **retry_args(retries, retry_delay_seconds))
        pre_commit = PreCommitOperator(task_id="pre_commit", **common)
        validate = ValidateOperator(task_id="validate", **common)
        # The asset is the table's location (its URI is its name: moving EO_DATA_ROOT is a new asset)
        commit = CommitOperator(task_id="commit", outlets=[Asset(uri=_asset_uri(config))], **common)
        abort = AbortOperator(task_id="abort", **common)
        begin >> write >> pre_commit >> validate >> commit >> abort
        abort.as_teardown(setups=begin)
    return group


def _asset_uri(config: PipelineConfig) -> str:
    url = config.table_url
    return url if "://" in url else f"file://{url}"
