"""The Airflow DAG runs that act on a table, as its page shows them (read from Airflow's metadata DB).

A run acts on table ``T`` (of pipeline DAG ``P``) when it is

* a run of ``P`` with a data interval (scheduled, backfill, manual, and the table page's actions: a
  reprocess, re-run, rollback) whose ``conf.sinks``, if any, names ``T``'s sink; it acts on the interval of
  its data interval - a range run (``conf.eo_batch``) on every interval from there to its ``end`` - except a
  recover (``conf.eo_action``), which acts on the whole table;
* a run of a checkout's ``eo_rollback`` DAG (triggered by hand) whose ``conf.table_url`` is ``T``'s URL: a
  rollback acts on the interval starting at ``conf.interval_start``, a recover on the whole table.

Each run's state is Airflow's (queued, running, success, failed), except that a failed run which began no
transaction of the table is *refused* (a check refused it before anything was written: a user who may not
edit, a shrinking reprocess, a rollback to a version that cannot be rolled back to); its reason is the
run's note (the tasks' ``eo_note``, see ``notes``). A run is *pending* while queued or running: the
confirm step refuses a second action on an interval with a pending run (:func:`pending`).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

from ..ids import Interval
from .tables import TableRef

log = logging.getLogger(__name__)
PENDING = ("queued", "running")
MAX_RUNS = 5000  # the newest runs read per DAG (a year of daily runs with retries and actions)


@dataclass(frozen=True)
class RunState:
    """One DAG run that acts on a table (see the module)."""

    dag_id: str
    run_id: str
    state: str                    # queued | running | success | failed | refused
    what: str                     # "scheduled", "backfill", "reprocess", "rollback to e1", "recover", ...
    by: str | None
    reason: str                   # what the person who asked typed at the confirm step
    note: str                     # the run's note: what it did, or why it failed / was refused
    start: datetime | None        # the start of the interval it acts on; None: the whole table (recover)
    queued_at: datetime | None
    ended_at: datetime | None
    last: datetime | None = None  # a range run (conf ``eo_batch``): the start of the last interval it covers

    @property
    def pending(self) -> bool:
        return self.state in PENDING


def _aware(value: datetime | None) -> datetime | None:
    return value if value is None or value.tzinfo else value.replace(tzinfo=timezone.utc)


def _what(run_type: str, conf: dict[str, Any]) -> str:
    action = str(conf.get("eo_action") or "")
    if conf.get("action") == "recover" or action == "recover":
        return "recover"
    if conf.get("action") == "rollback" or action == "rollback":
        return f"rollback to {conf.get('to_version') or '?'}"
    if conf.get("reprocess"):
        label = action if action in ("reprocess", "rerun-stale") else "reprocess"
        return label + (" (allow shrinking)" if conf.get("allow_shrinking") else "")
    return str(run_type or "run")


def _start_at(text: Any) -> datetime | None:
    """The start of the interval a rollback names (ISO-8601)."""
    try:
        return _aware(datetime.fromisoformat(str(text).replace("Z", "+00:00")))
    except ValueError:
        return None


@contextmanager
def _reading(session: Any = None) -> Iterator[Any]:
    """``session`` as it is - the caller's transaction, whose row locks must stay held (``actions.trigger``):
    Airflow's ``create_session()`` is the thread's scoped session, so opening one here would commit and close
    the caller's - else a session of its own."""
    if session is not None:
        yield session
        return
    from airflow.utils.session import create_session

    with create_session() as own:
        yield own


