"""The table page's actions: each one is a run of the pipeline's own DAG, triggered by the logged-in user
after a confirmation, and carried out through the protocol by that run - so they need nothing but the
installed package (no extra DAG file) and the user's own DAGs.

=============  ======================================================================================
action         the run of the pipeline's DAG it triggers (data interval; ``conf``)
=============  ======================================================================================
rollback       the interval: ``eo_action=rollback``, ``to_version``, ``sinks``
reprocess      the interval: ``reprocess``, ``sinks`` (+ ``allow_shrinking``)
rerun-stale    one run per stale interval, queued oldest first: ``reprocess``, ``sinks``
recover        the table's newest interval: ``eo_action=recover``, ``sinks`` (``eo recover`` of the whole table)
unpause        no run: unpauses the pipeline's DAG, so that its queued runs start
=============  ======================================================================================

Every run also carries ``eo_reason``: what the user typed at the confirm step (at most
:data:`REASON_CHARS` characters), which the epoch's provenance records and ``eo history`` shows.

``sinks`` is ``[<the table's sink>]``: in a DAG with several exactly-once groups only that table's group
runs (and reprocesses, rolls back or recovers); the others are skipped (``operators.sinks_asked``). A
rollback or recover is carried out by the group's ``begin`` task, which skips the rest of the group
(``rollback.carry_out``).

The stale intervals' runs are queued with increasing ``run_after``; Airflow starts queued runs in that
order and a stateful pipeline's DAG runs one at a time (``max_active_runs=1``), so they run in interval
order. The table page shows what is still stale once they are done.

Contract of the web flow (``webapp``): a GET shows what will be done and a form; only a POST with the
form's token (an HMAC of user, table, action and its parameters, issue time and a nonce, under the API
server's secret; valid 10 minutes, once: the run ids carry the nonce) and a same-origin
``Origin`` (or ``Referer``) triggers anything; the runs are created under a row lock of the pipeline's
DAG after the confirm step's checks pass again (``confirm.plan``: nothing pending on the interval), so
two confirmations at once cannot both start work on one interval (PostgreSQL, MySQL). Both need the user to be allowed to edit the pipeline's
DAG (``is_authorized_dag(PUT)``) and to trigger the DAG that runs the action. The run records who
asked: Airflow's ``triggering_user_name`` is the logged-in user, and the conf says what was asked.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from ..errors import ConfigError
from ..ids import Interval
from ..text import REASON_CHARS, one_line
from .run_dates import RunDates, backfill_date, first_refusal, logical_date_inside, no_date_advice
from .tables import TableRef

log = logging.getLogger(__name__)
ROLLBACK_DAG = "eo_rollback"
ACTIONS = {"rollback": "Roll back an interval", "reprocess": "Reprocess an interval",
           "rerun-stale": "Re-run the stale intervals", "recover": "Recover now", "unpause": "Unpause the DAG"}
_KEY: list[bytes] = []


@dataclass(frozen=True)
class Request:
    """One asked action, checked for shape (not yet for permission)."""

    action: str
    table: TableRef
    interval: Interval | None = None
    to_version: str = ""
    allow_shrinking: bool = False
    stale: tuple[str, ...] = field(default_factory=tuple)

    @property
    def dag_to_trigger(self) -> str:
        """Every action is a run of the table's own DAG (``ROLLBACK_DAG`` is a checkout's DAG for ``eo_rollback``
        runs triggered by hand, no longer what the page triggers)."""
        return self.table.pipeline

    def describe(self) -> str:
        t = self.table
        if self.action == "rollback":
            return f"Make version {self.to_version} of {t.sink}'s interval {_when(self.interval)} live again " \
                   f"(a new epoch; later intervals that read the replaced state become stale)"
        if self.action == "reprocess":
            shrink = ". It may read fewer input files than the live version did" if self.allow_shrinking else ""
            return f"Recompute {t.sink}'s interval {_when(self.interval)} from its input files as they are now " \
                   f"(a run of {t.pipeline} with reprocess){shrink}"  # the page ends the sentence
        if self.action == "rerun-stale":
            days = ", ".join(_when(Interval.from_token(s)) for s in self.stale)
            return f"Re-run the stale intervals of {t.sink} in order, one run of {t.pipeline} each: {days}"
        if self.action == "unpause":
            return f"Unpause DAG {t.pipeline}: its queued runs (actions of the table page among them) start"
        return f"Bring every transaction of {t.sink} to a final state now (what `eo recover` does)"


def _when(iv: Interval | None) -> str:
    return f"{iv.start:%Y-%m-%d %H:%M} - {iv.end:%Y-%m-%d %H:%M} UTC" if iv else "-"


def parse(action: str, table: TableRef, form: dict[str, str], stale: list[str]) -> Request:
    """The request, from the action's name and the form's fields; ValueError says what is wrong."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
    interval = None
    if action in ("rollback", "reprocess"):
        try:
            interval = Interval.from_token(form.get("interval", ""))
        except (ValueError, TypeError):
            raise ValueError(f"no interval {form.get('interval')!r}: open the action from the table page") from None
    to = form.get("to", "").strip()
    if action == "rollback" and not re.fullmatch(r"e[0-9]{1,9}", to):  # ASCII digits only: "²".isdigit() is True
        raise ValueError(f"not a version: {to!r} (give e.g. e2)")
    if action == "rerun-stale" and not stale:
        raise ValueError(f"{table.sink} has no stale interval: nothing to re-run")
    return Request(action, table, interval, to, form.get("allow_shrinking") in ("1", "on", "true"), tuple(stale))


