"""``make backfill DAG=<dag_id> START=... END=...``: every interval of the DAG's schedule whose start lies in
[START, END] (a date means that day in the schedule's time zone - UTC unless its timetable names another - and
END takes in every interval starting on its date: ``START=2026-01-01 END=2026-01-31`` is 31 daily intervals),
run in order through Airflow on the embedded default, one ``airflow dags test`` run each (what
``make run-interval`` runs).

Batched where the pipeline opts in (``max_batch > 1``: ``pv_pipeline``, ``flights_hourly``): the intervals
left to do go in chunks of up to ``max_batch`` consecutive intervals, each ONE ``airflow dags test`` run of
the chunk's first interval with conf ``{"eo_batch": {"end": <the chunk's last start>}}`` - its begin task
runs the chunk as one batch (one Spark job, each interval its own transaction:
:mod:`exactly_once.airflow.batching`). An interval the batch did not commit (a failed gate, and for a
stateful pipeline the intervals after it) is then run on its own, in order, as below.

An interval whose every exactly-once sink already has a committed version is skipped (``--reprocess``
re-runs it as a reprocess: a new epoch that replaces the version). The run stops at the first interval
that does not commit - a stateful successor could not commit on it anyway - and prints how to resume.
Exit 0 only if every interval in the range is committed, judged from the transaction log, not from
Airflow's run state. The write phase uses ``EO_SPARK_REMOTE`` when set (a Spark Connect server: one JVM
for the whole backfill), else spark-submit per interval.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from exactly_once.ids import Interval
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from tools.localrun import failure_reason, load_dag, run_interval

out = print  # a console tool: its progress lines are its output


def parse_bound(value: str, timetable: Any = None, *, end: bool = False) -> datetime:
    """``YYYY-MM-DD`` or an ISO-8601 instant (UTC if no offset). A date is its midnight in the timetable's
    time zone (UTC without one); as END it takes in every interval that starts on that date (its last instant)."""
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"{'END' if end else 'START'}={value!r} is neither YYYY-MM-DD nor an ISO-8601 instant") from None
    if len(value.strip()) == 10 and timetable is not None:  # a date: the day in the schedule's time zone
        from exactly_once.protocol.timetables import local_midnight

        day = t.date() + timedelta(days=1 if end else 0)
        return local_midnight(timetable, day) - (timedelta(microseconds=1) if end else timedelta(0))
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def intervals_between(timetable: Any, start: datetime, last_start: datetime) -> list[Interval]:
    """The timetable's intervals whose start lies in [start, last_start], in order (asked of the timetable:
    exact across daylight-saving changes)."""
    from exactly_once.errors import LayoutError
    from exactly_once.protocol.timetables import intervals_between as between

    try:
        return between(timetable, start, last_start)
    except LayoutError as exc:
        raise SystemExit(str(exc)) from None


def sinks_of(dag: Any) -> list[TwoPhaseCommitSink]:
    from exactly_once.airflow.connections import storage_options
    from exactly_once.airflow.operators import BeginOperator

    configs = [t.config for t in dag.tasks if isinstance(t, BeginOperator)]
    if not configs:
        raise SystemExit(f"DAG {dag.dag_id} has no exactly-once group: nothing to backfill exactly once")
    return [c.sink_handle(storage_options(c.storage_conn_id)) for c in configs]


def committed(sinks: list[TwoPhaseCommitSink], iv: Interval) -> bool:
    return all(s.committed(iv) is not None for s in sinks)


def versions(sinks: list[TwoPhaseCommitSink], iv: Interval) -> list[str | None]:
    """The committed version of ``iv`` in each sink (None where none is)."""
    return [found[0].name if (found := s.committed(iv)) else None for s in sinks]


def batch_size(dag: Any) -> int:
    """How many intervals one batched run may take: the smallest ``max_batch`` of the DAG's groups."""
    from exactly_once.airflow.operators import BeginOperator

    return min((t.config.max_batch for t in dag.tasks if isinstance(t, BeginOperator)), default=1)


def chunks(ivs: list[Interval], size: int) -> list[list[Interval]]:
    """Runs of consecutive intervals (each starting where the one before ends), ``size`` at most."""
    out: list[list[Interval]] = []
    for iv in ivs:
        if out and len(out[-1]) < size and out[-1][-1].end == iv.start:
            out[-1].append(iv)
        else:
            out.append([iv])
    return out


