"""The Airflow plugin: the tables page and reports (served by the API server behind Airflow's login),
the validate task's report link, the UI entries that open them, and the run notes."""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from ..quality.reports import RUN_REPORT_ROUTE, URL_PREFIX
from .notes import RunNotes
from .operators import ReportLink


@lru_cache(maxsize=1)
def _apps() -> tuple[dict[str, Any], ...]:
    from .webapp import create_app  # the API server's modules: imported only by the API server

    return ({"app": create_app(), "url_prefix": URL_PREFIX, "name": "Exactly-once tables and reports"},)


class _LazyApps:
    """``fastapi_apps``, built on first access: only the API server reads it, so schedulers and task
    processes that import the plugin never import FastAPI or the API server's auth modules."""

    def __get__(self, obj: Any, owner: Any) -> list[dict[str, Any]]:
        return list(_apps())


class ExactlyOncePlugin(AirflowPlugin):
    """Registers the report link, the tables page and the per-run report page in the UI."""

    name = "exactly_once"
    operator_extra_links = [ReportLink()]
    fastapi_apps = _LazyApps()  # type: ignore[assignment]
    listeners = [RunNotes()]  # each DAG run's note: what it published, or why not
    external_views = [
        {"name": "Exactly-once tables", "href": f"{URL_PREFIX}/tables", "url_route": "eo-tables",
         "destination": "nav", "category": "browse"},
        {"name": "Tables", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}", "url_route": "eo-dag-tables",
         "destination": "dag"},
        {"name": "Exactly-once report", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
         "url_route": RUN_REPORT_ROUTE, "destination": "dag_run"},  # the validate task's report link opens it
        {"name": "Data quality reports", "href": f"{URL_PREFIX}/data-docs",  # by interval, paged
         "url_route": "eo-data-docs", "destination": "nav", "category": "browse"},
    ]
