"""Where a publish ends: the one seam through which a task tells Airflow that a version went live.

Every task that finishes a publish - the commit task, the teardown, the next ``begin`` (its recovery
included), a batch's host, a range's host - or that finds its run's interval published by a batch
(:func:`exactly_once.airflow.batching.finish_at_once`) calls :func:`ended`; every phase task calls :func:`finish_try` at
its end, which calls it for everything its :class:`~exactly_once.protocol.pipeline.IntervalRun` finished. It records, for
exactly that version and at most once per task try:

* the table's **asset event** (through the group's AssetAlias outlet, extra :func:`~.notes.event_extra`),
* the version's **OpenLineage** datasets (:class:`~exactly_once.airflow.lineage.PublishLineage`),
* the run's **note** (XCom ``eo_note``: the run's own interval first, then how many other intervals of a
  range this task published).

Who announces a version, so that each is announced once whatever raced (docs/LINEAGE.md):

* a single run's version: the task that **finished** its publish - the one that wrote its completion
  record (``CommitResult.finished``): one task, however many rolled the same publish forward at once;
* a batch's version: the first to claim it (:func:`~exactly_once.protocol.batch.claim_announcement`) of
  the interval's own DAG run (finishing at once on it, or finishing its publish) and the batch's host
  (only for intervals with no DAG run of their own queued or running).

A task that finds a version published before it ran (and not by a batch) notes it and announces nothing.

Airflow records a task's asset events only with its success, and the OpenLineage provider sends nothing
for a killed process. So a finisher that did not succeed is covered by whoever comes next, from the
``published`` record's ``by`` (:func:`identity`, written by :func:`sign`):

* its retry (a later try of the same task instance, same clear): :func:`finished_before`;
* after its last try, the group's teardown, which runs after commit in any state:
  :func:`lost_by_others` - every version of the run's interval that another task instance of this DAG run
  and clear finished and whose state is not success (commit killed, ``kill -9`` / ``os._exit``, after its
  record). A commit that succeeded announced; an earlier clear's versions, and an earlier DAG run's with the
  same run id (published before this run started), are not this run's; when the states cannot be read the
  teardown fails, naming the versions, and guesses nothing (a duplicate event restarts every consumer).
  The commit's FAIL event leaves those versions to the teardown (``PublishLineage.teardown_adopts``).

What is left (review 5): a finisher and then its teardown both lost on their last tries, or a teardown
that cannot read the states on any try (then a commit that failed after announcing has no lineage either);
a Clear of any task of the run while the finisher's retry or the teardown is pending (Airflow counts
clears per run, so the record's ``#clear`` no longer matches: nobody re-announces); a ``begin`` that
finished a crashed commit's publish and is killed on its last try (the teardown does not run after a
failed setup); a worker killed between the teardown's skip (``CommitOperator.teardown_idle``) and its
commit's success; and a finisher killed after Airflow recorded its success but before the provider sent
its lineage: no later task knows those events are missing.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..errors import AirflowApiError
from ..ids import Interval, parse_txn_name
from ..protocol.batch import batch_of, claim_announcement
from ..protocol.pipeline import IntervalRun
from .first_event import TaskView, take_turn, task_of
from .notes import NOTE_KEY, event_extra, published_note, shorten

log = logging.getLogger(__name__)
BEFORE = " before this run"  # a version this task found published (not by a batch): noted, never announced


@dataclass(frozen=True)
class Ending:
    """One version a task recorded: its interval, its run summary, how it ended, whether it announced it."""

    interval: Any
    version: str
    summary: dict[str, Any]
    how: str
    announced: bool


def start_try(operator: Any, context: Any = None) -> None:
    """At the start of every task try: nothing ended yet (a retry in the same process reports only its own)."""
    operator._eo_endings, operator._eo_note, operator._eo_events = [], None, []
    operator._eo_recovering, operator._eo_action_note = False, ""  # set by a table's recover (rollback.py)
    operator.forget_published((context or {}).get("ti"))


def endings(operator: Any) -> list[Ending]:
    return list(getattr(operator, "_eo_endings", []))


def identity(context: Any) -> str:
    """Who finishes or announces: the task instance, within one clear of its run (a later try of it follows
    a try that failed, whose events Airflow dropped; a clear starts anew)."""
    ti = context["ti"]
    clears = getattr(context.get("dag_run"), "clear_number", 0) or 0
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{getattr(ti, 'map_index', -1)}#{clears}"


def sign(context: Any, *sinks: Any) -> None:
    """Record this task instance with every publish these sink handles finish (the ``published`` record's ``by``)."""
    for sink in sinks:
        sink.finisher = identity(context)


def finished_before(operator: Any, run: IntervalRun, context: Any) -> list[dict[str, Any]]:
    """On a later try of a task (after a try that failed, or resumed after a deferral): the run summaries of
    the publishes of ``run``'s interval an earlier try of it finished - their events were dropped with it
    (of every interval of the table for a run asked to recover it)."""
    if int(getattr(context["ti"], "try_number", 1) or 1) <= 1 and not getattr(operator, "resumed", False):
        return []
    me = identity(context)
    started = getattr(context.get("dag_run"), "start_date", None)  # a run id re-created: not its publishes
    return [run_summary(run.at(iv), run.sink.ref(iv, epoch), st)
            for iv in _finishable(operator, run)
            for epoch, st in run.sink.status(iv).items()
            if st.published and (st.records.get("published") or {}).get("by") == me
            and (started is None or (st.published_at or 0.0) >= started.timestamp())]


def _finishable(operator: Any, run: IntervalRun) -> list[Interval]:
    """The intervals whose publishes a try of ``operator`` can finish: a table's recover any interval's;
    another task its run's interval and, in a stateful pipeline, the one before it (``begin`` finishes a
    predecessor's decided publish before it reads its state)."""
    if getattr(operator, "_eo_recovering", False):
        return run.sink.log.intervals()
    return [*(run.intervals_before() if run.config.stateful else []), run.interval]


def lost_by_others(run: IntervalRun, context: Any) -> list[tuple[dict[str, Any], str]]:
    """The teardown's part (module docstring): the publishes of ``run``'s interval that another task instance
    of this DAG run, within this clear of it, finished (its identity is their ``published`` record's ``by``)
    and that ended in a state other than success - its events were dropped or never sent (a commit killed
    on its last try after the record). Returns ``(run summary, how)`` for each, for :func:`ended`.

    A version a task that *succeeded* finished was announced by it (Airflow recorded its events with its
    success); one finished in an earlier clear of the run, or by another run, is not this run's to
    announce (a later clear re-runs things: it announces nothing twice); a batch's versions have their own
    claim (:func:`~exactly_once.protocol.batch.claim_announcement`). A run id names more than one DAG run
    over time (``airflow dags test`` twice for one date deletes the run and creates it again, same id, clear 0):
    only a publish recorded after this DAG run started is this run's (``published_at``, the writer's clock,
    against the run's ``start_date``; a worker clock behind the scheduler's can only make it miss one). A task
    Airflow gives no state for is not announced. When the tasks' states cannot be read at all (the API not
    answering) the teardown fails with :class:`~exactly_once.errors.AirflowApiError` naming the versions, so
    that its retry asks again: a second asset event would start every consumer DAG a second time for one
    version - the duplicate this library exists to prevent - so it never guesses."""
    ti, me = context["ti"], identity(context)
    prefix, clear = f"{ti.dag_id}/{ti.run_id}/", "#" + me.rsplit("#", 1)[1]
    started = getattr(context.get("dag_run"), "start_date", None)
    if started is None:  # cannot tell this DAG run's publishes from an earlier one's with the same id
        return []
    found: dict[int, tuple[str, str, Any]] = {}
    for epoch, st in sorted(run.sink.status(run.interval).items()):
        by = (st.records.get("published") or {}).get("by") if st.published else None
        if not isinstance(by, str) or by == me or not by.startswith(prefix) or not by.endswith(clear) or batch_of(st):
            continue
        if (st.published_at or 0.0) < started.timestamp():  # an earlier DAG run of this run id (re-created)
            continue
        task_id, _, index = by[len(prefix):-len(clear)].rpartition("/")
        found[epoch] = (task_id, task_id if index in ("", "-1") else f"{task_id}_{index}", st)
    if not found:
        return []
    try:
        states = task_states(ti, sorted({t for t, _, _ in found.values()}))
    except Exception as exc:  # noqa: BLE001 - cannot tell whether they succeeded: never guess (above)
        raise AirflowApiError(
            f"could not read the states of {', '.join(sorted({t for t, _, _ in found.values()}))} "
            f"({type(exc).__name__}: {exc}): whether {', '.join(run.sink.ref(run.interval, e).name for e in found)} "
            f"was announced is unknown; this teardown's retry asks again (the data is published either way)") from exc
    out = []
    for epoch, (task_id, key, st) in found.items():
        state = states.get(key)
        if state is None:
            log.warning("Airflow gave no state for %s: %s not announced by this task", key,
                        run.sink.ref(run.interval, epoch).name)
            continue
        if state == "success":
            continue
        how = f" (publish finished by {task_id}, which ended {state}: announced by {ti.task_id})"
        out.append((run_summary(run, run.sink.ref(run.interval, epoch), st), how))
    return out


def task_states(ti: Any, task_ids: list[str]) -> dict[str, str]:
    """The states of ``task_ids`` in ``ti``'s DAG run, as Airflow's execution API gives them (``{task_id: state}``;
    a mapped task's key is ``<task_id>_<map_index>``), each as its plain value ("success", "failed", ...). Raises
    what the query raises (an Airflow without it, the API not answering): each caller decides what that means."""
    found = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id])
    states = found.get(ti.run_id, found) if isinstance(found, dict) else {}
    return {k: str(getattr(v, "value", v)) for k, v in states.items() if v is not None}