def reason_of(form: dict[str, str]) -> str:
    """The reason typed at the confirm step: one line, printable, at most :data:`REASON_CHARS` characters
    (``text.one_line``: the rule wherever a reason is recorded or printed)."""
    return one_line(form.get("reason", ""), REASON_CHARS)


# ------------------------------------------------------------------------------------------- the token
def _key() -> bytes:
    if not _KEY:
        from airflow.configuration import conf

        secret = conf.get("api_auth", "jwt_secret", fallback="") or conf.get("api", "secret_key", fallback="")
        _KEY.append(secret.encode() if secret else os.urandom(32))
    return _KEY[0]


TOKEN_TTL = 600  # seconds a confirmation form stays valid
_TOKEN = re.compile(r"[0-9a-f]{8}([0-9a-f]{16})[0-9a-f]{64}")  # issue time, nonce, MAC (all hex)


def _mac(user: str, req: Request, head: str) -> str:
    """The MAC of what was confirmed: user, table, action and its parameters, issue time and nonce."""
    t = req.table
    parts = ("eo-table-action-form-v2", user, t.pipeline, t.sink, req.action,
             req.interval.token if req.interval else "", req.to_version, "1" if req.allow_shrinking else "",
             ",".join(req.stale), head)
    return hmac.new(_key(), "\x1f".join(parts).encode(), hashlib.sha256).hexdigest()


def form_token(user: str, req: Request, now: float | None = None) -> str:
    """The token a confirmation form carries: bound to the user, the table, the action and its
    parameters (interval, version, allow_shrinking, stale intervals), with its issue time and a nonce.
    It expires after :data:`TOKEN_TTL` and is used up by the run(s) it triggers (see :func:`token_id`)."""
    head = f"{int(now if now is not None else time.time()) & 0xFFFFFFFF:08x}{os.urandom(8).hex()}"
    return head + _mac(user, req, head)


def token_ok(token: str, user: str, req: Request, now: float | None = None) -> bool:
    """Whether ``token`` was issued for exactly ``req`` to ``user`` less than :data:`TOKEN_TTL` ago.
    (Whether it was used already is the trigger's check: its run ids carry the token's nonce.)"""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):  # hex only: compare_digest needs ASCII
        return False
    age = int(now if now is not None else time.time()) - int(token[:8], 16)
    if not 0 <= age <= TOKEN_TTL:
        return False
    return hmac.compare_digest(token[24:], _mac(user, req, token[:24]))


def token_id(token: str) -> str:
    """The token's nonce: the run ids of the runs it triggers carry it, so a token triggers once."""
    return token[8:24]


