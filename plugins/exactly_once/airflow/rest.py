"""Runs of a pipeline's DAG started through Airflow's REST API - what ``eo reprocess`` and ``eo rerun-stale``
use, in the user's own deployment (nothing but the installed package and the API server's URL and a login).

A run for a data interval is created with ``POST /api/v2/dags/<dag>/dagRuns`` giving that interval as its
``data_interval_start``/``_end`` and a ``logical_date`` *inside* it (:mod:`.run_dates`): Airflow keeps one run
per (DAG, logical date), so the interval's start - the scheduled run's logical date - answers 409 once the
interval ran; and within the dates of the tasks the group needs (``GET .../tasks``), as Airflow creates no task
for a run dated outside them. ``run_after`` orders several runs (a stateful DAG runs them one at a time, in
that order). The API checks that the login may trigger the DAG; the run's ``begin`` task then checks that
the same user may edit it (a reprocess replaces a committed version: ``operators.may_reprocess``).

The login: ``EO_AIRFLOW_TOKEN`` (a JWT, e.g. from ``POST /auth/token``), else user and password
(``--user`` / ``EO_AIRFLOW_USER``, ``EO_AIRFLOW_PASSWORD`` or a prompt) exchanged at ``/auth/token``;
the password and the token are never printed. The URL: ``--api-url``, ``EO_AIRFLOW_URL``, Airflow's
``[api] base_url``, else ``http://localhost:8080``; it is printed without its user-info (a proxy's
``user:password@``: :func:`shown`).
"""
from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import AirflowApiError
from ..ids import Interval
from ..storage import redact
from .run_dates import RunDates, logical_date_inside

log = logging.getLogger(__name__)
TIMEOUT = 60.0


def api_url(explicit: str | None = None) -> str:
    """Where Airflow's API server is: ``explicit``, ``EO_AIRFLOW_URL``, ``[api] base_url``, or localhost:8080."""
    url = explicit or os.environ.get("EO_AIRFLOW_URL")
    if not url:
        try:
            from airflow.configuration import conf

            url = conf.get("api", "base_url", fallback="") or ""
        except Exception:  # noqa: BLE001 - no Airflow configuration here: the default
            url = ""
    return (url or "http://localhost:8080").rstrip("/")


def shown(url: str) -> str:
    """``url`` as it may be printed: its user-info (``user:password@``) replaced by ``***@``."""
    return redact(url)


def _scrub(text: str, url: str) -> str:
    """``text`` (an error's message) with ``url``'s password, as given or decoded, and the URL itself hidden."""
    text = text.replace(url, shown(url))
    secret = urlsplit(url).password
    for s in {secret, unquote(secret)} if secret else ():
        text = text.replace(s, "***")
    return text