def announce_lost(operator: Any, context: Any, run: IntervalRun) -> None:
    """The teardown announces, through :func:`ended`, every publish :func:`lost_by_others` finds."""
    for summary, how in lost_by_others(run, context):
        ended(operator, context, run, summary, finished=False, adopted=True, how=how)


def record_finished(operator: Any, context: Any, run: IntervalRun, summaries: list[dict[str, Any]]) -> None:
    """Record the publishes ``summaries`` this task finished (:func:`ended`, ``finished``), each as its own
    interval's; ``run.ended()`` at once after finishing, before anything can note one of those versions as
    published before this task."""
    for summary in summaries:
        ended(operator, context, run.at(interval_of(summary)), summary, finished=True)


def finish_try(operator: Any, context: Any, run: IntervalRun | None) -> None:
    """At the end of every task try (also one that raises): record every publish ``run`` finished during it
    (:meth:`IntervalRun.ended`), add the asset events of a try that succeeds (:func:`add_events`), then leave
    the run's note. While the task fails with its own error, a
    failure here is logged, never raised over it."""
    failing = sys.exc_info()[1] is not None and not skipping(sys.exc_info()[1])  # deferring too: a resumed
    try:                                                                          # try re-announces
        if run is not None:
            record_finished(operator, context, run, [*run.ended(), *finished_before(operator, run, context)])
        if not failing:  # Airflow drops a failed try's events: it takes no turn for them
            add_events(operator, context)
        leave_note(operator, context)
    except Exception:
        if not failing:
            raise
        log.warning("could not record what this task published", exc_info=True)


