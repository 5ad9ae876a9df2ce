"""Pipeline configuration: where data lives and how a sink is checked - from settings, never from code.

``EO_DATA_ROOT`` (default ``./data``) holds ``landing/``, ``warehouse/`` (tables, each with its
transaction log) and ``reports/``. It may be a local path or ``s3://bucket/prefix``; S3 credentials come
from the Airflow connection named by ``EO_STORAGE_CONN_ID`` (or the usual AWS environment), never from
code, and are never logged.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from .ids import check_name
from .storage import redact
from .transaction import TwoPhaseCommitSink

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def data_root() -> str:
    """``EO_DATA_ROOT`` as an absolute local path or an ``s3://`` URL."""
    root = os.environ.get("EO_DATA_ROOT") or str(PROJECT_ROOT / "data")
    return root.rstrip("/") if "://" in root else os.path.abspath(root)


def reports_dir(root: str | None = None) -> str:
    """Where Data Docs and run summaries go: always a local directory."""
    root = root or data_root()
    default = f"{root}/reports" if "://" not in root else str(PROJECT_ROOT / "data" / "reports")
    return os.path.abspath(os.environ.get("EO_REPORTS_DIR") or default)


def storage_options_from_connection(conn_id: str | None) -> dict[str, Any]:
    """s3fs options from an Airflow (aws) connection: key, secret, endpoint_url. Empty if no conn id."""
    if not conn_id:
        return {}
    from airflow.sdk import BaseHook  # only needed inside Airflow

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson
    opts: dict[str, Any] = {}
    if conn.login:
        opts["key"] = conn.login
    if conn.password:
        opts["secret"] = conn.password
    endpoint = extra.get("endpoint_url") or (extra.get("service_config", {}).get("s3", {}) or {}).get("endpoint_url")
    if endpoint:
        opts["endpoint_url"] = endpoint
    return opts


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline writing one sink (table) from one landing source.

    ``stateful`` pipelines run their intervals in order: interval n reads the state committed by n-1,
    except the first interval (``start``). ``max_malformed_ratio`` is the completeness gate's limit on
    malformed input lines. ``keep_rejected`` keeps an aborted run's staging (data + quarantine) under
    ``<table>/_rejected/`` for inspection instead of deleting it.
    """

    pipeline: str
    sink: str
    source: str
    application: str
    suite: str | None = None
    stateful: bool = True
    start: date | None = None
    max_malformed_ratio: float = 0.05
    keep_rejected: bool = False
    root: str = field(default_factory=data_root)
    storage_conn_id: str | None = field(default_factory=lambda: os.environ.get("EO_STORAGE_CONN_ID") or None)

    def __post_init__(self) -> None:
        check_name(self.pipeline, "pipeline id")
        check_name(self.sink, "sink name")
        check_name(self.source, "source name")
        if not 0.0 <= self.max_malformed_ratio <= 1.0:
            raise ValueError(f"max_malformed_ratio must be within [0, 1], got {self.max_malformed_ratio}")

    @property
    def table_url(self) -> str:
        return f"{self.root}/warehouse/{self.sink}"

    @property
    def landing_url(self) -> str:
        return f"{self.root}/landing/{self.source}"

    @property
    def reports_url(self) -> str:
        """Reports are local files a browser opens (``EO_REPORTS_DIR``; default ``<root>/reports``, or
        ``./data/reports`` when the data root is on S3)."""
        return reports_dir(self.root)

    def storage_options(self) -> dict[str, Any]:
        return storage_options_from_connection(self.storage_conn_id)

    def sink_handle(self) -> TwoPhaseCommitSink:
        """The two-phase-commit sink of this pipeline's table (validation required when a suite is set)."""
        return TwoPhaseCommitSink.at(self.table_url, pipeline=self.pipeline, sink=self.sink,
                                     storage_options=self.storage_options(),
                                     require_validation=self.suite is not None)

    def describe(self) -> str:
        """One line for logs; never contains credentials."""
        return f"{self.pipeline}/{self.sink}: landing={redact(self.landing_url)} table={redact(self.table_url)}"
