"""The plugin's FastAPI app, mounted by Airflow's API server under ``/eo``; every route needs a login.

Routes (all GET; HTML unless said otherwise)::

    /eo/tables                                   the tables the user may see, each with its status
    /eo/dags/<dag_id>                            the tables of one pipeline (the DAG page's "Tables" tab)
    /eo/dags/<dag_id>/tables/<sink>              one table: intervals x epochs, filters ?state=&since=&until=
    /eo/dags/<dag_id>/tables/<sink>/versions/<v> one transaction: measured values next to the limits
    /eo/dags/<dag_id>/runs/<run_id>              what one DAG run did (the validate task's report link)
    /eo/api/dags/<dag_id>/tables/<sink>          the table page as JSON
    /eo/reports/<path>                           Data Docs and run summaries (files; no symlinks, no escape);
                                                 ``runs/<dag_id>/`` redirects to the DAG's tables
    /eo/data-docs?table=&page=                   every validation, grouped by interval, paged (``docsindex``)
    /eo/dags/<dag_id>/tables/<sink>/actions/<a>  GET: what action <a> will do and a confirmation form, or
                                                 why it is refused (409, ``confirm``); POST (the form): the
                                                 same checks again, then trigger its DAG run(s) (``actions``)

Every request is authenticated first (an app-wide dependency on Airflow's ``get_user``: no or a bad
token -> 401/403), including paths that do not exist (a catch-all route answers 404 only after
authentication); there is no ``/docs`` or ``/openapi.json``. Each route then asks the auth manager
whether the user may read the DAG the data belongs to (403 otherwise). Errors are pages (escaped
message, a link back to the tables) except under ``/eo/api/``, where they stay ``{"detail": ...}``; no page
shows an exception's raw text (an unexpected one is logged with an id the page gives).
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from urllib.parse import parse_qs, quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from .. import settings
from ..errors import UnsafeIdentifierError
from ..quality.reports import URL_PREFIX, reports_root
from . import actions, docsindex, page_actions, page_table, pages
from . import runs as airflow_runs
from .confirm import Plan, plan
from .auth import GetUserDep, authorize_dag, can_act, can_read_dag, dag_of_report, get_user
from .datadocs import CSP, offline_html
from .connections import storage_options
from .files import read_under, read_url_under
from .tables import TableRef, find_table, known_tables, tables_of
from .style import SCRIPT_HASHES
from .views import (Filters, logged_intervals, page_json, run_page, stale_of, table_page, table_status,
                    version_page, with_airflow)

log = logging.getLogger(__name__)
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
# the plugin's own pages: inline style, fixed scripts (``style``: the colour mode and links out of Airflow's
# frame, by their hashes), forms only to this server, framed only by Airflow's UI
PAGE_CSP = (f"default-src 'none'; style-src 'unsafe-inline'; script-src {SCRIPT_HASHES}; img-src 'self' data:; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'self'")
# framed by Airflow's UI (same origin: the plugin's tabs and menu entries), by no other site; X-Frame-Options
# says the same as frame-ancestors for browsers that predate it
SAME_ORIGIN_FRAMES = {"X-Frame-Options": "SAMEORIGIN"}
PAGE_HEADERS = {**NO_STORE, **SAME_ORIGIN_FRAMES, "Content-Security-Policy": PAGE_CSP}


def _html(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=PAGE_HEADERS)


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


def _asked(user: GetUserDep, table: TableRef, action: str, form: dict[str, str]) -> actions.Request:
    """The action asked of ``table``, once the user is known to be allowed it (403) and it makes sense (400)."""
    if action not in actions.ACTIONS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no action {action!r}")
    run_dag = table.pipeline  # every action is a run of the table's own DAG (actions.trigger)
    if not can_act(user, table.pipeline, run_dag):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"{user.get_name()} may not edit DAG {table.pipeline!r} "
                            f"or trigger {run_dag!r}: ask someone with edit access to that DAG")
    try:
        req = actions.parse(action, table, form, stale_of(table) if action == "rerun-stale" else [])
    except ValueError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    if req.interval is not None and req.interval not in logged_intervals(table):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"{table.sink} has no interval {req.interval.token} in its "
                            "log: only an interval the table has can be rolled back or reprocessed")
    return req


def _plan(req: actions.Request, session: object = None) -> Plan:
    """The confirm step's checks and preview of ``req``, with the runs Airflow has on its table now (read in
    ``session``: the trigger's, which holds the DAG's row lock; see ``actions.trigger``)."""
    if req.action == "unpause":
        return Plan()
    checked = plan(req, airflow_runs.table_runs(req.table, actions.ROLLBACK_DAG, logged_intervals(req.table),
                                                session=session))
    return checked if checked.refusal else replace(checked, refusal=actions.dates_refusal(req, session))


def _act(user: GetUserDep, dag_id: str, sink: str, action: str, form: dict[str, str]) -> HTMLResponse:
    table = _table(user, dag_id, sink)
    req = _asked(user, table, action, form)
    if not actions.token_ok(form.get("token", ""), user.get_name(), req):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "the form's token is missing, wrong, expired or not for "
                            "this request: open the action from the table page and confirm it there")
    if form.get("confirm") != "yes":
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "not confirmed: tick the confirmation and submit again")
    if req.action == "unpause":
        airflow_runs.unpause(table.pipeline)
        return _html(page_actions.action_done_html(req, user.get_name(), []))
    try:
        run_ids = actions.trigger(req, user.get_name(), form["token"], actions.reason_of(form),
                                  check=lambda session: _plan(req, session).refusal)
    except actions.TokenUsedError as exc:
        raise HTTPException(status.HTTP_403_FORBIDDEN, str(exc)) from None
    except actions.RefusedError as exc:
        return HTMLResponse(page_actions.action_failed_html(req, f"Refused: {exc}"), status_code=409,
                            headers=PAGE_HEADERS)
    except Exception as exc:  # the DAG is not serialized, the DB is down: say what to do, log the details
        return failed_page(req, exc)
    return _html(page_actions.action_done_html(req, user.get_name(), run_ids))


def failed_page(req: actions.Request, exc: Exception) -> HTMLResponse:
    """409: the run(s) could not be created. The page says what to do; the exception itself (SQL, values)
    goes to the API server's log only, under an id the page gives. Same CSP as every page of the plugin."""
    ref = os.urandom(4).hex()
    log.error("action %s on %s/%s: no run created [error %s]", req.action, req.table.pipeline, req.table.sink, ref,
              exc_info=exc)
    dag = req.dag_to_trigger
    if "not found" in str(exc).lower() or type(exc).__name__ in ("DagNotFound", "SerializedDagNotFound"):
        advice = (f"Airflow has no DAG {dag!r}: it is not in the DAGs folder, or its file does not import yet (see "
                  "the import errors in Airflow's UI, Dags page). Once the DAG is listed, open the action again")
    else:
        advice = ("Airflow could not create the run. Open the action again from the table page; if this persists, "
                  "ask the Airflow administrator to look for this error id in the API server's log")
    return HTMLResponse(page_actions.action_failed_html(req, f"{advice} (error {ref})."), status_code=409,
                        headers=PAGE_HEADERS)


