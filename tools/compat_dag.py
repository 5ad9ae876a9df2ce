"""The import block of a user's DAG file for any compat corner (tools/compat.py's smoke DAG and
tools/compat_user.py's), apart so that both take it without importing each other."""

# the timetable from where that corner's Airflow has it
DAG_IMPORTS = '''\
from datetime import datetime, timezone
from pathlib import Path

from airflow.sdk import DAG

try:
    from airflow.sdk import CronDataIntervalTimetable          # Airflow 3.2+
except ImportError:
    from airflow.timetables.interval import CronDataIntervalTimetable  # Airflow 3.1

from exactly_once import settings
from exactly_once.airflow import exactly_once_group
from exactly_once.protocol.config import PipelineConfig
from exactly_once.protocol.layout import Source
'''
