"""Batched backfills in Airflow: many DAG runs, one write job, each interval still its own transaction.

A run of a pipeline with ``max_batch > 1`` (:class:`~exactly_once.protocol.config.PipelineConfig`) batches when it
is a **backfill run** (``run_type`` backfill: Airflow's backfill dialog, ``airflow backfill create``) or
when its conf asks for a **range**: ``{"eo_batch": {"end": "<start of the last interval, ISO-8601>"}}``
(a trigger through the REST API or ``airflow dags trigger``). Its ``begin`` task then, before beginning its own interval:

1. its interval is committed already (a backfill skips it; ``conf.reprocess`` replaces it) - the run
   finishes at once, also while the batch that committed it is still running (it commits interval by
   interval: the runs of a backfill with ``--max-active-runs`` above 1 finish behind its gate);
2. a live batch holds its interval - it waits: the task is deferred to Airflow's triggerer (its worker slot
   freed, no task start while it waits), which looks every ``EO_BATCH_WAIT_POLL_SECONDS`` (default 1) and
   resumes it once the batch published the interval or is over, no sooner than ``EO_RESUME_SETTLE_SECONDS``
   after it deferred (:func:`wait_over`);
3. otherwise it **hosts** a batch: it claims (write-once records, :func:`exactly_once.protocol.batch.claim_intervals`)
   its interval and the following ones - those with a DAG run of their own queued or running (a
   backfill), or up to the range's end - at most ``max_batch``, and runs :class:`~exactly_once.protocol.batch.BatchRun`
   over them: every attempt begun, ONE write job (``spark-submit <job> --batch <url>`` on the group's
   Spark connection, or over Spark Connect), every interval pre-committed, validated and committed in
   order, under the batch's heartbeat. An interval the batch could not finish (a failed gate, and for a
   stateful pipeline the intervals after it) is left to its own run.

Then, if the run's interval was published by a batch, the run **finishes at once**: the table's asset
event and the run's note ("published e1 in batch ...") are recorded by ``begin`` and the group's other
tasks are skipped by the scheduler - no worker process for them. Otherwise the run goes on as a single
run of its interval (its own write, gate, report), which is also how a failed interval is retried,
cleared or reprocessed (README, "Backfills").
"""
from __future__ import annotations

import hashlib
import logging
import os
import time
from datetime import timedelta
from typing import Any, Sequence

from .. import settings
from ..protocol import liveness
from ..protocol.batch import (BatchRun, Outcome, batch_live, batch_of, claim_intervals, holder, hosted_intervals,
                              is_done, mark_done)
from ..errors import FINAL, BatchPendingError, ExactlyOnceError
from ..ids import Interval, utc
from ..protocol.timetables import timetable_intervals
from ..protocol.pipeline import IntervalRun
from .asked import asked
from .compat import DownstreamTasksSkipped
from .endings import run_summary, sign

log = logging.getLogger(__name__)
ACTIVE = ["queued", "running"]


def poke_seconds() -> float:
    """``EO_BATCH_POKE_SECONDS``: the longest a waiting run's begin stays deferred before it looks again itself
    (the triggerer's look ends the wait first; without a triggerer this is how often the run looks). Default
    :func:`stale_seconds`: the trigger fires by then anyway unless the batch is alive, so a long batch's write
    is not cut short by a task start and a new deferral per minute."""
    return float(os.environ.get("EO_BATCH_POKE_SECONDS") or stale_seconds())


def poll_seconds() -> float:
    """How often the triggerer looks whether a waited-for interval is committed or its batch over."""
    return float(os.environ.get("EO_BATCH_WAIT_POLL_SECONDS") or 1)


def stale_seconds() -> float:
    """How long a batch may go without a heartbeat before the runs it holds stop waiting for it."""
    return float(os.environ.get("EO_BATCH_STALE_SECONDS") or 300)


def mode(operator: Any, context: Any) -> str | None:
    """``backfill``, ``range`` (conf ``eo_batch``), ``single`` (a batch of one: ``one_task``) or None: does this
    run batch?"""
    if operator.config.batched:
        dag_run = context.get("dag_run")
        conf = (dag_run and dag_run.conf) or {}
        if isinstance(conf.get("eo_batch"), dict):
            return "range"
        run_type = str(getattr(getattr(dag_run, "run_type", None), "value", getattr(dag_run, "run_type", "")))
        if run_type == "backfill":
            return "backfill"
    return "single" if operator.config.one_task else None


