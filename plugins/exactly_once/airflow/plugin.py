"""The Airflow plugin: report pages served by the API server, the report link, the UI menu entry."""
from __future__ import annotations

import os

from airflow.plugins_manager import AirflowPlugin

from ..reports import URL_PREFIX, reports_root
from .operators import ReportLink


def _reports_app():
    """A tiny FastAPI app serving ``EO_DATA_ROOT/reports`` (Data Docs, run summaries) read-only."""
    from fastapi import FastAPI
    from fastapi.staticfiles import StaticFiles

    app = FastAPI(title="exactly-once reports")
    root = reports_root()
    os.makedirs(root, exist_ok=True)
    app.mount("/reports", StaticFiles(directory=root, html=True, follow_symlink=False), name="reports")
    return app


class ExactlyOncePlugin(AirflowPlugin):
    """Registers the validate task's report link and the reports pages."""

    name = "exactly_once"
    operator_extra_links = [ReportLink()]
    fastapi_apps = [{"app": _reports_app(), "url_prefix": URL_PREFIX, "name": "Exactly-once reports"}]
    external_views = [{"name": "Data quality reports", "href": f"{URL_PREFIX.lstrip('/')}/reports/data_docs/index.html",
                       "destination": "nav", "category": "browse"}]