def run_batches(dag_id: str, todo: list[Interval], size: int, *, reprocess: bool,
                allow_shrinking: bool) -> dict[Interval, Any]:
    """Each chunk of ``todo`` as one batched ``airflow dags test`` run (module docstring); prints what each
    did and returns the failed runs by their first interval. What a batch did not commit is left to the
    single runs (the chunk's first interval was already run alone by its failed run)."""
    failed = {}
    for chunk in chunks(todo, size):
        conf = {"eo_batch": {"end": chunk[-1].start.isoformat()}}
        out(f"  batch of {len(chunk)} intervals ({chunk[0].start.isoformat()} .. {chunk[-1].start.isoformat()}): "
            "one run through Airflow, one Spark job", flush=True)
        res = run_interval(dag_id, start=chunk[0].start, end=chunk[0].end, reprocess=reprocess,
                           allow_shrinking=allow_shrinking, conf=conf)
        out(f"    {'done' if res.ok else 'FAILED'} in {res.seconds:.1f} s; log: {res.log_path}"
            + ("" if res.ok else f"\n    {failure_reason(res.log_path)}"), flush=True)
        if not res.ok:
            failed[chunk[0]] = res
    return failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.backfill", description=__doc__.split("\n\n")[0])
    p.add_argument("--dag", required=True)
    p.add_argument("--start", required=True, help="YYYY-MM-DD or an ISO-8601 instant (UTC)")
    p.add_argument("--end", required=True, help="the last interval's start, inclusive (same forms)")
    p.add_argument("--reprocess", action="store_true", help="re-run committed intervals too (new epochs)")
    p.add_argument("--allow-shrinking", action="store_true", help="with --reprocess: accept fewer input files")
    a = p.parse_args(argv)
    parse_bound(a.start), parse_bound(a.end, end=True)  # refuses a malformed bound before anything is loaded
    if a.allow_shrinking and not a.reprocess:
        raise SystemExit("--allow-shrinking only applies to a reprocess: add --reprocess (REPROCESS=1)")
    dag = load_dag(a.dag)
    start, last = parse_bound(a.start, dag.timetable), parse_bound(a.end, dag.timetable, end=True)
    if last < start:
        raise SystemExit(f"END ({last.isoformat()}) is before START ({start.isoformat()})")
    ivs, sinks = intervals_between(dag.timetable, start, last), sinks_of(dag)
    if not ivs:
        raise SystemExit(f"{a.dag}'s schedule has no interval starting in [{start.isoformat()}, {last.isoformat()}]")
    size = batch_size(dag)
    spark = os.environ.get("EO_SPARK_REMOTE") or ("spark-submit per batch" if size > 1 else "spark-submit per interval")
    out(f"{a.dag}: backfilling {len(ivs)} intervals ({ivs[0].start.isoformat()} .. {ivs[-1].start.isoformat()}) "
        f"in order through Airflow{f', batched up to {size} per Spark job' if size > 1 else ''}; Spark: {spark}",
        flush=True)
    t0, ran, skipped = time.perf_counter(), 0, 0
    todo = [iv for iv in ivs if a.reprocess or not committed(sinks, iv)]
    batched: set[Interval] = set()
    tried: dict[Interval, Any] = {}
    if size > 1 and todo:
        before = {iv: versions(sinks, iv) for iv in todo}
        tried = run_batches(a.dag, todo, size, reprocess=a.reprocess, allow_shrinking=a.allow_shrinking)
        batched = {iv for iv in todo if committed(sinks, iv) and versions(sinks, iv) != before[iv]}
        ran += len(batched)
    for i, iv in enumerate(ivs, 1):
        label = f"[{i}/{len(ivs)}] {iv.start.isoformat()}"
        if iv in batched:
            out(f"  {label}: committed in a batch", flush=True)
            continue
        if committed(sinks, iv) and not a.reprocess:
            skipped += 1
            out(f"  {label}: already committed, skipped (--reprocess / REPROCESS=1 re-runs it)", flush=True)
            continue
        res = tried.get(iv) or run_interval(a.dag, start=iv.start, end=iv.end,
                                            reprocess=a.reprocess and committed(sinks, iv),
                                            allow_shrinking=a.allow_shrinking)
        ran += iv not in tried
        if not (res.ok and committed(sinks, iv)):
            why = failure_reason(res.log_path) if not res.ok else "the run ended without a committed version"
            later = ivs[i:]
            out(f"  {label}: FAILED after {res.seconds:.0f} s: {why}\n    full log: {res.log_path}\n"
                + stopped(a.dag, iv, a.end, len(later), sum(committed(sinks, x) for x in later)),
                file=sys.stderr)
            return 1
        out(f"  {label}: committed in {res.seconds:.1f} s", flush=True)
    took = timedelta(seconds=round(time.perf_counter() - t0))
    out(f"{a.dag}: all {len(ivs)} intervals committed ({ran} run, {skipped} already committed) in {took}")
    return 0


def stopped(dag: str, failed: Interval, end: str, later: int, committed_later: int) -> str:
    """What a backfill stopped by ``failed`` says of the ``later`` intervals after it - a batch publishes
    those a failed interval does not cost (a stateless pipeline's), so some may be committed - and how to
    resume (committed intervals are skipped)."""
    done = f" ({committed_later} later ones are committed: a batch published them, or an earlier run)" \
        if committed_later else ""
    return (f"  stopped: {later - committed_later} later intervals not run{done}. Fix the cause, then resume with\n"
            f"    make backfill DAG={dag} START={failed.start.isoformat()} END={end}")


if __name__ == "__main__":
    sys.exit(main())