def batch_id(context: Any, interval: Interval) -> str:
    """The id of the batch this run hosts: the same for every try of its begin task, new after a clear."""
    dag_run = context["dag_run"]
    digest = hashlib.sha1(f"{dag_run.run_id}#{getattr(dag_run, 'clear_number', 0)}".encode()).hexdigest()[:10]
    return f"b-{interval.token}-{digest}"


def before_begin(operator: Any, run: IntervalRun, context: Any, *, reprocess: bool) -> None:
    """Cases 1-3 of the module docstring. Returns when the run goes on as a single run; raises
    DownstreamTasksSkipped when it finished at once, Airflow's TaskDeferred while it waits. A range run
    whose own interval is committed already still hosts the rest of its range first."""
    own, sink = run.interval, run.sink
    bid, how = batch_id(context, own), mode(operator, context)
    alone = bid if how == "range" else None  # a range run: only its own batch's versions
    mine = bid if how in ("range", "single") else None  # a range or a batch of one: a new request of its own
    for looks in (True, True, False):  # a wait found over before deferring decides again (bounded: then it defers)
        held = holder(sink, own)
        by = held[1]["batch"] if held is not None else None
        if by == bid and not is_done(sink, bid):  # a retry of this run's host resumes its batch first
            break
        live = by is not None and by != bid and batch_live(sink, by, stale_seconds())
        now = sink.committed(own)  # the one look the decision and the wait's "seen" are made of
        found = published(run, held, reprocess, own=mine, now=now)
        if found is not None and mine is not None and batch_of(found[1]) != bid:
            if how == "single":  # a batch of one is a single run: its clear (or a new run) replays the frozen
                return  # inputs as a new version, through the phase tasks - as without one_task
            found = None  # a range is a request for its whole range: committed before, its first day is skipped
        if found is not None and (not live or batch_of(found[1]) == by):  # a live batch commits interval
            finish_at_once(operator, run, context, found)  # by interval: no need to wait for its end
        seen = now[0].name if now is not None and now[1].published else None
        if not (live and wait_over(operator, run, by, seen, look=looks)):  # type: ignore[arg-type]
            break
    if by is not None and by != bid and alone is None and failed_in(run, by):
        return  # the batch tried it and it failed: as a single run it shows why (gate, report) and retries
    # (a range run is a new request for its whole range - a resume after a fix: it batches again)
    if run.config.stateful:
        try:
            run.predecessor()
        except ExactlyOnceError:
            return  # the single begin waits for the predecessor (or fails) as it always does
    intervals = candidates(operator, run, context)
    host(operator, run, context, intervals, reprocess=reprocess)
    found = published(run, holder(sink, own), reprocess, own=mine)
    if found is not None:
        finish_at_once(operator, run, context, found)


def wait_over(operator: Any, run: IntervalRun, by: str, seen: str | None, look: bool = True) -> bool:
    """Case 2: defer the run's ``begin`` to :class:`~exactly_once.airflow.triggers.BatchWaitTrigger` - its worker
    slot is freed, and the triggerer looks every ``EO_BATCH_WAIT_POLL_SECONDS`` - until the interval is published
    anew (another version than ``seen``, the one the run decided on) or batch ``by`` is over; then begin resumes
    and decides again. Raises Airflow's TaskDeferred; returns True, without deferring, if the trigger's own look
    (with ``look``) says the wait is over already (the batch published the day since the run looked): decide
    again now - no settle time on that path.

    The trigger fires no sooner than ``EO_RESUME_SETTLE_SECONDS`` after deferring: Airflow's scheduler fails a
    task as killed externally when the executor's event for the process that deferred arrives after the task
    was queued again for the same try (see :class:`~exactly_once.airflow.triggers.PredecessorWaitTrigger`). The
    deferral times out after :func:`poke_seconds` (never sooner than the settle time): begin then looks again
    itself - and defers again while the batch is live - so a deployment without a triggerer still goes on."""
    from .triggers import BatchWaitTrigger  # noqa: PLC0415

    cfg, settle = run.config, settings.resume_settle_seconds()
    args = dict(table=cfg.table_url, pipeline=cfg.pipeline, sink=cfg.sink, interval=run.interval.token, batch=by,
                seen=seen, stale_after=stale_seconds(), poll=poll_seconds(), table_format=cfg.table_format,
                conn_id=cfg.storage_conn_id)
    over = BatchWaitTrigger(**args).look(run.sink) if look else None  # type: ignore[arg-type]
    if over is not None:
        log.info("%s: %s since the run looked: deciding again", run.interval, over["why"])
        return True
    log.info("%s is in batch %s, still running: waiting for it (deferred to the triggerer)", run.interval, by)
    trigger = BatchWaitTrigger(**args, not_before=time.time() + settle)  # type: ignore[arg-type]
    operator.defer(trigger=trigger, method_name=RESUME, timeout=timedelta(seconds=max(poke_seconds(), settle)))
    return False  # not reached: defer raises