@dataclass
class Api:
    """A logged-in client of Airflow's REST API v2 (``url``: the API server's base URL, maybe with a
    password: never printed - :func:`shown`)."""

    url: str = field(repr=False)
    token: str = field(repr=False)

    @classmethod
    def login(cls, url: str, user: str | None = None, password: str | None = None) -> "Api":
        """``EO_AIRFLOW_TOKEN`` if set, else a token for ``user``/``password`` from ``/auth/token``."""
        token = os.environ.get("EO_AIRFLOW_TOKEN")
        if token:
            return cls(url, token)
        user = user or os.environ.get("EO_AIRFLOW_USER")
        password = password if password is not None else os.environ.get("EO_AIRFLOW_PASSWORD")
        if not user:
            raise AirflowApiError("no Airflow login: give --user (or EO_AIRFLOW_USER) and EO_AIRFLOW_PASSWORD, or "
                                  "EO_AIRFLOW_TOKEN (a token of the API server's /auth/token)")
        if password is None:
            import getpass

            password = getpass.getpass(f"Airflow password of {user} at {shown(url)}: ")
        got = _call("POST", f"{url}/auth/token", json={"username": user, "password": password})
        if got.status_code not in (200, 201):
            raise AirflowApiError(f"{shown(url)}/auth/token refused the login of {user!r} ({got.status_code}): check the "
                                  "user and password (the API server's auth manager has them)")
        return cls(url, got.json()["access_token"])

    def trigger(self, dag_id: str, interval: Interval, conf: dict[str, Any], *, action: str, order: int = 0,
                note: str | None = None, dates: RunDates | None = None) -> dict[str, Any]:
        """Create a run of ``dag_id`` for ``interval`` with ``conf`` (QUEUED: the scheduler runs it); returns
        the run as the API shows it. ``order``: runs of one request start in this order."""
        run_id = f"manual__eo_{action}_{interval.token}_{secrets.token_hex(4)}"
        dates = dates or self.dag_dates(dag_id)
        logical = logical_date_inside(interval, dates)
        body = {"dag_run_id": run_id, "logical_date": logical.isoformat(),
                "data_interval_start": interval.start.isoformat(), "data_interval_end": interval.end.isoformat(),
                "run_after": (datetime.now(timezone.utc) + timedelta(microseconds=order)).isoformat(),
                "conf": conf, **({"note": note} if note else {})}
        got = _call("POST", f"{self.url}/api/v2/dags/{dag_id}/dagRuns", json=body,
                    headers={"Authorization": f"Bearer {self.token}"})
        if got.status_code in (200, 201):
            return got.json()
        raise AirflowApiError(_refusal(got, dag_id, self.url))

    def dag_dates(self, dag_id: str) -> RunDates:
        """The dates a run of the DAG must lie between to get its exactly-once tasks (:class:`RunDates`, from
        ``GET /api/v2/dags/<dag>/tasks``: every task with its dates, in one answer; no outlets, so every
        exactly-once group of the DAG counts)."""
        got = _call("GET", f"{self.url}/api/v2/dags/{dag_id}/tasks", headers={"Authorization": f"Bearer {self.token}"})
        if got.status_code != 200:
            raise AirflowApiError(_refusal(got, dag_id, self.url, "read the tasks of"))
        return RunDates.of_api(got.json().get("tasks") or [])

    def pending_runs(self, table: Any) -> list[Any]:
        """The queued and running runs of ``table``'s DAG that act on it (``runs.from_api``: the table page's
        rule), read with the login (``GET /api/v2/dags/<dag>/dagRuns``)."""
        from .runs import PENDING, from_api

        found: list[Any] = []
        offset = 0
        while True:
            got = _call("GET", f"{self.url}/api/v2/dags/{table.pipeline}/dagRuns",
                        params=[*(("state", s) for s in PENDING), ("limit", 100), ("offset", offset),
                                ("order_by", "id")], headers={"Authorization": f"Bearer {self.token}"})
            if got.status_code != 200:
                raise AirflowApiError(_refusal(got, table.pipeline, self.url, "list the runs of"))
            page = got.json()
            rows = page.get("dag_runs") or []
            found += [r for r in (from_api(table, row) for row in rows) if r is not None]
            offset += len(rows)
            if not rows or offset >= int(page.get("total_entries") or 0):
                return found

    def run_url(self, dag_id: str, run_id: str) -> str:
        """The run's page in Airflow's UI."""
        return f"{shown(self.url)}/dags/{dag_id}/runs/{run_id}"


def _call(method: str, url: str, **kwargs: Any) -> Any:
    import httpx

    try:
        return httpx.request(method, url, timeout=TIMEOUT, **kwargs)
    except httpx.HTTPError as exc:
        base = url.split('/api/')[0].split('/auth/')[0]
        raise AirflowApiError(f"cannot reach Airflow's API server at {shown(base)} ({type(exc).__name__}: "
                              f"{_scrub(str(exc), base)}): give its URL with --api-url or EO_AIRFLOW_URL") from None


def _refusal(got: Any, dag_id: str, url: str, doing: str = "start a run of") -> str:
    try:
        detail = got.json().get("detail")
    except ValueError:
        detail = got.text[:300]
    why = {401: "the login is not valid (expired token?): log in again",
           403: f"this user may not {'trigger runs of' if doing.startswith('start') else doing} {dag_id} "
                f"({'a reprocess needs edit access to' if doing.startswith('start') else 'it needs read access to'} "
                "the DAG)",
           404: f"the deployment at {shown(url)} has no DAG {dag_id}: deploy the DAG file that declares the table, or "
                "give --api-url of the Airflow that runs it",
           409: "a run with this id or logical date exists already: run the command again"}.get(got.status_code, "")
    return f"Airflow refused to {doing} {dag_id} ({got.status_code}: {detail}){': ' + why if why else ''}"