def skipping(exc: BaseException) -> bool:
    """Whether ``exc`` ends the task in success or skipped (the rest of a group skipped, the task skipped):
    what it published is recorded as for a task that returned."""
    from .compat import AirflowSkipException, DownstreamTasksSkipped  # noqa: PLC0415

    return isinstance(exc, (DownstreamTasksSkipped, AirflowSkipException))


def interval_of(summary: dict[str, Any]) -> Interval:
    """The interval of the version a run summary is of (its name: ``<interval token>.e<epoch>``)."""
    parsed = parse_txn_name(str(summary.get("version")))
    if parsed is None:
        raise ValueError(f"not a version: {summary.get('version')!r}")
    return Interval.from_token(parsed[0])


def ended(operator: Any, context: Any, run: IntervalRun, summary: dict[str, Any], *, finished: bool,
          how: str | None = None, adopted: bool = False) -> bool:
    """The seam (module docstring): version ``summary["version"]`` of ``run``'s interval is live; ``finished``:
    this task finished its publish; ``adopted``: another task of this run finished it and did not succeed
    (:func:`lost_by_others`): this task announces it instead - and a retry of this task would again. Records
    the asset event and the lineage when this task is the version's announcer, and the version for the note
    (:func:`finish_try` leaves it). Returns whether it announced; a second call for a version is a no-op.
    ``how``: how it ended, for the note (a rollback), instead of the phase's."""
    version = str(summary.get("version"))
    done = getattr(operator, "_eo_endings", None)
    if done is None:
        done = operator._eo_endings = []
    if any(e.version == version for e in done):
        return False
    epoch = int(version.rsplit(".e", 1)[1])
    st = run.sink.status(run.interval).get(epoch)
    batch = batch_of(st) if st is not None else None
    announce = claim_announcement(run.sink, batch, run.interval, identity(context)) if batch else finished or adopted
    if how is not None:
        pass
    elif batch:
        how = f" in batch {batch}"
    elif not finished:
        how = BEFORE
    elif getattr(operator, "phase", "") != "commit":
        how = f" (publish finished by {context['ti'].task_id})"
    else:
        how = ""
    done.append(Ending(run.interval, version, summary, how, announce))
    if announce:
        # its lineage, even should the task fail after this (unless whoever comes next re-announces it: a retry
        # of this task, finished_before / lost_by_others, or - for a commit's last try - the teardown)
        operator.published(run, summary, retried=adopted or (
            (st.records.get("published") or {}).get("by") == identity(context) if st is not None else False))
        operator._eo_events = [*getattr(operator, "_eo_events", []), (run, summary)]  # added at the try's end
        log.info("%s: %s is live%s: lineage recorded, its asset event goes with the task's success",
                 context["ti"].task_id, version, how)
    return announce