RESUME = "after_batch_wait"  # the BeginOperator method a waiting run resumes in


def published(run: IntervalRun, held: tuple[int, dict[str, Any]] | None, reprocess: bool,
              own: str | None = None, now: Any = ...) -> tuple[Any, Any] | None:
    """The run's interval's committed ``(txn, status)`` if the run is done with it: committed (a backfill
    skips it), or - for a reprocess - committed by the batch that holds it, from the inputs as they are now
    (with ``own``, a run's own batch: only by that batch). Else None. (The holder may be the batch of an
    EARLIER backfill, done: its claim stays the newest until this backfill's host claims the interval, and
    runs of a backfill start together - a run that looks first must not take that old version for its
    reprocess when files landed or changed since. Inputs unchanged, it cannot tell: see the README,
    "Backfills".) ``now``: the interval's committed ``(txn, status)`` if the caller looked already."""
    found = run.sink.committed(run.interval) if now is ... else now
    if found is None or not found[1].published:
        return None
    if not reprocess:
        return found
    by = batch_of(found[1])
    if own is not None:
        return found if by == own else None
    ok = held is not None and by == held[1].get("batch") and not any(run.late_files().values())
    return found if ok else None


def failed_in(run: IntervalRun, bid: str) -> bool:
    """Did batch ``bid`` try the run's interval and abort it?"""
    mine = [st for st in run.sink.status(run.interval).values() if batch_of(st) == bid]
    return bool(mine) and mine[-1].state.value == "ABORTED"


def candidates(operator: Any, run: IntervalRun, context: Any) -> list[Interval]:
    """The intervals a batch hosted by this run may take: its own, then the next ones of the DAG's
    schedule that have a run waiting (backfill) or start before the range's end, ``max_batch`` at most."""
    if mode(operator, context) == "single":
        return [run.interval]
    limit = run.config.max_batch
    ahead = timetable_intervals(operator.dag.timetable, run.interval.start, limit)
    ahead = [iv for iv in ahead if iv.start >= run.interval.start][:limit]
    if mode(operator, context) == "range":
        end = utc(context["dag_run"].conf["eo_batch"]["end"])
        return own_runs_ahead(operator, context, [iv for iv in ahead if iv.start <= end] or [run.interval])
    if context["dag_run"].logical_date != run.interval.start:
        return [run.interval]  # a timetable whose runs are not keyed by their interval's start
    dates = [iv.start for iv in ahead]  # the longest prefix whose every interval has a queued or running DAG run
    return ahead[:longest_prefix(len(ahead), lambda k: others_active(operator, context, dates[1:k]) == k - 1)]


def longest_prefix(n: int, holds: Any) -> int:
    """The largest k in 1..n for which ``holds(k)`` (true for 1, and for every k below one it holds for):
    one question when it holds for all n, else a binary search - questions to Airflow, each an API call."""
    if n <= 1 or holds(n):
        return n
    lo, hi = 1, n - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid - 1)
    return lo


def own_runs_ahead(operator: Any, context: Any, intervals: list[Interval]) -> list[Interval]:
    """A range's intervals up to the first one (after its own) that has a queued or running DAG run of its own:
    that run decides for its interval itself (it may be writing a single attempt, which the range's begin would
    fence, leaving the range's version unannounced). One question to Airflow for the usual range with none."""
    starts = [iv.start for iv in intervals]
    try:
        k = longest_prefix(len(intervals), lambda k: not others_active(operator, context, starts[1:k]))
    except Exception as exc:  # noqa: BLE001 - an Airflow that cannot say: the range alone
        log.warning("could not look up the DAG runs of the range's intervals (%s: %s): batching only %s",
                    type(exc).__name__, exc, intervals[0])
        return intervals[:1]
    if k < len(intervals):
        log.info("the range stops before %s: it has a DAG run of its own", intervals[k])
    return intervals[:k]