def _is_api(request: Request) -> bool:
    """Whether ``request`` is for a JSON route (``/eo/api/...``): its errors stay JSON."""
    path, root = request.scope.get("path", ""), request.scope.get("root_path", "")
    rel = path[len(root):] if root and path.startswith(root) else path
    return rel.startswith("/api/")


def error_response(request: Request, code: int, detail: object, headers: dict[str, str] | None = None) -> Response:
    """An error as ``{"detail": ...}`` for the JSON routes, as a page (same CSP as every page) for the others."""
    extra = dict(headers or {})
    if _is_api(request):
        return JSONResponse({"detail": detail}, status_code=code, headers={**NO_STORE, **extra})
    if isinstance(detail, list):  # a validation error: one line per bad parameter
        detail = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg', '')}" for e in detail)
    return HTMLResponse(pages.error_html(code, str(detail)), status_code=code, headers={**PAGE_HEADERS, **extra})


def unexpected(request: Request, exc: Exception) -> Response:
    """A bug or an outage (the metadata DB, the storage): a page that says what to do; the exception
    itself goes to the API server's log only, under the id the page gives."""
    ref = os.urandom(4).hex()
    log.error("%s %s failed [error %s]", request.method, request.url.path, ref, exc_info=exc)
    return error_response(request, status.HTTP_500_INTERNAL_SERVER_ERROR,
                          f"this page could not be made (error {ref}): reload it; if this persists, ask the "
                          "Airflow administrator to look for the error id in the API server's log")


