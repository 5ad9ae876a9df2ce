"""Thin Airflow operators: each one resolves the interval and the transaction, then calls one phase.

The phases themselves live in :class:`exactly_once.protocol.pipeline.IntervalRun` (plain Python). Errors that a
retry cannot fix (:data:`exactly_once.errors.FINAL`: a fenced attempt, a failed quality gate, an aborted
transaction, a broken suite or configuration, ...) fail the task at once (``AirflowFailException``: no
retries); everything else is retried with backoff.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from airflow.sdk import BaseOperator, BaseOperatorLink
from .compat import (TRIGGER_FAIL, TRIGGER_TIMEOUT, AirflowFailException,
                     AirflowSkipException, DownstreamTasksSkipped)

from .. import settings
from ..protocol.config import PipelineConfig
from ..errors import FINAL, PredecessorPendingError, SinkRenamedError, ValidationFailedError
from ..ids import Interval, TxnRef
from ..protocol.pipeline import IntervalRun
from ..storage import redact
from . import batching, endings
from .asked import asked as _asked
from .connections import storage_options
from .heap import young_heap
from .lineage import PublishLineage

# FINAL (errors.py): errors no retry can fix - the task fails at once (and ends its transaction)
log = logging.getLogger(__name__)


def interval_of(context: Any) -> Interval:
    """The run's data interval ``[start, end)`` - the only identity a phase uses (never the run id).

    A manual run whose interval Airflow inferred as zero-length although its DAG's timetable has an
    interval ending there (a local-time schedule's interval ending at a daylight-saving jump) gets that
    interval, asked of the timetable; any other zero-length interval is refused."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is not None and end is not None and start == end:
        found = _interval_ending_at(context, end)
        if found is not None:
            log.info("Airflow gave this run the zero-length interval %s - %s; its timetable's interval ending "
                     "there is %s", start, end, found)
            return found
    if start is None or end is None or not start < end:
        raise AirflowFailException(
            f"this DAG run has no real data interval ({start} - {end}); use a data-interval timetable")
    return Interval(start, end)


def _interval_ending_at(context: Any, end: Any) -> Interval | None:
    from ..errors import LayoutError  # noqa: PLC0415
    from ..protocol.timetables import interval_ending_at  # noqa: PLC0415

    timetable = getattr(context.get("dag"), "timetable", None)
    if timetable is None:
        return None
    try:
        return interval_ending_at(timetable, end)
    except LayoutError:  # no real data intervals (a trigger timetable): refused below
        return None


class PhaseOperator(PublishLineage, BaseOperator):
    """Base of the phase operators: ``config`` names the pipeline, ``begin_task_id`` the full task id of
    the group's begin task (the txn's source; set by :func:`~exactly_once.airflow.exactly_once_group`
    from the group's real prefix, so it works in nested groups)."""

    phase: str = ""
    ui_color = "#e8f1fb"

    def __init__(self, *, config: PipelineConfig, begin_task_id: str | None = None,
                 asset_uri: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config
        self.begin_task_id = begin_task_id
        self.asset_uri = asset_uri  # the table's Asset, announced through an AssetAlias outlet

    def run_for(self, context: Any) -> IntervalRun:
        """The interval's run; the storage connection is resolved here, once per task."""
        return IntervalRun(self.config, interval_of(context),
                           storage_options=storage_options(self.config.storage_conn_id))

    def began(self, context: Any) -> dict[str, Any] | None:
        return context["ti"].xcom_pull(task_ids=self.begin_task_id)

    def txn(self, context: Any) -> TxnRef:
        began = self.began(context)
        if not began:
            raise AirflowFailException(f"no transaction: {self.begin_task_id} did not return one")
        return TxnRef.from_dict(began["txn"])

    def execute(self, context: Any) -> Any:
        with young_heap():  # a full collection during the phase walks only what the phase made
            return self._execute(context)

    def _execute(self, context: Any) -> Any:
        run = None
        endings.start_try(self, context)
        try:
            run = self.run_for(context)
            endings.sign(context, run.sink)
            try:
                return self.call(run, context)
            finally:  # every publish this try finished goes through the one seam (announced once)
                endings.finish_try(self, context, run)
        except AirflowFailException as exc:  # a check of begin refused the run (a user, a rollback's version)
            if run is not None and self.phase == "begin":
                from .notes import on_final_error, refused_note  # noqa: PLC0415

                on_final_error(context, refused_note(exc))
            raise
        except FINAL as exc:
            # No retry can fix this: end the transaction now (the teardown repeats it, idempotently).
            began = self.began(context) if self.phase != "begin" else None
            txn = TxnRef.from_dict(began["txn"]) if began else None
            from .notes import failed_note, on_final_error  # noqa: PLC0415 - the run's note, first: abort may die

            if run is not None:
                on_final_error(context, failed_note(run, txn, exc))
            if txn is not None and run is not None:
                try:
                    run.abort(txn, table=began.get("table"))  # type: ignore[union-attr]
                except SinkRenamedError as again:  # the task fails with its own error (the message says what to run)
                    log.warning("could not end %s now: %s", txn.name, again)
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc

    def call(self, run: IntervalRun, context: Any) -> Any:
        raise NotImplementedError


def sinks_asked(context: Any, conf: dict[str, Any]) -> list[str] | None:
    """``conf.sinks``: the sinks whose exactly-once groups this run is for (the table page's reprocess and
    re-run-stale name the table's sink); the other groups of the DAG skip. None (no ``sinks``): every
    group runs - a trigger whose conf names no sinks (``airflow dags trigger``, ``airflow dags test``). A
    malformed value, or one naming no group of the DAG, fails the run at once."""
    sinks = conf.get("sinks")
    if sinks is None:
        return None
    sinks = [sinks] if isinstance(sinks, str) else sinks
    if not isinstance(sinks, list) or not all(isinstance(x, str) for x in sinks):
        raise AirflowFailException(f"conf sinks must be a list of sink names (e.g. [\"app_pv\"]), not {sinks!r}")
    dag = context.get("dag")
    groups = {t.config.sink for t in getattr(dag, "tasks", ()) if isinstance(t, BeginOperator)}
    if groups and not groups & set(sinks):
        raise AirflowFailException(f"conf sinks {sinks} names no exactly-once group of DAG {dag.dag_id}; its "
                                   f"sinks are {', '.join(sorted(groups))}")
    return sinks


def may_reprocess(context: Any, dag_id: str, asked: str = "reprocess") -> None:
    """A reprocess asked through the run's conf (REST API, CLI, the table page) needs the right the table
    page asks for: a triggering user who is an Airflow login must be allowed to edit the DAG
    (``owners.user_may_edit``, as ``eo_rollback`` checks; with the DAG's team, ``dag_run.team_name``, under
    multi_team). A run without a triggering user (scheduled, a backfill) is not asked by anyone and
    passes; so does one whose user is no login (``airflow dags test`` or ``airflow dags trigger``): it was
    made from a shell with the metadata DB at hand, which no API permission governs. (Airflow does not give a
    task the run's ``triggered_by``, which would tell a shell's run from a REST one; the user's name is what
    there is.) ``asked``: what the conf asks
    (``reprocess``, or the ``eo_action`` rollback / recover: the same right)."""
    from .owners import UNKNOWN_TEAM, known_user, user_may_edit

    dag_run = context.get("dag_run")
    by = getattr(dag_run, "triggering_user_name", None)
    team = getattr(dag_run, "team_name", UNKNOWN_TEAM)
    if by is not None and known_user(by) and not user_may_edit(by, dag_id, team):
        raise AirflowFailException(f"PermissionDeniedError: user {by!r} (who triggered this run with conf "
                                   f"{asked}) may not edit DAG {dag_id!r}: a {asked} changes what is live, "
                                   "ask someone with edit access to that DAG to trigger it")


class BeginOperator(PhaseOperator):
    """Setup task: recover, allocate the epoch, freeze the sources (``conf.reprocess`` re-freezes;
    ``conf.allow_shrinking`` lets that reprocess read fewer files than the committed version did). With
    ``conf.sinks`` only those sinks' groups run: this one is skipped (and so its tasks) if not among them.
    ``conf.eo_action`` rollback (``to_version``) or recover: this task carries that out instead and skips
    the rest of the group (:func:`exactly_once.airflow.rollback.carry_out`).

    In a backfill of a pipeline with ``max_batch > 1`` it first hosts, waits for or finds a batch that
    publishes its interval with others in one write job (:mod:`exactly_once.airflow.batching`), on the
    group's Spark settings ``batch_write``; a run whose interval a batch published finishes here."""

    phase = "begin"
    ui_color = "#d9f2d9"

    def __init__(self, *, batch_write: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch_write = batch_write

    def write_batch(self, batch_url: str, attempt: int) -> None:
        """The batch's write job (spark-submit or Spark Connect, as the write task would run it)."""
        from .write import write_batch  # noqa: PLC0415 - the Spark provider only where a batch is hosted

        if not self.batch_write:
            raise AirflowFailException(f"{self.task_id}: no Spark settings for a batch (build the group with "
                                       "exactly_once_group)")
        write_batch(self.batch_write, batch_url, attempt)

    def interrupt_batch(self, batch_id: str, scratch_url: str, attempts: int) -> list[str]:
        """Interrupt the batch's write queries still running on a Spark Connect server (write attempts
        1..``attempts``), before its attempts are ended: none may recreate their staging afterwards."""
        from .write import interrupt_batch_writes  # noqa: PLC0415

        return interrupt_batch_writes(self.batch_write, batch_id, scratch_url, attempts) if self.batch_write else []

    def after_batch_wait(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resumed by :class:`~exactly_once.airflow.triggers.BatchWaitTrigger` (``event``): decide again."""
        if event:
            log.info("%s: the wait for the batch is over (%s)", event.get("interval"), event.get("why"))
        self.resumed = True  # what the deferred part of this try published was dropped with its events
        return self.execute(context)

    def after_predecessor_wait(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resumed by :class:`~exactly_once.airflow.triggers.PredecessorWaitTrigger` (``event``): begin again."""
        if event:
            log.info("%s: the wait for the predecessor is over (%s)", event.get("interval"), event.get("why"))
        self.resumed = True
        return self.execute(context)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        """A wait (for a batch, for the predecessor) whose deferral timed out - no triggerer ended it: none
        runs, or what it waits for is still going - looks again instead of failing; every other resumption
        is Airflow's."""
        if next_method == TRIGGER_FAIL and (next_kwargs or {}).get("error") == TRIGGER_TIMEOUT:
            log.info("no word from the triggerer before the deferral's timeout: looking again")
            self.resumed = True
            return self.execute(context)
        return super().resume_execution(next_method, next_kwargs, context)

    def call(self, run: IntervalRun, context: Any) -> Any:
        from .rollback import action_of, carry_out  # noqa: PLC0415 - the ops layer only where asked

        conf = (context.get("dag_run") and context["dag_run"].conf) or {}
        ti = context["ti"]
        sinks = sinks_asked(context, conf)
        if sinks is not None and run.config.sink not in sinks:
            raise AirflowSkipException(f"this run is for {', '.join(sinks)} (conf sinks), not {run.config.sink}: "
                                       "this group does nothing")
        action = action_of(conf)
        if action:  # a rollback / recover asked of this table (the table page, eo, the REST API)
            may_reprocess(context, ti.dag_id, asked=f"eo_action {action}")
            return carry_out(self, run, context, action, conf)
        reprocess = bool(conf.get("reprocess"))
        if reprocess:
            may_reprocess(context, ti.dag_id)
        elif "reprocess" not in conf:
            refuse_lost_reprocess(context, run)
        run.finish_publishes()  # a commit that died after deciding: announced now, as this task finished it
        endings.record_finished(self, context, run, run.ended())  # before a batch notes it "published before"
        if batching.mode(self, context):  # finished at once, waiting, or a single run from here on
            batching.before_begin(self, run, context, reprocess=reprocess)
        try:
            return run.begin(refresh_sources=reprocess, allow_shrinking=bool(conf.get("allow_shrinking")),
                             run={"run_id": ti.run_id, "try": ti.try_number, "dag_id": ti.dag_id,
                                  "task_id": ti.task_id, **_asked(context, conf)})
        except PredecessorPendingError as exc:
            if predecessor_running(context, run.interval):
                self.wait_for_predecessor(exc, context, run)
            # nothing is running that could commit it: no retry can help, the run fails now
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc

    def wait_for_predecessor(self, exc: PredecessorPendingError, context: Any, run: IntervalRun) -> None:
        """The predecessor interval's DAG run is queued or running (a parallel backfill, a clear of an
        earlier interval): defer this task to :class:`~exactly_once.airflow.triggers.PredecessorWaitTrigger` -
        its worker slot is freed, no retry is used, nothing is written - until the predecessor is committed
        (the triggerer looks every ``EO_BATCH_WAIT_POLL_SECONDS``), and for at most
        ``EO_PREDECESSOR_POKE_SECONDS`` (then begin looks itself: a deployment without a triggerer goes on,
        only later); resuming no sooner than ``EO_RESUME_SETTLE_SECONDS``. After
        ``EO_PREDECESSOR_TIMEOUT_SECONDS`` since this try first waited (XCom ``WAIT_SINCE``: kept while the
        try defers, cleared by a retry or a clear) it fails at once with the error. Raises TaskDeferred.

        Not a reschedule: Airflow fails a rescheduled task as killed externally (a try spent) when the
        executor's event for its previous process reaches the scheduler after the task was queued again for
        the same try, which a poke shorter than a loaded worker's exit time makes likely (Airflow 3.1, 3.3)."""
        from .triggers import PredecessorWaitTrigger  # noqa: PLC0415

        poke, timeout = settings.predecessor_wait()
        settle = settings.resume_settle_seconds()
        ti, now = context["ti"], datetime.now(timezone.utc).timestamp()
        since = ti.xcom_pull(task_ids=ti.task_id, key=WAIT_SINCE)
        if not isinstance(since, (int, float)):
            since = now
            ti.xcom_push(key=WAIT_SINCE, value=now)
        waited = now - since
        if waited + poke > timeout:
            raise AirflowFailException(f"{type(exc).__name__}: {exc} (waited {waited:.0f} s for it; "
                                       "EO_PREDECESSOR_TIMEOUT_SECONDS sets how long)") from exc
        log.info("waiting for the predecessor interval (%.0f s so far, up to %.0f s; deferred to the triggerer): "
                 "%s", waited, timeout, exc)
        cfg = run.config
        trigger = PredecessorWaitTrigger(table=cfg.table_url, pipeline=cfg.pipeline, sink=cfg.sink,
                                         interval=run.interval.token, ends_at=run.interval.start.isoformat(),
                                         not_before=now + settle, poll=batching.poll_seconds(),
                                         table_format=cfg.table_format, conn_id=cfg.storage_conn_id)
        self.defer(trigger=trigger, method_name="after_predecessor_wait", timeout=timedelta(seconds=max(poke, settle)))


WAIT_SINCE = "eo_predecessor_wait_since"  # XCom of a begin: when this try first waited for its predecessor


def refuse_lost_reprocess(context: Any, run: IntervalRun) -> None:
    """A backfill's re-run of a committed interval (``airflow backfill create --reprocess-behavior completed``:
    Airflow clears the interval's run and makes it a backfill run) whose conf says nothing about reprocess,
    while files landed late for the interval: fail at once, publishing nothing, instead of replaying the
    frozen inputs and going green without the late files. Airflow 3.1 drops the backfill's
    ``--dag-run-conf`` for the runs it re-runs (3.2+ applies it), so a ``{"reprocess": true}`` asked there
    is lost. Conf ``{"reprocess": false}`` replays on purpose."""
    dag_run = context.get("dag_run")
    rerun = str(getattr(getattr(dag_run, "run_type", None), "value", getattr(dag_run, "run_type", None))) == "backfill"
    if not rerun or not (getattr(dag_run, "clear_number", 0) or 0) or run.sink.committed(run.interval) is None:
        return
    late = run.late_files()
    if late["new"] or late["changed"]:
        from .. import advice  # noqa: PLC0415

        raise AirflowFailException(
            f"this backfill re-runs {run.interval.label}, committed already, without conf reprocess, and "
            f"{len(late['new'])} new and {len(late['changed'])} changed input files landed since its version froze "
            "its inputs: a replay would leave them out. (Airflow 3.1's `airflow backfill create` drops "
            "--dag-run-conf for the runs it re-runs.) Nothing was published. To take them in: "
            f"{advice.reprocess(run.config.pipeline, redact(run.storage.url(run.sink.table)), run.interval.start.isoformat())}"
            '; to replay the frozen inputs anyway, re-run with conf {"reprocess": false}')


def predecessor_running(context: Any, interval: Interval) -> bool:
    """Is the DAG run of the interval that ends where ``interval`` starts queued or running? (Its begin
    may not have run yet: the runs of a backfill start together.) A finished one is not waited for."""
    try:
        prev = context["ti"].get_previous_dagrun()
    except Exception as exc:  # noqa: BLE001 - no answer from Airflow: do not wait, fail as before
        log.warning("could not read the previous DAG run (%s); not waiting for it", exc)
        return False
    if prev is None or prev.data_interval_end is None or prev.data_interval_end != interval.start:
        return False
    return str(getattr(prev.state, "value", prev.state)) in ("queued", "running")


class PreCommitOperator(PhaseOperator):
    """Seal the staged files in a manifest (PRE_COMMITTED)."""

    phase = "pre_commit"

    def call(self, run: IntervalRun, context: Any) -> Any:
        return run.pre_commit(self.txn(context))


class ReportLink(BaseOperatorLink):
    """"Data quality report" button on the validate task: the run's "Exactly-once report" tab, i.e. the
    plugin's report page of the run (its interval's values, limits, all suites) inside Airflow's UI."""

    name = "Data quality report"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        from ..quality.reports import run_report_view_url  # noqa: PLC0415

        return run_report_view_url(ti_key.dag_id, ti_key.run_id) if ti_key is not None else ""


class ValidateOperator(PhaseOperator):
    """The completeness check: Great Expectations on the staged data; failure = no publish."""

    phase = "validate"
    ui_color = "#fff3cd"
    operator_extra_links = (ReportLink(),)

    def call(self, run: IntervalRun, context: Any) -> Any:
        from ..quality.reports import report_link  # noqa: PLC0415 - only needed here

        try:
            result = run.validate(self.txn(context))
        except ValidationFailedError as exc:
            self.report_link = report_link(getattr(exc, "report", None))
            raise
        self.report_link = report_link(result.get("report"))
        return result


class CommitOperator(PhaseOperator):
    """Publish atomically and announce the table's Asset (through the group's AssetAlias outlet) - only
    when a version went live: a commit that found the interval already committed announces nothing.

    After a publish whose write ran once (its first try), the teardown has nothing left to do and is
    skipped - no task start (:meth:`teardown_idle`)."""

    phase = "commit"
    ui_color = "#cfe2ff"
    teardown_adopts = True  # a publish it finished and then died on its last try: the teardown announces it

    def __init__(self, *, write_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.write_task_id = write_task_id

    def call(self, run: IntervalRun, context: Any) -> Any:
        txn = self.txn(context)
        summary = run.commit(txn)
        if not summary.get("already_committed"):
            endings.finish_try(self, context, run)  # announced now: the skip below ends the task
            if teardown := self.teardown_idle(context, txn):
                context["ti"].xcom_push(key="return_value", value=summary)  # raising skips Airflow's push
                log.info("%s published by its write's first try: nothing left for %s, skipped",
                         summary.get("version"), ", ".join(teardown))
                raise DownstreamTasksSkipped(tasks=teardown)
        return summary

    def teardown_idle(self, context: Any, txn: TxnRef) -> list[str]:
        """The group's teardown task ids when it has nothing to do after this commit published ``txn``, else [].

        Contract: after a publish, the teardown only interrupts the Spark Connect queries that earlier,
        dead write tries may have left running (it neither deletes nor decides anything for a COMMITTED
        attempt). The write's XCom (``{"spark": ..., "attempt": try}``) says which try wrote: the first
        means no earlier try ever ran, and the successful one stopped its own session - so nothing is
        left. A write without that XCom (marked success, an older version) keeps the teardown. So does a
        Clear of ``begin`` or ``write`` while this commit ran: Airflow re-armed the teardown for the new
        attempt that begin opens - seen as begin or write no longer "success", or begin's XCom naming
        another attempt. (A Clear landing in the milliseconds between this check and the skip is not seen:
        that attempt is left to the interval's next run, ``eo recover`` or gc; docs/PROTOCOL.md.)"""
        ti = context["ti"]
        wrote = ti.xcom_pull(task_ids=self.write_task_id) if self.write_task_id else None
        if not isinstance(wrote, dict) or wrote.get("attempt") != 1:
            return []
        ids = [self.begin_task_id, self.write_task_id]
        try:
            states = endings.task_states(ti, ids)
        except Exception as exc:  # noqa: BLE001 - cannot tell (an Airflow without the query): keep the teardown
            log.info("%s: task states unavailable (%s: %s): the teardown runs", txn.name, type(exc).__name__, exc)
            return []
        began = self.began(context)
        if any(states.get(t) != "success" for t in ids) or \
                not began or TxnRef.from_dict(began["txn"]) != txn:
            log.info("%s: begin or write was cleared meanwhile (%s): the teardown runs", txn.name, states)
            return []
        return [t.task_id for t in self.downstream_list if isinstance(t, AbortOperator)]


class AbortOperator(PhaseOperator):
    """Teardown: abort an unfinished transaction and delete its staging (a no-op after commit).

    When ``begin`` handed no transaction on (it failed after opening one), the interval's unfinished
    epochs that this run's ``begin`` opened are found in the log and aborted - never another run's.
    It finishes a decided publish the commit task left, and announces a publish the commit task finished
    but did not succeed after (killed on its last try: Airflow records outlet events only with a success) -
    :func:`~exactly_once.airflow.endings.lost_by_others`; each once, through the one seam.
    """

    phase = "abort"
    ui_color = "#f8d7da"

    def __init__(self, *, spark_conn_id: str | None = None, write_attempts: int = 4, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.write_attempts = write_attempts

    def call(self, run: IntervalRun, context: Any) -> Any:
        began = self.began(context)
        run.finish_publishes()  # a commit that died after deciding: announced at the end of this task
        endings.announce_lost(self, context, run)  # a commit that died after publishing, on its last try
        if began:
            self.interrupt_writes(run, TxnRef.from_dict(began["txn"]))
        if not began:
            done = run.abort_unhanded(context["ti"].run_id)
            if batching.mode(self, context):  # a batch this run's begin hosted and gave up
                done += batching.end_hosted(self, run, context)
            return done or "nothing to abort"
        txn = self.txn(context)
        if run.renamed(txn):  # begun for a sink the configuration no longer names: end it where it lives
            return run.abort(txn, table=began.get("table"))
        discards = run.undecided_output(txn)  # a write nobody committed (a clear without Downstream, ...)
        state = run.abort(txn)
        if discards and state == "ABORTED":
            from .notes import discarded_note, on_final_error  # noqa: PLC0415

            on_final_error(context, discarded_note(run, txn))
        return state


    def interrupt_writes(self, run: IntervalRun, txn: TxnRef) -> None:
        """Over Spark Connect, a write client killed mid-write leaves its query running on the server:
        interrupt every write attempt's queries of ``txn`` before the staging dir is deleted."""
        from .write import interrupt_dead_writes, spark_remote  # noqa: PLC0415 - pyspark only if used

        remote = spark_remote(self.spark_conn_id)
        if remote is not None:
            interrupt_dead_writes(run, txn, remote, max(self.write_attempts, 1))


PHASE_OPERATORS: Sequence[type[PhaseOperator]] = (BeginOperator, PreCommitOperator, ValidateOperator,
                                                   CommitOperator, AbortOperator)
