"""pv_pipeline's ``app_pv``, published into a database (PostgreSQL or MariaDB/MySQL) exactly once.

Same landing data, Spark job and checks as pv_pipeline; the staged Parquet is the write-ahead log; the
commit task loads it into ``app_pv(dt, app_id, pv, uv, cumulative_pv)`` in one database transaction with
the interval's marker row (docs/TARGETS.md). Its transaction log and state live apart from
pv_pipeline's, under ``EO_DATA_ROOT/warehouse/_exactly_once/app_pv_db/``.

``EO_DB_URL``: ``postgresql://postgres@127.0.0.1:5432/<db>`` or ``mysql://root@127.0.0.1:3306/<db>``
(``EO_DB_CONN_ID``, an Airflow connection, is used instead when set). The table is created on first use.
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
from exactly_once.targets import DatabaseTarget

ROOT = Path(__file__).resolve().parents[1]
START = date.fromisoformat(os.environ.get("EO_PV_START", "2026-01-01"))
END = os.environ.get("EO_PV_END")  # optional: the last interval's day (a deployment that runs only a backfill)
APP_PV_DDL = ("CREATE TABLE app_pv (dt date NOT NULL, app_id varchar(255) NOT NULL, pv bigint NOT NULL, "
              "uv bigint NOT NULL, cumulative_pv bigint NOT NULL, PRIMARY KEY (dt, app_id))")

conn_id = os.environ.get("EO_DB_CONN_ID") or None
TARGET = DatabaseTarget(
    table="app_pv",
    conn_id=conn_id,
    url=None if conn_id else os.environ.get("EO_DB_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    mode="replace",  # a reprocessed day replaces that day's rows (dt is the partition column)
    create_sql=APP_PV_DDL,
)

PV_TO_DB = PipelineConfig(
    pipeline="pv_to_db",
    sink="app_pv_db",  # its own transaction log and state, apart from pv_pipeline's app_pv
    **settings.from_env(),
    sources=Source("app_logs", format="json", path="dt={start:%Y-%m-%d}", allow_empty=True),
    partitions="dt={start:%Y-%m-%d}",
    application=str(ROOT / "spark_jobs" / "pv_counts.py"),
    suite=str(ROOT / "expectations" / "app_pv.json"),
    stateful=True,  # cumulative_pv reads the state committed by the previous interval
    start=START,
    max_malformed_ratio=float(os.environ.get("EO_PV_MAX_MALFORMED_RATIO", "0.05")),
    target=TARGET,
)

with DAG(
    dag_id="pv_to_db",
    description="Daily page views per app, loaded into a database exactly once",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(START.year, START.month, START.day, tzinfo=timezone.utc),
    end_date=datetime.fromisoformat(END).replace(tzinfo=timezone.utc) if END else None,
    catchup=False,
    max_active_runs=1,
    tags=["exactly-once", "spark", "database"],
    doc_md=__doc__,
):
    exactly_once_group(PV_TO_DB)