class Contained:
    """Every route's unexpected error answered as :func:`unexpected`'s page, and not raised further. (An app-wide
    ``exception_handler(Exception)`` sends its page and then re-raises - Starlette's ServerErrorMiddleware -
    and mounted in Airflow's API server, whose middlewares stream the response, that cut the page: the
    browser got a dropped connection, no page, no advice.)"""

    def __init__(self, app: object) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: object, send: object) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def sending(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:  # noqa: BLE001 - the page says what to do; the log has the exception
            if started:  # the response is under way: nothing can be said any more
                raise
            await unexpected(Request(scope), exc)(scope, receive, send)


def create_app() -> FastAPI:
    """The app; authentication is a dependency of the app itself, so no route can forget it."""
    app = FastAPI(title="exactly-once", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(get_user)])
    app.add_middleware(Contained)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(request, exc.status_code, exc.detail, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def bad_parameters(request: Request, exc: RequestValidationError) -> Response:
        return error_response(request, status.HTTP_422_UNPROCESSABLE_ENTITY, jsonable_encoder(exc.errors()))

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse(f"{URL_PREFIX}/tables")

    @app.get("/tables", response_class=HTMLResponse)
    def tables(user: GetUserDep) -> HTMLResponse:
        every = known_tables()
        allowed = {p: can_read_dag(user, p) for p in {t.pipeline for t in every}}
        mine = [t for t in every if allowed[t.pipeline]]
        return _html(pages.index_page([table_status(t) for t in mine], len(every) - len(mine)))

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def dag_tables(dag_id: str, user: GetUserDep) -> HTMLResponse:
        authorize_dag(user, dag_id)
        mine = tables_of(dag_id)
        return _html(pages.index_page([table_status(t) for t in mine], 0) if mine else pages.no_group_html(dag_id))

    @app.get("/dags/{dag_id}/tables/{sink}", response_class=HTMLResponse)
    def table(dag_id: str, sink: str, user: GetUserDep, state: str | None = None, since: str | None = None,
              until: str | None = None, limit: int | None = Query(None, ge=1, le=500)) -> HTMLResponse:
        found = _table(user, dag_id, sink)
        may = can_act(user, dag_id, dag_id)
        page = with_airflow(table_page(found, _filters(state, since, until, limit)))
        token = actions.form_token(user.get_name(), actions.Request("unpause", found)) if may and page.paused else ""
        return _html(page_table.table_html(page, can_act=may, unpause_token=token))

    @app.get("/api/dags/{dag_id}/tables/{sink}")
    def table_json(dag_id: str, sink: str, user: GetUserDep, state: str | None = None, since: str | None = None,
                   until: str | None = None, limit: int | None = Query(None, ge=1, le=500)) -> JSONResponse:
        found = _table(user, dag_id, sink)
        return JSONResponse(page_json(table_page(found, _filters(state, since, until, limit))), headers=NO_STORE)

    @app.get("/dags/{dag_id}/tables/{sink}/versions/{version}", response_class=HTMLResponse)
    def version(dag_id: str, sink: str, version: str, user: GetUserDep) -> HTMLResponse:
        report = version_page(_table(user, dag_id, sink), version)
        if report is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no version {version!r} of {sink!r}: the table page "
                                "lists every version of every interval")
        e = report.epoch
        known = airflow_runs.known_runs(e.run_dag or dag_id, [e.run_id]) if e.run_id else set()
        return _html(pages.version_html(report, known))

    @app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse)
    def run(dag_id: str, run_id: str, user: GetUserDep) -> HTMLResponse:
        authorize_dag(user, dag_id)
        mine = tables_of(dag_id)
        return _html(pages.run_html(run_page(dag_id, run_id, mine)) if mine else pages.no_group_html(dag_id))

    @app.get("/dags/{dag_id}/tables/{sink}/actions/{action}", response_class=HTMLResponse)
    def confirm(dag_id: str, sink: str, action: str, request: Request, user: GetUserDep) -> HTMLResponse:
        table = _table(user, dag_id, sink)
        req = _asked(user, table, action, dict(request.query_params))
        if req.action == "unpause":
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "unpause is a button of the table page: open the table "
                                "page and use it there")
        checked = _plan(req)
        page = page_actions.confirm_html(req, actions.form_token(user.get_name(), req), checked)
        return HTMLResponse(page, status_code=409 if checked.refusal else 200, headers=PAGE_HEADERS)

    @app.post("/dags/{dag_id}/tables/{sink}/actions/{action}", response_class=HTMLResponse)
    async def act(dag_id: str, sink: str, action: str, request: Request, user: GetUserDep) -> HTMLResponse:
        if not actions.same_origin(request.headers, request.url.scheme):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-site request refused: actions are posted from "
                                f"the table page of this server, {actions.own_origin(request.headers, request.url.scheme)}"
                                " - open Airflow's UI at that address and start the action again")
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
        return await run_in_threadpool(_act, user, dag_id, sink, action, form)

    @app.get("/data-docs", response_class=HTMLResponse)
    def data_docs(user: GetUserDep, table: str = "", page: int = Query(1, ge=1, le=100_000)) -> HTMLResponse:
        every = known_tables()
        allowed = {p: can_read_dag(user, p) for p in {t.pipeline for t in every}}
        mine = [t for t in every if allowed[t.pipeline]]
        return _html(docsindex.docs_html(docsindex.docs_page(mine, page, table), mine))

    @app.get("/reports/{path:path}")
    def report_file(path: str, user: GetUserDep) -> Response:
        authorize_dag(user, dag_of_report(path))
        parts = path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "runs":  # a DAG's run summaries: its tables list every run
            return RedirectResponse(f"{URL_PREFIX}/dags/{quote(parts[1], safe='')}")
        try:
            root = reports_root()
            found = read_url_under(root, path, storage_options(settings.storage_conn_id())) \
                if "://" in root else read_under(root, path)
        except (FileNotFoundError, UnsafeIdentifierError, NotADirectoryError, IsADirectoryError):
            raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found") from None
        if found.directory:
            return RedirectResponse(f"{path.rstrip('/').rsplit('/', 1)[-1]}/")  # relative: keeps the mount prefix
        content = offline_html(found.content) if found.media_type == "text/html" else found.content
        return Response(content, media_type=found.media_type,
                        headers={**NO_STORE, **SAME_ORIGIN_FRAMES, "Content-Security-Policy": CSP})

    @app.api_route("/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
                   include_in_schema=False)
    def not_found(rest: str) -> Response:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found")  # only after authentication

    if "://" not in reports_root():
        os.makedirs(reports_root(), exist_ok=True)
    return app