def host(operator: Any, run: IntervalRun, context: Any, intervals: Sequence[Interval], *, reprocess: bool) -> list[Outcome]:
    """Claim ``intervals`` (a prefix of them) and run the batch over them; its outcomes."""
    sink, ti = run.sink, context["ti"]
    bid = batch_id(context, run.interval)
    sink.storage.remove_tree(sink.storage.join(sink.home, "_batches", bid, "_done"))  # a retry: live again
    record = {"host": {"dag_id": ti.dag_id, "run_id": ti.run_id, "try": ti.try_number}}
    # a retry resumes every interval its batch set out to claim, also those whose own runs are over now
    intervals = sorted({*intervals, *hosted_intervals(sink, bid)}, key=lambda iv: iv.start)
    claimed = claim_intervals(sink, intervals, bid, record, stale_after=stale_seconds())
    if not claimed:
        return []
    conf = (context["dag_run"].conf or {})
    batch = BatchRun(run.config, claimed, batch_id=bid, storage_options=run.options, reprocess=reprocess,
                     allow_shrinking=bool(conf.get("allow_shrinking")),
                     run={"run_id": ti.run_id, "try": ti.try_number, "dag_id": ti.dag_id, "task_id": ti.task_id,
                          **asked(context, conf)})  # who asked, what, why: as the begin task records them
    sign(context, batch.sink, *(r.sink for r in batch.runs.values()))
    log.info("hosting batch %s: %d intervals (%s .. %s)", bid, len(claimed), claimed[0], claimed[-1])
    beat = liveness.Heartbeat(sink.storage, sink.storage.join(sink.home, "_batches", bid, "_heartbeat"))
    try:
        with beat:
            outcomes = batch.run_all(lambda url: operator.write_batch(url, int(ti.try_number or 1)))
        pending = [o for o in outcomes if o.status == "pending"]
        if pending:  # a retry of this task resumes them (the claims stay ours meanwhile)
            raise BatchPendingError(f"batch {bid}: {len(pending)} intervals not finished, e.g. "
                                    f"{pending[0].interval}: {pending[0].detail}; the retry resumes them")
    except BaseException as exc:  # also Airflow's timeout and termination (BaseExceptions) on the last try
        if not retried(operator, ti, exc):
            release(operator, batch, exc, int(ti.try_number or 1))
        raise
    mark_done(sink, bid)
    announce_batch(operator, context, run.interval, batch, outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    log.info("batch %s: %d committed, %d finished, %d skipped, %d failed%s", bid,
             sum(o.status == "committed" for o in outcomes), sum(o.status == "finished" for o in outcomes),
             sum(o.status == "skipped" for o in outcomes), len(failed),
             f" (first: {failed[0].interval}: {failed[0].detail})" if failed else "")
    return outcomes


def others_active(operator: Any, context: Any, starts: list[Any]) -> int:
    """How many queued or running DAG runs of the DAG, other than this run, have one of ``starts`` as their
    logical date. (A manual run covering ``[d, d+1)`` has the logical date d+1 under a data-interval
    timetable - a range run: it must not count as the next interval's own run.)"""
    if not starts:
        return 0
    n = context["ti"].get_dr_count(dag_id=operator.dag_id, logical_dates=starts, states=ACTIVE)
    return n - (getattr(context.get("dag_run"), "logical_date", None) in starts)


def announce_batch(operator: Any, context: Any, own: Interval, batch: BatchRun,
                   outcomes: Sequence[Outcome] = ()) -> None:
    """Every publish ``batch`` finished goes through the one seam (:func:`~exactly_once.airflow.endings.ended`),
    except this batch's versions of intervals that have a queued or running DAG run of their own (a
    backfill's): that run finishes at once on its version and announces it - one asset event per publish
    (whichever claims it first; a run created after this look finds it claimed)."""
    from .endings import ended, finished_before  # noqa: PLC0415

    done = batch.ended()
    done += [(r, summary) for iv, r in batch.runs.items() if iv != own for summary in finished_before(operator, r, context)]
    mine = {o.version for o in outcomes if o.status == "committed" and o.summary is not None}
    theirs = [r.interval for r, s in done if s.get("version") in mine and r.interval != own]
    left = set(with_own_runs(operator, context, theirs))
    for run, summary in done:
        if not (summary.get("version") in mine and run.interval in left):
            ended(operator, context, run, summary, finished=True)


def with_own_runs(operator: Any, context: Any, intervals: list[Interval]) -> list[Interval]:
    """Those of ``intervals`` with a queued or running DAG run of their own (other than this run): each
    announces its interval's batch version itself. One question to Airflow when none has (a range)."""
    try:
        if not intervals or not others_active(operator, context, [iv.start for iv in intervals]):
            return []
        return [iv for iv in intervals if others_active(operator, context, [iv.start])]
    except Exception as exc:  # noqa: BLE001 - an Airflow that cannot say: the batch announces them (claimed once)
        log.warning("could not look up the DAG runs of the batch's intervals (%s: %s): announcing all of them",
                    type(exc).__name__, exc)
        return []


def retried(operator: Any, ti: Any, exc: BaseException) -> bool:
    """Will Airflow run this task again after ``exc``? (Not after its last try, nor after an error that
    fails the task at once.)"""
    from .compat import AirflowFailException  # noqa: PLC0415

    if isinstance(exc, (AirflowFailException, *FINAL)):
        return False
    max_tries = getattr(ti, "max_tries", None)  # Airflow's own count: a clear of the task adds its retries
    if not isinstance(max_tries, int) or isinstance(max_tries, bool) or max_tries < 0:
        max_tries = int(getattr(operator, "retries", 0) or 0)
    return int(ti.try_number or 1) <= max_tries


def release(operator: Any, batch: BatchRun, exc: BaseException, attempts: int) -> None:
    """The host's last try failed: interrupt the batch's write queries still running on a Spark Connect
    server, then end its unfinished attempts and mark it done, so the runs that wait on its intervals go on
    alone now - not after ``EO_BATCH_STALE_SECONDS``. (The run's teardown does not run after a failed
    setup: Airflow marks it upstream_failed.) If any step fails, the batch goes stale as after a crash."""
    try:
        interrupt = getattr(operator, "interrupt_batch", None)
        if interrupt is not None:  # a live query could recreate the staging of the attempts ended below
            interrupt(batch.batch_id, batch.storage.url(batch.storage.join(batch.dir, "scratch")), attempts)
        ended = batch.abort()
        mark_done(batch.sink, batch.batch_id)
    except Exception as again:  # noqa: BLE001 - the claims then go stale, as after a crash
        log.warning("batch %s: could not release its intervals after %s: %s: %s", batch.batch_id,
                    type(exc).__name__, type(again).__name__, again)
        return
    log.warning("batch %s failed on the host's last try (%s: %s); its %d unfinished attempts were ended and "
                "its intervals released: their own runs go on alone", batch.batch_id, type(exc).__name__, exc,
                len(ended))


def finish_at_once(operator: Any, run: IntervalRun, context: Any, found: tuple[Any, Any]) -> None:
    """The run's interval is published as ``found`` (the committed ``(txn, status)`` judged, announced as
    is): it ends through the one seam (a batch's version is announced by this run unless its host did),
    then the group's other tasks are skipped."""
    from .endings import ended, leave_note, note  # noqa: PLC0415

    txn, st = found
    ended(operator, context, run, run_summary(run, txn, st), finished=False)
    leave_note(operator, context)
    prefix = operator.task_id.rsplit(".", 1)[0] + "." if "." in operator.task_id else ""
    group = [t.task_id for t in operator.get_flat_relatives(upstream=False)
             if t.task_id.startswith(prefix) and t.task_id != operator.task_id]
    log.info("%s: %s; skipping %s", run.interval, note(operator, context), ", ".join(group))
    raise DownstreamTasksSkipped(tasks=group)


def end_hosted(operator: Any, run: IntervalRun, context: Any) -> list[str]:
    """Teardown of a run whose begin hosted a batch and gave up: end the batch's unfinished attempts and
    release its claims (the runs waiting on it go on alone)."""
    bid = batch_id(context, run.interval)
    intervals = hosted_intervals(run.sink, bid)
    if not intervals:
        return []
    batch = BatchRun(run.config, intervals, batch_id=bid, storage_options=run.options)
    sign(context, batch.sink, *(r.sink for r in batch.runs.values()))
    done = batch.abort()
    mark_done(run.sink, bid)
    announce_batch(operator, context, run.interval, batch)  # decided commits it rolled forward
    return done

