"""Airflow wiring: thin operators over :class:`exactly_once.pipeline.IntervalRun`, the task group, the plugin."""
from .taskgroup import exactly_once_group

__all__ = ["exactly_once_group"]
