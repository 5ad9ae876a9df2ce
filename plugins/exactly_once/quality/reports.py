"""Where reports live and how the Airflow UI links to them.

Data Docs pages and run summaries are written under ``EO_DATA_ROOT/reports`` (``EO_REPORTS_DIR``: a local
folder, or a storage URL a fleet shares). The Airflow plugin serves that folder at ``/eo/reports/`` on the
API server, so the "Data quality reports" menu entry opens them in the browser. The validate task's "Data
quality report" button opens the run's report page inside Airflow's UI: the run's "Exactly-once report"
tab (:func:`run_report_view_url`).
"""
from __future__ import annotations

import os
from urllib.parse import quote

from ..settings import reports_dir

URL_PREFIX = "/eo"
RUN_REPORT_ROUTE = "eo-run-report"  # url_route of the plugin's DAG-run tab, which frames run_report_url


def reports_root() -> str:
    return reports_dir()


def report_link(path: str | None) -> str:
    """A browser link for a report file: served by the plugin when under the reports root."""
    if not path:
        return ""
    root = reports_root()
    if "://" in root:  # a shared site on S3: links for the pages under it
        base = root.rstrip("/") + "/"
        return f"{URL_PREFIX}/reports/{path[len(base):]}" if path.startswith(base) else path
    local = path[len("file://"):] if path.startswith("file://") else path
    if os.path.abspath(local).startswith(os.path.abspath(root) + os.sep):
        rel = os.path.relpath(os.path.abspath(local), root)
        return f"{URL_PREFIX}/reports/{rel}"
    return path


def run_report_url(dag_id: str, run_id: str) -> str:
    """The plugin's report page of one DAG run: measured values next to limits, every suite's page."""
    return f"{URL_PREFIX}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def run_report_view_url(dag_id: str, run_id: str) -> str:
    """The run's "Exactly-once report" tab in Airflow's UI (``destination: dag_run`` external view): Airflow's
    navigation and the run's header around :func:`run_report_url`, which the UI frames (same origin)."""
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/plugin/{RUN_REPORT_ROUTE}"


def table_page_url(dag_id: str, sink: str) -> str:
    """The plugin's page of one table: every interval, its epochs, the live version."""
    return f"{URL_PREFIX}/dags/{quote(dag_id, safe='')}/tables/{quote(sink, safe='')}"


def version_page_url(dag_id: str, sink: str, version: str) -> str:
    """The plugin's report page of one transaction (one epoch of one interval)."""
    return f"{table_page_url(dag_id, sink)}/versions/{quote(version, safe='')}"
