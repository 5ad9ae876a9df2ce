"""Page views per app per day (the seeds' PV example), published exactly once.

Reads ``EO_DATA_ROOT/landing/app_logs/dt=YYYY-MM-DD/`` (JSON lines, at-least-once delivery), writes
``EO_DATA_ROOT/warehouse/app_pv/dt=YYYY-MM-DD/`` (app_id, pv, uv, cumulative_pv). One DAG run = one daily
data interval [00:00, 24:00) UTC; the tasks are the phases of a two-phase commit.
With ``EO_PV_TABLE_FORMAT=delta`` the same location holds a Delta Lake table instead (one Delta commit
per published interval; read it with any Delta reader).
"""
from __future__ import annotations

import os
from datetime import date, datetime, timezone
from pathlib import Path

from airflow.sdk import DAG, CronDataIntervalTimetable

from exactly_once import settings
from exactly_once.airflow import exactly_once_group
from exactly_once.protocol.config import PipelineConfig
from exactly_once.protocol.layout import Source

ROOT = Path(__file__).resolve().parents[1]
START = date.fromisoformat(os.environ.get("EO_PV_START", "2026-01-01"))
END = os.environ.get("EO_PV_END")  # optional: the last interval's day (a deployment that runs only a backfill)

PV = PipelineConfig(
    pipeline="pv_pipeline",
    sink="app_pv",
    **settings.from_env(),  # root (EO_DATA_ROOT), reports, storage connection (EO_STORAGE_CONN_ID)
    # JSON lines in landing/app_logs/dt=YYYY-MM-DD/ (any hour=HH/ below): every file of the day
    sources=Source("app_logs", format="json", path="dt={start:%Y-%m-%d}", allow_empty=True),
    partitions="dt={start:%Y-%m-%d}",
    application=str(ROOT / "spark_jobs" / "pv_counts.py"),
    suite=str(ROOT / "expectations" / "app_pv.json"),
    stateful=True,  # cumulative_pv: interval n reads the state committed by the interval ending at its start
    start=START,    # the first interval: reads no state
    max_malformed_ratio=float(os.environ.get("EO_PV_MAX_MALFORMED_RATIO", "0.05")),
    keep_rejected=os.environ.get("EO_KEEP_REJECTED", "0") == "1",
    table_format=os.environ.get("EO_PV_TABLE_FORMAT") or "files",  # "delta": a Delta Lake table
    # a backfill computes up to a year of days in one Spark job, each day its own transaction
    # (EO_PV_MAX_BATCH=1: one Spark job per day, as before)
    max_batch=int(os.environ.get("EO_PV_MAX_BATCH") or 366),
    # EO_PV_ONE_TASK=1: a scheduled day is published by its begin task alone (a batch of one), the phase
    # tasks skipped
    one_task=os.environ.get("EO_PV_ONE_TASK", "0") == "1",
)

with DAG(
    dag_id="pv_pipeline",
    description="Daily page views per app, published exactly once",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),  # real [start, end) intervals
    start_date=datetime(START.year, START.month, START.day, tzinfo=timezone.utc),
    end_date=datetime.fromisoformat(END).replace(tzinfo=timezone.utc) if END else None,
    catchup=False,
    max_active_runs=1,  # stateful: intervals run in order
    tags=["exactly-once", "spark"],
    doc_md=__doc__,
):
    exactly_once_group(PV)
