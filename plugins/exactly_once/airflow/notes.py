"""What a run tells Airflow about its table: the asset event's extra and the DAG run's note.

* The table's asset event carries ``{"version", "interval": {"start", "end"}, "rows", "files",
  "partitions", "report_url"}``, so a consumer DAG knows exactly which version it was triggered by. It
  is added through the task's AssetAlias outlet by the version's one announcer, through the one seam
  where a publish ends (:mod:`~exactly_once.airflow.endings`). A commit that published nothing (the
  interval was already committed) adds no event.
* A task cannot set its DAG run's note through the Task SDK (Airflow 3.3's execution API has no such
  call; the REST API would need credentials in every worker). So the phase tasks push a one-line note
  as XCom ``eo_note`` ("published e2: 5 rows, 1 file", "aborted: rejected_ratio 0.081 > 0.05"), and
  a listener of this plugin - run by the scheduler (or ``airflow dags test``), which owns the DagRun
  row - copies it into the note when the run ends. A note a person wrote is never overwritten.
"""
from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit

from airflow.listeners import hookimpl

from ..quality.reports import run_report_url

log = logging.getLogger(__name__)


def asset_uri(config: Any) -> str:
    """The table's Airflow Asset: its URL (``file://`` + the path for a local table), without the user and
    password a database URL may carry. (Airflow drops them from an asset's URI but keeps its name - the URI
    as given - in the metadata DB and the UI.)"""
    url = config.table_url
    if "://" not in url:
        return f"file://{url}"
    parts = urlsplit(url)
    if parts.username or parts.password:
        return url.replace(parts.netloc, parts.netloc.rsplit("@", 1)[1], 1)
    user, colon, secret = parts.netloc.partition(":")
    if colon and not secret.isdigit() and "@" in url:  # key:se/cret@host - a '/' in the secret ends the netloc
        return f"{parts.scheme}://{url.rsplit('@', 1)[1]}"  # early (storage.redact's rule; a port is digits)
    return url


NOTE_KEY = "eo_note"
OURS = ("published ", "aborted", "fenced", "not published", "refused")   # a note starting so was written by us
CLI_NOTE = re.compile(r"eo (reprocess|rerun-stale) of \S+")  # what `eo reprocess` starts a run with, whole
PHASE_NOTE_CHARS = 480  # one table's note; Airflow keeps 1,000 characters of a run's note
RUN_NOTE_CHARS = 1000
_CLAUSE = re.compile(r"(?<=[.;:]) |(?<= -) ")  # where a clause starts: after '. ', '; ', ': ', ' - '
_ELIDED = " [...] "
_MIN_HEAD = 40  # what happened: at least the error's name and the attempt


def shorten(text: str, limit: int = PHASE_NOTE_CHARS) -> str:
    """``text`` in at most ``limit`` characters. Messages end with what to do next, so the advice is
    kept whole: the longest tail of ``text`` that starts a clause and fits is kept, and what comes first
    (what happened) is shortened in the middle to make room."""
    if len(text) <= limit:
        return text
    for m in _CLAUSE.finditer(text):
        tail = text[m.start() + 1:]
        room = limit - len(tail) - len(_ELIDED)
        if room >= _MIN_HEAD:
            return text[:room].rstrip() + _ELIDED + tail
    return text[:limit - len(_ELIDED)].rstrip() + _ELIDED.rstrip()  # one clause longer than a note


def report_url(dag_id: str, run_id: str) -> str:
    """The run's report page; absolute when ``[api] base_url`` is configured."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}{run_report_url(dag_id, run_id)}"


def published_note(summary: dict[str, Any]) -> str:
    """``published e2: 5 rows, 1 file`` from the commit's summary (``IntervalRun.commit``)."""
    version = str(summary.get("version", ""))
    epoch = version.rsplit(".e", 1)[-1].lstrip("0") or "?"
    rows, files = summary.get("rows"), summary.get("files") or 0
    return (f"published e{epoch}: {'?' if rows is None else rows} row{'' if rows == 1 else 's'}, "
            f"{files} file{'' if files == 1 else 's'}")


def failed_note(run: Any, txn: Any, exc: BaseException) -> str:
    """``aborted: rejected_ratio 0.081 > 0.05`` (the failed check) or ``aborted: <error>``; ``refused: <error>``
    when no transaction began (``txn`` None: the begin task refused - inputs shrank, a wrong version)."""
    from ..errors import FencedError
    from ..ops.inspection import quality_of

    if txn is None:
        return refused_note(exc)
    if isinstance(exc, FencedError):
        return shorten(f"fenced: {exc}")
    st = run.sink.status(txn.interval).get(txn.epoch) if txn is not None else None
    quality = quality_of(st) if st is not None else None
    if quality is not None and quality.passed is False:
        return shorten(f"aborted: {quality.headline}")
    return shorten(f"aborted: {type(exc).__name__}: {exc}")


