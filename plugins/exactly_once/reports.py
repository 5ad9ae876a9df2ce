"""Where reports live and how the Airflow UI links to them.

Data Docs pages and run summaries are written under ``EO_DATA_ROOT/reports``. The Airflow plugin serves
that folder at ``/eo/reports/`` on the API server, so the validate task's "Data quality report" button
and the "Data quality reports" menu entry open them in the browser.
"""
from __future__ import annotations

import os
from urllib.parse import quote

from .settings import reports_dir

URL_PREFIX = "/eo"


def reports_root() -> str:
    return reports_dir()


def report_link(path: str | None) -> str:
    """A browser link for a report file: served by the plugin when under the reports root."""
    if not path:
        return ""
    root = reports_root()
    local = path[len("file://"):] if path.startswith("file://") else path
    if os.path.abspath(local).startswith(os.path.abspath(root) + os.sep):
        rel = os.path.relpath(os.path.abspath(local), root)
        return f"{URL_PREFIX}/reports/{rel}"
    return path


def run_report_url(dag_id: str, run_id: str) -> str:
    """The plugin's report page of one DAG run: measured values next to limits, every suite's page."""
    return f"{URL_PREFIX}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def table_page_url(dag_id: str, sink: str) -> str:
    """The plugin's page of one table: every interval, its epochs, the live version."""
    return f"{URL_PREFIX}/dags/{quote(dag_id, safe='')}/tables/{quote(sink, safe='')}"


def version_page_url(dag_id: str, sink: str, version: str) -> str:
    """The plugin's report page of one transaction (one epoch of one interval)."""
    return f"{table_page_url(dag_id, sink)}/versions/{quote(version, safe='')}"
