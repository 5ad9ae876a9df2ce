"""The daily schedule the benchmark's naive DAGs share with ``pv_pipeline`` (not a DAG file itself: the
bench links only the DAG files into its DAGs folder; they import this one from its real directory)."""
from __future__ import annotations

import os
from datetime import date, datetime, timezone

from airflow.sdk import DAG, CronDataIntervalTimetable


def daily_dag(dag_id: str, description: str) -> DAG:
    """A daily ``[00:00, 24:00)`` UTC DAG from ``EO_PV_START`` (to ``EO_PV_END`` when set), one run at a time,
    as ``pv_pipeline``."""
    start = date.fromisoformat(os.environ.get("EO_PV_START", "2026-01-01"))
    end = os.environ.get("EO_PV_END")
    return DAG(dag_id=dag_id, description=description,
               schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
               start_date=datetime(start.year, start.month, start.day, tzinfo=timezone.utc),
               end_date=datetime.fromisoformat(end).replace(tzinfo=timezone.utc) if end else None,
               catchup=False, max_active_runs=1, tags=["bench"])