def table_runs(table: TableRef, maintenance_dag: str, logged: Iterable[Interval] = (),
               session: Any = None) -> list[RunState]:
    """Every run that acts on ``table`` (newest first), with its state. ``logged``: the log's intervals; a
    rollback of an interval the log does not know counts as a run on the whole table. ``session``: read in
    that (the caller's) transaction (see :func:`_reading`)."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun

    starts = {iv.start for iv in logged}
    cols = (DagRun.dag_id, DagRun.run_id, DagRun._state, DagRun.run_type, DagRun.conf, DagRun.triggering_user_name,
            DagRun.data_interval_start, DagRun.data_interval_end, DagRun.queued_at, DagRun.end_date, DagRun.id)
    out: list[RunState] = []
    with _reading(session) as db:
        rows = []
        for dag_id in dict.fromkeys((table.pipeline, maintenance_dag)):
            rows += db.execute(select(*cols).where(DagRun.dag_id == dag_id)
                               .order_by(DagRun.id.desc()).limit(MAX_RUNS)).all()
        notes = _notes(db, [r[-1] for r in rows if r[2] == "failed" or r[2] == "success"])
    for dag_id, run_id, state, run_type, conf, by, start, end, queued, ended, pk in rows:
        conf = conf if isinstance(conf, dict) else {}
        acts, at = _acts_on(table, dag_id, conf, start, end, starts)
        if acts:
            out.append(RunState(dag_id, run_id, str(state or "queued"), _what(run_type, conf), by,
                                str(conf.get("eo_reason") or ""), notes.get(pk, ""), at, _aware(queued), _aware(ended),
                                _range_last(dag_id, table, conf, at)))
    out.sort(key=lambda r: r.queued_at or datetime.min.replace(tzinfo=timezone.utc), reverse=True)
    return out


def _acts_on(table: TableRef, dag_id: str, conf: dict[str, Any], start: datetime | None, end: datetime | None,
             starts: set[datetime]) -> tuple[bool, datetime | None]:
    """Whether a run of ``dag_id`` with ``conf`` and data interval ``start``-``end`` acts on ``table`` (see the
    module), and the start of the interval it acts on (None: the whole table)."""
    if dag_id == table.pipeline:
        sinks = conf.get("sinks")
        if isinstance(sinks, list) and table.sink not in sinks or start is None or end is None:
            return False, None
        return True, None if conf.get("eo_action") == "recover" else _aware(start)
    if conf.get("table_url") != table.url:
        return False, None
    at = _start_at(conf.get("interval_start")) if conf.get("action", "rollback") == "rollback" else None
    return True, at if at in starts else None  # an interval the log does not know: a run on the whole table


def from_api(table: TableRef, run: dict[str, Any]) -> RunState | None:
    """A run as Airflow's REST API lists it (``GET /api/v2/dags/<dag>/dagRuns``), if it acts on ``table``:
    what ``eo reprocess`` / ``eo rerun-stale`` check with the table page's rule (:func:`pending`)."""
    conf = run.get("conf") if isinstance(run.get("conf"), dict) else {}
    at = {k: _start_at(run[k]) if run.get(k) else None for k in ("data_interval_start", "data_interval_end",
                                                                 "queued_at", "end_date")}
    acts, start = _acts_on(table, str(run.get("dag_id")), conf, at["data_interval_start"], at["data_interval_end"],
                           set())
    if not acts:
        return None
    return RunState(str(run.get("dag_id")), str(run.get("dag_run_id")), str(run.get("state") or "queued"),
                    _what(str(run.get("run_type") or ""), conf), run.get("triggering_user_name"),
                    str(conf.get("eo_reason") or ""), str(run.get("note") or ""), start, at["queued_at"],
                    at["end_date"], _range_last(str(run.get("dag_id")), table, conf, start))


def _range_last(dag_id: str, table: TableRef, conf: dict[str, Any], start: datetime | None) -> datetime | None:
    """The start of the last interval a range run of the pipeline's DAG covers (conf ``eo_batch.end``: its
    batch writes every interval from its own to there), else None."""
    batch = conf.get("eo_batch")
    if dag_id != table.pipeline or start is None or not isinstance(batch, dict):
        return None
    last = _start_at(batch.get("end"))
    return last if last is not None and last > start else None


def _notes(session: Any, pks: list[int]) -> dict[int, str]:
    if not pks:
        return {}
    from sqlalchemy import select

    from airflow.models.dagrun import DagRunNote

    got: dict[int, str] = {}
    for i in range(0, len(pks), 1000):
        got.update(session.execute(select(DagRunNote.dag_run_id, DagRunNote.content)
                                   .where(DagRunNote.dag_run_id.in_(pks[i:i + 1000]))).all())
    return {k: str(v or "") for k, v in got.items()}


def with_outcome(runs: list[RunState], began: set[str]) -> list[RunState]:
    """``runs`` with a failed run that began no transaction (its run id is not in ``began``) as *refused*."""
    from dataclasses import replace

    return [replace(r, state="refused") if r.state == "failed" and r.run_id not in began and r.what != "recover"
            else r for r in runs]


def pending(runs: Iterable[RunState], interval: Interval | None) -> list[RunState]:
    """The queued or running runs that act on ``interval`` (None: on the whole table, i.e. a recover); a range
    run acts on every interval its batch covers, from its own to its ``eo_batch`` end."""
    at = interval.start if interval is not None else None
    return [r for r in runs if r.pending and (r.start == at or (
        at is not None and r.start is not None and r.last is not None and r.start <= at <= r.last))]


def paused(dag_ids: Iterable[str], session: Any = None) -> list[str]:
    """Which of ``dag_ids`` Airflow has paused (their runs, actions included, wait until unpaused)."""
    from sqlalchemy import select

    from airflow.models.dag import DagModel

    ids = list(dict.fromkeys(dag_ids))
    with _reading(session) as db:
        found = dict(db.execute(select(DagModel.dag_id, DagModel.is_paused).where(DagModel.dag_id.in_(ids))).all())
    return [d for d in ids if found.get(d)]


def unpause(dag_id: str) -> None:
    """Unpause ``dag_id`` (what Airflow's toggle does: ``DagModel.is_paused``)."""
    from sqlalchemy import update

    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == dag_id).values(is_paused=False))
    log.info("unpaused DAG %s", dag_id)


def known_runs(dag_id: str, run_ids: Iterable[str], session: Any = None) -> set[str]:
    """Which of ``run_ids`` of ``dag_id`` this Airflow knows (a run made elsewhere - ``airflow dags test``
    with another metadata DB - has no page here)."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun

    ids = [r for r in dict.fromkeys(run_ids) if r]
    if not ids:
        return set()
    found: set[str] = set()
    with _reading(session) as db:
        for i in range(0, len(ids), 1000):
            found.update(db.scalars(select(DagRun.run_id).where(DagRun.dag_id == dag_id,
                                                                DagRun.run_id.in_(ids[i:i + 1000]))))
    return found
