"""The plugin's FastAPI app, mounted by Airflow's API server under ``/eo``; every route needs a login.

Routes (all GET; HTML unless said otherwise)::

    /eo/tables                                   the tables the user may see
    /eo/dags/<dag_id>                            the tables of one pipeline (the DAG page's "Tables" tab)
    /eo/dags/<dag_id>/tables/<sink>              one table: intervals x epochs, filters ?state=&since=&until=
    /eo/dags/<dag_id>/tables/<sink>/versions/<v> one transaction: measured values next to the limits
    /eo/dags/<dag_id>/runs/<run_id>              what one DAG run did (the validate task's report link)
    /eo/api/dags/<dag_id>/tables/<sink>          the table page as JSON
    /eo/reports/<path>                           Data Docs and run summaries (files; no symlinks, no escape)

Every request is authenticated first (an app-wide dependency on Airflow's ``get_user``: no or a bad
token -> 401/403), including paths that do not exist (a catch-all route answers 404 only after
authentication); there is no ``/docs`` or ``/openapi.json``. Each route then asks the auth manager
whether the user may read the DAG the data belongs to (403 otherwise).
"""
from __future__ import annotations

import logging
import os

from fastapi import Depends, FastAPI, HTTPException, Query, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..errors import UnsafeIdentifierError
from ..reports import URL_PREFIX, reports_root
from . import pages
from .auth import GetUserDep, authorize_dag, can_read_dag, dag_of_report, get_user
from .files import read_under
from .tables import TableRef, find_table, known_tables, tables_of
from .views import Filters, page_json, run_page, table_page, version_page

log = logging.getLogger(__name__)
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _html(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=NO_STORE)


def _table(user: GetUserDep, dag_id: str, sink: str) -> TableRef:
    authorize_dag(user, dag_id)
    table = find_table(dag_id, sink)
    if table is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no table {sink!r} in pipeline {dag_id!r}")
    return table


def _filters(state: str | None, since: str | None, until: str | None, limit: int | None) -> Filters:
    try:
        return Filters.parse(state, since, until, limit)
    except ValueError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None


def create_app() -> FastAPI:
    """The app; authentication is a dependency of the app itself, so no route can forget it."""
    app = FastAPI(title="exactly-once", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(get_user)])

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse(f"{URL_PREFIX}/tables")

    @app.get("/tables", response_class=HTMLResponse)
    def tables(user: GetUserDep) -> HTMLResponse:
        every = known_tables()
        allowed = {p: can_read_dag(user, p) for p in {t.pipeline for t in every}}
        mine = [t for t in every if allowed[t.pipeline]]
        return _html(pages.index_page(mine, len(every) - len(mine)))

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def dag_tables(dag_id: str, user: GetUserDep) -> HTMLResponse:
        authorize_dag(user, dag_id)
        return _html(pages.index_page(tables_of(dag_id), 0))

    @app.get("/dags/{dag_id}/tables/{sink}", response_class=HTMLResponse)
    def table(dag_id: str, sink: str, user: GetUserDep, state: str | None = None, since: str | None = None,
              until: str | None = None, limit: int | None = Query(None, ge=1, le=500)) -> HTMLResponse:
        found = _table(user, dag_id, sink)
        return _html(pages.table_html(table_page(found, _filters(state, since, until, limit))))

    @app.get("/api/dags/{dag_id}/tables/{sink}")
    def table_json(dag_id: str, sink: str, user: GetUserDep, state: str | None = None, since: str | None = None,
                   until: str | None = None, limit: int | None = Query(None, ge=1, le=500)) -> JSONResponse:
        found = _table(user, dag_id, sink)
        return JSONResponse(page_json(table_page(found, _filters(state, since, until, limit))), headers=NO_STORE)

    @app.get("/dags/{dag_id}/tables/{sink}/versions/{version}", response_class=HTMLResponse)
    def version(dag_id: str, sink: str, version: str, user: GetUserDep) -> HTMLResponse:
        report = version_page(_table(user, dag_id, sink), version)
        if report is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no version {version!r} of {sink!r}")
        return _html(pages.version_html(report))

    @app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse)
    def run(dag_id: str, run_id: str, user: GetUserDep) -> HTMLResponse:
        authorize_dag(user, dag_id)
        return _html(pages.run_html(run_page(dag_id, run_id, tables_of(dag_id))))

    @app.get("/reports/{path:path}")
    def report_file(path: str, user: GetUserDep) -> Response:
        authorize_dag(user, dag_of_report(path))
        try:
            found = read_under(reports_root(), path)
        except (FileNotFoundError, UnsafeIdentifierError, NotADirectoryError, IsADirectoryError):
            raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found") from None
        if found.directory:
            return RedirectResponse(f"{path.rstrip('/').rsplit('/', 1)[-1]}/")  # relative: keeps the mount prefix
        return Response(found.content, media_type=found.media_type, headers=NO_STORE)

    @app.api_route("/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
                   include_in_schema=False)
    def not_found(rest: str) -> Response:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found")  # only after authentication

    os.makedirs(reports_root(), exist_ok=True)
    return app
