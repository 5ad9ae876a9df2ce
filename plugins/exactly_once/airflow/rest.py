"""Runs of a pipeline's DAG started through Airflow's REST API - what ``eo reprocess`` and ``eo rerun-stale``
use, in the user's own deployment (nothing but the installed package and the API server's URL and a login).

A run for a data interval is created with ``POST /api/v2/dags/<dag>/dagRuns`` giving that interval as its
``data_interval_start``/``_end`` and a ``logical_date`` *inside* it (:func:`logical_date_inside`): Airflow
keeps one run per (DAG, logical date), so the interval's start - the scheduled run's logical date - answers
409 once the interval ran; within the DAG's ``start_date``/``end_date`` (``GET .../details``), as Airflow
creates no task for a run dated outside them. ``run_after`` orders several runs (a stateful DAG runs them one at a time, in
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
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable
from urllib.parse import unquote, urlsplit

from ..errors import AirflowApiError, ConfigError
from ..ids import Interval
from ..storage import redact

log = logging.getLogger(__name__)
TIMEOUT = 60.0
_MINUTE = timedelta(minutes=1)


def logical_date_inside(interval: Interval, earliest: datetime | None = None, latest: datetime | None = None,
                        dag_id: str = "<dag>") -> datetime:
    """A logical date for a run of ``interval`` that no other run of the DAG has (one run per logical date),
    between ``earliest`` and ``latest`` (:func:`date_bounds`: the DAG's and its tasks' ``start_date`` and
    ``end_date``): Airflow creates no task for a manual run dated outside a task's, and a run without its
    tasks ends at once having done nothing.

    Inside the interval where the dates allow: the start plus 1 microsecond and a time-derived offset, never
    the start itself (the scheduled run's). The last interval of a DAG whose ``end_date`` is that interval's
    start (the date of its last scheduled run) has no such date; its run is dated in the minute before the
    start, never on a whole second (a scheduled run's date). :class:`ConfigError` when the dates leave
    neither (an interval after the DAG's ``end_date``): its advice names ``dag_id``."""
    us = timedelta(microseconds=1)
    earliest, latest = (utc(d) if d is not None else None for d in (earliest, latest))
    for lo, hi in ((interval.start + us, interval.end - us), (interval.start - _MINUTE + us, interval.start - us)):
        lo, hi = max(lo, earliest or lo), min(hi, latest or hi)
        if lo <= hi:
            at = lo + us * (time.time_ns() // 1000 % ((hi - lo) // us + 1))
            if hi < interval.start and at.microsecond == 0 and at < hi:
                at += us  # before the start: never on a whole second, a scheduled run's date
            return at
    if earliest is not None and earliest > interval.start:
        fix = f"set the start_date to {interval.start.isoformat()} or earlier"
    else:  # an end inside the interval dates the run and schedules no later interval
        fix = f"set the end_date to a time inside the interval, e.g. {(interval.start + _MINUTE).isoformat()}"
    start = interval.start.isoformat()
    raise ConfigError(f"Airflow creates a DAG's tasks only for runs dated from its start_date to its end_date "
                      f"({earliest} .. {latest}, the DAG's and its tasks'): no date is left for a run of "
                      f"{interval.label}, which would do nothing. To run it, {fix} (the DAG's, or its tasks' if "
                      "set through default_args), then run this again; or reprocess it as a backfill, whose runs "
                      f"get every task whatever the dates: `airflow backfill create --dag-id {dag_id} --from-date "
                      f"{start} --to-date {start} --reprocess-behavior completed --dag-run-conf "
                      "'{\"reprocess\": true}'` (Airflow 3.2+)")


def date_bounds(dates: Iterable[tuple[datetime | None, datetime | None]]) -> tuple[datetime | None, datetime | None]:
    """The dates a manual run must lie between for Airflow to create every task (its ``task_filter``): the
    latest of the ``(start_date, end_date)`` pairs' starts and the earliest of their ends - the DAG's and each
    task's (``default_args={"end_date": ...}`` sets the tasks' end, not the DAG's)."""
    pairs = list(dates)
    starts = [utc(a) for a, _ in pairs if a is not None]
    ends = [utc(b) for _, b in pairs if b is not None]
    return max(starts, default=None), min(ends, default=None)


def utc(d: datetime) -> datetime:
    """``d`` as a plain UTC datetime (a serialized DAG's dates are pendulum's, whose arithmetic differs)."""
    u = d.astimezone(timezone.utc)
    return datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, tzinfo=timezone.utc)


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
                note: str | None = None) -> dict[str, Any]:
        """Create a run of ``dag_id`` for ``interval`` with ``conf`` (QUEUED: the scheduler runs it); returns
        the run as the API shows it. ``order``: runs of one request start in this order."""
        run_id = f"manual__eo_{action}_{interval.token}_{secrets.token_hex(4)}"
        logical = logical_date_inside(interval, *self.dag_dates(dag_id), dag_id=dag_id)
        body = {"dag_run_id": run_id, "logical_date": logical.isoformat(),
                "data_interval_start": interval.start.isoformat(), "data_interval_end": interval.end.isoformat(),
                "run_after": (datetime.now(timezone.utc) + timedelta(microseconds=order)).isoformat(),
                "conf": conf, **({"note": note} if note else {})}
        got = _call("POST", f"{self.url}/api/v2/dags/{dag_id}/dagRuns", json=body,
                    headers={"Authorization": f"Bearer {self.token}"})
        if got.status_code in (200, 201):
            return got.json()
        raise AirflowApiError(_refusal(got, dag_id, self.url))

    def dag_dates(self, dag_id: str) -> tuple[datetime | None, datetime | None]:
        """The dates a run of the DAG must lie between (:func:`date_bounds` of the DAG's ``start_date`` and
        ``end_date`` and its tasks': ``GET /api/v2/dags/<dag>/details`` and ``.../tasks``)."""
        pairs = []
        for path, rows in ((f"{dag_id}/details", lambda j: [j]), (f"{dag_id}/tasks", lambda j: j.get("tasks") or [])):
            got = _call("GET", f"{self.url}/api/v2/dags/{path}", headers={"Authorization": f"Bearer {self.token}"})
            if got.status_code != 200:
                raise AirflowApiError(_refusal(got, dag_id, self.url, "read the dates of"))
            pairs += [tuple(datetime.fromisoformat(r[k].replace("Z", "+00:00")) if r.get(k) else None
                            for k in ("start_date", "end_date")) for r in rows(got.json())]
        return date_bounds(pairs)  # type: ignore[arg-type]

    def check_dates(self, dag_id: str, intervals: Iterable[Interval]) -> None:
        """:class:`ConfigError` if a run of one of ``intervals`` could be dated nowhere the DAG gets its tasks
        (:func:`logical_date_inside`): checked for all before any run starts, so none or all start."""
        bounds = self.dag_dates(dag_id)
        for interval in intervals:
            logical_date_inside(interval, *bounds, dag_id=dag_id)

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
           403: f"this user may not {'trigger runs of' if doing.startswith('start') else doing} {dag_id} (a "
                "reprocess needs edit access to the DAG)",
           404: f"the deployment at {shown(url)} has no DAG {dag_id}: deploy the DAG file that declares the table, or "
                "give --api-url of the Airflow that runs it",
           409: "a run with this id or logical date exists already: run the command again"}.get(got.status_code, "")
    return f"Airflow refused to {doing} {dag_id} ({got.status_code}: {detail}){': ' + why if why else ''}"