def add_events(operator: Any, context: Any) -> None:
    """The table's asset event of every version this try announced, through the task's AssetAlias outlet (an
    alias emits nothing unless an event is added: a task that announced nothing emits nothing) - at the end of a
    try that succeeds, after the task's turn (:mod:`.first_event`: two first events at once lose one), which it
    then holds only until Airflow records its success."""
    from airflow.sdk import Asset, AssetAlias

    pending, operator._eo_events = list(getattr(operator, "_eo_events", [])), []
    alias = next((o for o in operator.outlets or []  # ours only (a user's own alias beside it gets nothing)
                  if isinstance(o, AssetAlias) and o.name.startswith("exactly_once:")), None)
    if not pending or alias is None:
        return
    ti, sink = context["ti"], pending[0][0].sink
    wait, poll = settings.first_event_wait()
    why = take_turn(sink.storage, sink.home, operator.asset_uri, task_of(ti, alias.name), TaskView(ti, alias.name, operator.asset_uri),
                    wait=wait, poll=poll)
    log.info("%s: %d asset event(s) of %s through %s (%s)", ti.task_id, len(pending), operator.asset_uri, alias.name, why)
    for run, summary in pending:
        context["outlet_events"][alias].add(Asset(uri=operator.asset_uri), extra=event_extra(context, summary, run.interval))


def note(operator: Any, context: Any) -> str | None:
    """The note of what this task ended: each version of the run's own interval, then the other intervals
    (a range's host) in one clause."""
    done = endings(operator)
    if not done:
        return None
    start = context.get("data_interval_start")
    own = [e for e in done if e.interval.start == start]
    others = sorted((e for e in done if e.interval.start != start), key=lambda e: e.interval.start)
    asked = _action_asked(context)
    parts = [published_note(e.summary) + e.how + (" (nothing to do)" if e.how == BEFORE and not others else
                                                  f" ({asked})" if asked and e.how != BEFORE else "")
             for e in own]
    if others:
        n = len(others)
        span = others[0].interval.start.isoformat() + (f" .. {others[-1].interval.start.isoformat()}" if n > 1 else "")
        conf = getattr(context.get("dag_run"), "conf", None) or {}
        ranged = isinstance(conf, dict) and bool(conf.get("eo_batch"))
        what = "other interval" + ("" if n == 1 else "s") + (" of the range" if ranged else "")
        parts.append(f"{'and ' if parts else ''}{n} {what} published ({span})" if ranged or n > 3 else
                     "published " + ", ".join(f"e{int(e.version.rsplit('.e', 1)[1])} of {e.interval.start.isoformat()}"
                                              for e in others))
    lead = getattr(operator, "_eo_action_note", "")  # an action on the table (recover, rollback): who asked what
    return shorten("; ".join([*([lead] if lead else []), *parts]))


def _action_asked(context: Any) -> str:
    """The table action the run was asked for (conf ``eo_action``: the table page, ``eo``), as ``eo history``
    labels it ("reprocess", "rerun-stale (allow shrinking)"), else "": the note of what it published names it,
    as a rollback's does."""
    from .asked import asked  # noqa: PLC0415

    conf = getattr(context.get("dag_run"), "conf", None) or {}
    return str(asked(context, conf).get("action") or "") if isinstance(conf, dict) and conf.get("eo_action") else ""


def leave_note(operator: Any, context: Any) -> None:
    """Push the note of what this task ended (:func:`note`) as the run's XCom ``eo_note``, unless pushed already."""
    text = note(operator, context)
    if text is not None and text != getattr(operator, "_eo_note", None):
        context["ti"].xcom_push(key=NOTE_KEY, value=text)
        operator._eo_note = text


def run_summary(run: IntervalRun, txn: Any, st: Any) -> dict[str, Any]:
    """The commit's run summary of ``txn`` (``reports/runs/<pipeline>/<version>.json``, read with the
    storage connection's options), else its facts from the log."""
    from ..storage import storage_for  # noqa: PLC0415

    reports, root = storage_for(run.config.reports_url, **run.options)
    try:
        return reports.read_json(reports.join(root, "runs", run.config.pipeline, f"{txn.name}.json"))
    except FileNotFoundError:
        m = st.manifest
        return {"version": txn.name, "rows": m.rows if m else None, "files": m.files if m else 0,
                "partitions": {p: "published" for p in (m.partitions if m else {})}}
