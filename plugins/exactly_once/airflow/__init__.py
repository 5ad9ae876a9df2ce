"""Airflow wiring: thin operators over :class:`exactly_once.protocol.pipeline.IntervalRun`, the task group, the plugin.

``exactly_once_group`` is imported on first use, so Airflow's provider discovery (which imports
``exactly_once.airflow.provider_info`` while it loads its own configuration) imports no operator.
"""
from typing import Any

__all__ = ["exactly_once_group"]


def __getattr__(name: str) -> Any:
    if name == "exactly_once_group":
        from .taskgroup import exactly_once_group

        return exactly_once_group
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