class TokenUsedError(ValueError):
    """The form's token triggered its run(s) already."""


LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def own_origin(headers: Any, scheme: str) -> str:
    """This server's origin: ``[api] base_url``'s when that is set (the request's ``Host`` is not trusted
    then), else this request's host."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    if base:
        b = urlsplit(base)
        return f"{b.scheme}://{b.netloc}"
    return f"{scheme}://{headers.get('host', '')}"


def _loopback(origin: str) -> tuple[str, str] | None:
    """(scheme, port) of an origin on a loopback name (127.0.0.1, localhost, [::1]), else None."""
    from urllib.parse import urlsplit

    got = urlsplit(origin)
    host = (got.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    return (got.scheme, str(got.port or "")) if host in LOOPBACK else None


def same_origin(headers: Any, scheme: str) -> bool:
    """Whether a POST comes from a page of this server: its ``Origin`` (else ``Referer``) is :func:`own_origin`.
    On a loopback address, its other loopback names count as the same server (``localhost`` and
    ``127.0.0.1`` with the same scheme and port: no other site can be served from them)."""
    from urllib.parse import urlsplit

    source = headers.get("origin") or headers.get("referer") or ""
    if not source or source == "null":
        return False
    got = urlsplit(source)
    sent, mine = f"{got.scheme}://{got.netloc}", own_origin(headers, scheme)
    return sent == mine or (_loopback(mine) is not None and _loopback(sent) == _loopback(mine))


# ------------------------------------------------------------------------------------------- the runs
class RefusedError(ValueError):
    """The confirm step's checks refuse the action now (something changed since the confirm page)."""


def trigger(req: Request, user: str, token: str, reason: str = "",
            check: Callable[[Any], str] | None = None) -> list[str]:
    """Create the DAG run(s) of ``req`` as ``user`` (QUEUED; the scheduler runs them). Returns the run ids.
    Under a row lock of the pipeline's DAG, ``check(session)`` (the confirm step's checks; a refusal, or "")
    runs first: :class:`RefusedError` if it refuses (:class:`TokenUsedError` instead when a run of this token
    exists by then). It must read the metadata DB through ``session``, the
    transaction that holds the lock (Airflow's ``create_session()`` is this thread's same scoped session:
    opening one would commit it and release the lock before the runs are created). The run ids carry the
    token's nonce: :class:`TokenUsedError` if a run of it exists already (or the metadata DB's unique run id
    refuses a concurrent second use)."""
    from airflow.utils.session import create_session
    from sqlalchemy.exc import IntegrityError

    t = req.table
    asked = {"requested_by": user, "eo_action": req.action, "sinks": [t.sink],  # only this table's group runs
             **({"eo_reason": reason} if reason else {})}
    nonce = token_id(token)
    try:
        with create_session() as session:
            _lock(session, t.pipeline)
            refusal = check(session) if check is not None else ""
            # after the check: where the lock is not real (SQLite ignores FOR UPDATE), a double click's first
            # run may appear between the two, and its pending run is the check's refusal - the token says why
            _unused(session, req.dag_to_trigger, f"manual__eo_{req.action}_{nonce}_0")
            if refusal:
                raise RefusedError(refusal)
            dag = _dag(session, t.pipeline)
            dates = RunDates.of_dag(dag, f"{t.pipeline}/{t.sink}")
            ivs = run_intervals(req, dates.latest)
            if req.action == "rollback":
                return [_create(session, dag, dates, user, {"to_version": req.to_version, **asked}, ivs[0],
                                nonce=nonce)]
            if req.action == "recover":
                return [_create(session, dag, dates, user, asked, ivs[0], nonce=nonce)]
            mine = {"reprocess": True}
            if req.action == "reprocess":
                return [_create(session, dag, dates, user, {**mine, "allow_shrinking": req.allow_shrinking, **asked},
                                ivs[0], nonce=nonce)]
            return [_create(session, dag, dates, user, {**mine, **asked}, iv, order=i, nonce=nonce)
                    for i, iv in enumerate(ivs)]
    except IntegrityError:  # a concurrent use of the same confirmation (a double click) made its run first
        raise TokenUsedError("this confirmation was used already (a double click sends it twice; the first one "
                             "triggered the run): its state is on the table page") from None


