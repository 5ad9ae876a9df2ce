"""Benchmark baseline (NOT a project DAG): the pv job as ONE SparkSubmitOperator writing straight to a
target - what a pipeline without exactly-once looks like. Same timetable, same Spark connection and
configuration as ``pv_pipeline``'s write task; no begin/pre_commit/validate/commit/abort tasks.
Loaded only by ``python -m bench`` (which points a temporary DAGs folder at this file)."""
from __future__ import annotations

import sys
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from exactly_once.airflow.taskgroup import spark_env
from exactly_once.settings import data_root

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # daily.py (not linked into the DAGs folder)
from daily import daily_dag  # noqa: E402

DATA = data_root()

with daily_dag("naive_pv", "pv counts without exactly-once (benchmark baseline)"):
    SparkSubmitOperator(
        task_id="write", application=str(ROOT / "bench" / "naive_job.py"), conn_id="spark_default",
        name="naive_pv", env_vars=spark_env(),
        conf={"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
              "spark.sql.shuffle.partitions": "8"},
        application_args=["--landing", f"{DATA}/landing/app_logs", "--day", "{{ data_interval_start | ds }}",
                          "--target", f"{DATA}/naive/app_pv"])