def refused_note(exc: BaseException) -> str:
    """``refused: InputsShrankError: ... - reprocess with allow shrinking``: a check refused the run before it
    began anything (the table page shows the run as refused, with this reason)."""
    text = str(exc)
    return shorten(f"refused: {text}" if text.split(":", 1)[0].endswith("Error") else
                   f"refused: {type(exc).__name__}: {text}")


def discarded_note(run: Any, txn: Any) -> str:
    """``not published: e2 was aborted by the teardown ...``: the teardown threw away an attempt that
    wrote but was never committed (a clear of the write task alone, "Mark success" on commit)."""
    found = run.sink.committed(txn.interval)
    live = f"e{found[0].epoch} stays live" if found else "nothing of the interval is live"
    return (f"not published: e{txn.epoch} was aborted by the teardown - its commit did not run (clear the "
            f"write task with Downstream to publish a new version); {live}")


def event_extra(context: Any, summary: dict[str, Any], interval: Any = None) -> dict[str, Any]:
    """The asset event's extra for a published version (``IntervalRun.commit``'s summary) of the run's
    interval, or of ``interval`` (a range's host announcing the intervals no run of their own announces)."""
    ti = context["ti"]
    start, end = (interval.start, interval.end) if interval is not None else \
        (context["data_interval_start"], context["data_interval_end"])
    return {"version": summary.get("version"), "rows": summary.get("rows"), "files": summary.get("files"),
            "partitions": sorted(summary.get("partitions") or {}),
            "interval": {"start": start.isoformat(), "end": end.isoformat()},
            "report_url": report_url(ti.dag_id, ti.run_id)}


def on_final_error(context: Any, note: str) -> None:
    """A phase failed for good (or the teardown threw an attempt away): leave the note for the run
    (best effort; never hides the error)."""
    try:
        context["ti"].xcom_push(key=NOTE_KEY, value=note)
    except Exception:  # noqa: BLE001 - the task fails with its own error anyway
        log.warning("could not record the run note %r", note, exc_info=True)


def run_note(dag_run: Any, session: Any) -> str | None:
    """The notes the run's tasks left (one per table) since the run was last cleared, joined; None if
    none. A task that did not run again after a clear ("Mark success" on a phase, a clear without
    Downstream) keeps its XCom from before: that note is about an earlier attempt and is left out."""
    from sqlalchemy import select

    from airflow.models.xcom import XComModel

    query = select(XComModel).where(
        XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id, XComModel.key == NOTE_KEY)
    if dag_run.queued_at is not None:  # set again by every clear
        query = query.where(XComModel.timestamp >= dag_run.queued_at)
    rows = session.scalars(query.order_by(XComModel.task_id)).all()
    notes = [str(XComModel.deserialize_value(x)) for x in rows]
    if not notes:
        return None
    if len(rows) == 1:
        return shorten(notes[0], RUN_NOTE_CHARS)
    each = RUN_NOTE_CHARS // len(rows) - 2  # every table keeps its own advice
    return "; ".join(shorten(f"{x.task_id.rsplit('.', 1)[0]}: {n}", each) for x, n in zip(rows, notes))


def failed_tasks(dag_run: Any, session: Any) -> list[str]:
    """The task ids of the run that failed (for a note when no phase could say more)."""
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance

    return list(session.scalars(select(TaskInstance.task_id).where(
        TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id,
        TaskInstance.state == "failed").order_by(TaskInstance.task_id)))


class RunNotes:
    """Listener: when a DAG run ends, its note says what it did to its tables.

    It runs inside the scheduler's (or ``dags test``'s) state update, so it uses that session: the
    note is committed with the run's final state (a second session would wait on SQLite's lock).
    """

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        set_note(dag_run, failed=False)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        set_note(dag_run, failed=True)


def set_note(dag_run: Any, *, failed: bool) -> None:
    """Copy the tasks' notes into ``dag_run.note`` unless a person wrote one. Never raises."""
    from sqlalchemy.orm import object_session

    try:
        session = object_session(dag_run)
        if session is None:
            from airflow.utils.session import create_session

            with create_session() as own:
                _apply(own.merge(dag_run), own, failed)
        else:
            _apply(dag_run, session, failed)
    except Exception:  # noqa: BLE001 - a listener must never break the scheduler
        log.warning("could not set the note of %s", getattr(dag_run, "run_id", "?"), exc_info=True)


def _apply(dag_run: Any, session: Any, failed: bool) -> None:
    note = run_note(dag_run, session)
    if note is None and failed:
        note = f"not published: {', '.join(failed_tasks(dag_run, session)) or 'the run'} failed"
    current = dag_run.note
    if note is not None and (not current or current.startswith(OURS) or CLI_NOTE.fullmatch(current)) \
            and current != note:
        dag_run.note = note
