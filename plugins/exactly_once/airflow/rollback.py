"""Rollback from Airflow: a thin operator over :func:`exactly_once.rollback.rollback` (see dags/eo_rollback.py)."""
from __future__ import annotations

import logging
from typing import Any, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from ..errors import ExactlyOnceError
from ..rollback import describe, find_interval, parse_version, rollback
from ..transaction import TwoPhaseCommitSink
from .connections import storage_options

log = logging.getLogger(__name__)


class RollbackOperator(BaseOperator):
    """Make version ``to_version`` of the interval starting at ``interval_start`` of the table at
    ``table_url`` live again, through the protocol. Templated, so a DAG passes its params in."""

    template_fields: Sequence[str] = ("table_url", "interval_start", "to_version")
    ui_color = "#f3e5f5"

    def __init__(self, *, table_url: str, interval_start: str, to_version: str,
                 storage_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table_url, self.interval_start, self.to_version = table_url, interval_start, to_version
        self.storage_conn_id = storage_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        try:
            sink = TwoPhaseCommitSink.open(self.table_url, storage_options=storage_options(self.storage_conn_id),
                                           require_validation=True)
            result = describe(rollback(sink, find_interval(sink, self.interval_start), parse_version(self.to_version)))
        except ExactlyOnceError as exc:  # no retry can fix a wrong version, a gc'ed one, an unknown table
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc
        log.info("rollback: %s", result)
        return result
