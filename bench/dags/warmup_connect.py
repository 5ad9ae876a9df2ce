"""Benchmark helper (NOT a project DAG): warms a bench deployment up before anything is timed - the
scheduler's forkserver forks its first worker, the worker parses a DAG file and imports the Spark provider,
and the Spark Connect server answers its first queries (a read of one landing day). No schedule: it runs
only when the bench triggers it, so unpausing it creates no run. Loaded only by ``python -m bench``
(``batched`` section).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator
from airflow.sdk import DAG


def warm_up(landing: str, spark: Any = None) -> int:
    """Count the lines under ``landing`` (one landing day, from the trigger's conf); ``spark`` comes last:
    the operator fills it in."""
    return spark.read.option("lineSep", "\n").text(landing).count()


with DAG(dag_id="bench_warmup", description="warms a bench deployment up (benchmark helper)", schedule=None,
         start_date=datetime(2020, 1, 1, tzinfo=timezone.utc), catchup=False, tags=["bench"]):
    PySparkOperator(task_id="warm_up", python_callable=warm_up, conn_id="spark_connect_default",
                    op_kwargs={"landing": "{{ dag_run.conf['landing'] }}"})
