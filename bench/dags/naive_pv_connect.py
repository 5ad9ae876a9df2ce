"""Benchmark baseline (NOT a project DAG): the pv job as ONE task over Spark Connect, writing straight to a
target - the naive DAG of ``naive_pv.py`` with the Airflow Spark provider's own Spark Connect way instead of
spark-submit: a ``PySparkOperator`` whose connection (``spark_connect_default``, type ``spark_connect``) names
the server; the operator opens the ``sc://`` session, hands it to the callable as ``spark`` and stops it after.
No begin/pre_commit/validate/commit/abort tasks. Loaded only by ``python -m bench`` (backfill section).
"""
from __future__ import annotations

import os
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator

from exactly_once.settings import data_root

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # daily.py (not linked into the DAGs folder)
from daily import daily_dag  # noqa: E402

DATA = data_root()


def naive_pv(day: str, landing: str, target: str, spark: Any = None) -> dict[str, Any]:
    """The same job as ``bench/naive_job.py`` (reads the previous day's state if present), as a Connect client.
    ``spark`` comes last: the operator gives it a default (None) and fills it in at run time."""
    for p in (str(ROOT), str(ROOT / "spark_jobs")):
        if p not in sys.path:
            sys.path.insert(0, p)
    import pv_counts

    from tools.sample_data import pv_spec

    prev = os.path.join(target, (date.fromisoformat(day) - timedelta(days=1)).isoformat(), "_state")
    spec = pv_spec(landing, day, os.path.join(target, day), prev if os.path.isdir(prev) else None)
    return {"day": day, "rows": sum(pv_counts.run(spark, spec).rows_written.values())}


with daily_dag("naive_pv_connect", "pv counts without exactly-once, over Spark Connect (benchmark baseline)"):
    PySparkOperator(
        task_id="write", python_callable=naive_pv, conn_id="spark_connect_default",
        op_kwargs={"day": "{{ data_interval_start | ds }}", "landing": f"{DATA}/landing/app_logs",
                   "target": f"{DATA}/naive/app_pv"})
