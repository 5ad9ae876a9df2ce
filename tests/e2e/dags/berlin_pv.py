"""pv_pipeline on a local-time schedule (the tests' DAG, ``EO_DAGS_FOLDER``): each Berlin day from 02:00 to
02:00 - 23 h when the clocks go forward, 25 h when they go back - partitioned and landed by its local
date (docs/LAYOUT.md, "Time zones"). The same job, suite and data as pv_pipeline."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from airflow.sdk import DAG, CronDataIntervalTimetable

from exactly_once import settings
from exactly_once.airflow import exactly_once_group
from exactly_once.ids import Interval
from exactly_once.protocol.config import PipelineConfig
from exactly_once.protocol.layout import Source

ROOT = Path(__file__).resolve().parents[3]
BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2026, 3, 28, 1, tzinfo=timezone.utc)  # 02:00 in Berlin: the first interval (it ends at the jump)


def local_day(iv: Interval) -> str:
    """The interval's local date in Berlin: its partition, and its landing folder."""
    return f"dt={iv.start.astimezone(BERLIN):%Y-%m-%d}"


PV = PipelineConfig(
    pipeline="berlin_pv",
    sink="app_pv",
    **settings.from_env(),
    sources=Source("app_logs", format="json", path=local_day, allow_empty=True),
    partitions=local_day,
    application=str(ROOT / "spark_jobs" / "pv_counts.py"),
    suite=str(ROOT / "expectations" / "app_pv.json"),
    stateful=True,
    start=START,
    max_batch=31,
)

with DAG(
    dag_id="berlin_pv",
    schedule=CronDataIntervalTimetable("0 2 * * *", timezone="Europe/Berlin"),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["exactly-once", "test"],
):
    exactly_once_group(PV)