def _lock(session: Any, dag_id: str) -> None:
    """Hold the pipeline DAG's row until the session ends: actions on its tables are decided one at a time."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    session.execute(select(DagModel.dag_id).where(DagModel.dag_id == dag_id).with_for_update()).all()


def run_intervals(req: Request, end_date: datetime | None) -> list[Interval]:
    """The data intervals of the runs ``req`` creates, in their order (recover: :func:`carrier_interval`)."""
    if req.action == "recover":
        return [carrier_interval(req.table, end_date)]
    if req.action in ("rollback", "reprocess") and req.interval is not None:
        return [req.interval]
    return [Interval.from_token(s) for s in req.stale]


def dates_refusal(req: Request, session: Any = None) -> str:
    """The confirm step's check that each run of ``req`` can be dated where its DAG creates the tasks the
    table's group needs (:class:`RunDates`): why not, with the way out, or "" (also when the DAG or the table's
    log cannot be read here: creating the run says why)."""
    from airflow.utils.session import create_session

    if session is None:
        with create_session() as own:
            return dates_refusal(req, own)
    t = req.table
    try:
        dag = _dag(session, t.pipeline)
        dates = RunDates.of_dag(dag, f"{t.pipeline}/{t.sink}")
        intervals = run_intervals(req, dates.latest)
    except Exception:  # noqa: BLE001 - not serialized yet, no interval logged: the trigger's own page says what to do
        return ""
    return first_refusal(dates, intervals, t.pipeline, lambda: no_date_advice(
        req.action, t.pipeline, t.sink, t.describe(), intervals, req.to_version, req.allow_shrinking,
        lambda iv: backfill_date(dag, iv)))


def carrier_interval(table: TableRef, end_date: datetime | None = None) -> Interval:
    """The data interval of the run that carries out a recover of the whole table: its log's newest that
    starts by the DAG's ``end_date`` (a run dated after it gets no task), else the newest."""
    every = table.handle().log.intervals()
    if not every:
        raise ValueError(f"{table.sink}'s log has no interval: nothing to recover")
    return max([iv for iv in every if end_date is None or iv.start <= end_date] or every)


def _unused(session: Any, dag_id: str, run_id: str) -> None:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    used = session.scalar(select(DagRun.run_id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if used:
        raise TokenUsedError(f"this confirmation was used already (run {used}): open the action from the table "
                             "page again to do it once more")


def _dag(session: Any, dag_id: str) -> Any:
    from airflow.api_fastapi.common.dagbag import create_dag_bag, get_latest_version_of_dag

    return get_latest_version_of_dag(create_dag_bag(), dag_id, session)


def _create(session: Any, dag: Any, dates: RunDates, user: str, conf: dict[str, Any],
            interval: Interval | None = None, order: int = 0, nonce: str = "") -> str:
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    run_after = datetime.now(timezone.utc) + timedelta(microseconds=order)  # the runs start in this order
    logical, data_interval = None, None
    dag_id = dag.dag_id
    if interval is not None:  # a logical date no other run of the DAG has, that the DAG creates its tasks for
        try:
            logical = logical_date_inside(interval, dates)
        except ConfigError as exc:
            raise RefusedError(f"{dag_id}: {exc}") from None
        data_interval = (interval.start, interval.end)
    run_id = f"manual__eo_{conf['eo_action']}_{nonce}_{order}"  # unique: the token triggers once
    run = dag.create_dagrun(run_id=run_id, logical_date=logical,
                            data_interval=data_interval, run_after=run_after, conf=conf,
                            run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.UI,
                            triggering_user_name=user, state=DagRunState.QUEUED, session=session)
    session.flush()
    log.info("%s asked %s of %s %s: run %s of %s", user, conf["eo_action"], ",".join(conf.get("sinks") or []),
             interval, run.run_id, dag_id)
    return run.run_id
