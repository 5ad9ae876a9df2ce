"""Development commands of this checkout (``make demo``, ``make run-interval``, ``make sample``).

    python -m tools.dev demo [--days 5]
    python -m tools.dev run-interval --dag pv_pipeline --date 2026-01-03 [--reprocess]
    python -m tools.dev run-interval --dag flights_hourly --start 2013-01-01T05:00:00Z
    python -m tools.dev sample --dag flights_hourly [--start 2013-01-01 --days 1]

Each interval is one ``airflow dags test`` run (:mod:`tools.localrun`) with the project's own
``AIRFLOW_HOME``; data goes under ``EO_DATA_ROOT`` (default ``./data``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from datetime import date, timedelta
from typing import Any, Iterator

from exactly_once.ids import Interval, utc
from exactly_once.settings import data_root, reports_dir
from exactly_once.storage import redact

DEMO_DAYS = 5
DEMO_START = "2026-01-01"
SAMPLES = ("pv_pipeline", "flights_hourly")


def _sink() -> Any:
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    return TwoPhaseCommitSink.at(f"{data_root()}/warehouse/app_pv", pipeline="pv_pipeline", sink="app_pv")


def committed_day(day: str) -> bool:
    """Has pv_pipeline's interval of ``day`` a committed version (judged from the transaction log)?"""
    return _sink().committed(Interval.daily(day)) is not None


def summary_rows(days: list[str]) -> list[dict[str, Any]]:
    """pv_pipeline per day: input lines, duplicates dropped, malformed, pv total, committed version."""
    sink = _sink()
    rows = []
    for day in days:
        found = sink.committed(Interval.daily(day))
        if not found:
            rows.append({"day": day, "version": "NOT COMMITTED"})
            continue
        txn, st = found
        counts = st.records.get("pre_committed", {}).get("counts", {})
        rows.append({"day": day, "version": f"e{txn.epoch:06d}", "lines": counts.get("records_in"),
                     "dups": counts.get("records_deduplicated"), "malformed": counts.get("records_rejected"),
                     "pv": (counts.get("metrics") or {}).get("page_views"),
                     "apps": sum((counts.get("rows_written") or {}).values())})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("day", "lines in", "dups dropped", "malformed", "pv total", "apps", "committed version")
    keys = ("day", "lines", "dups", "malformed", "pv", "apps", "version")
    table = [head] + [tuple("-" if r.get(k) is None else str(r.get(k)) for k in keys) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for i, r in enumerate(table):
        print("  " + "  ".join(c.rjust(w) if 0 < j < 6 else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))


@contextlib.contextmanager
def demo_spark(mode: str) -> Iterator[tuple[str | None, str]]:
    """The Spark the demo's write phase uses: ``(remote URL or None, how it was chosen)``.

    ``mode == "submit"``: spark-submit per day. Otherwise ``EO_SPARK_REMOTE`` when set, else the
    ``make spark-connect`` server on 127.0.0.1:15002 (``EO_SPARK_CONNECT_PORT``) when it is up (left
    running), else a server started for the demo and stopped at the end of it."""
    from tools import spark_connect

    if mode == "submit":
        yield None, "spark-submit per day (local[*]), as asked (--spark submit)"
        return
    env = os.environ.get("EO_SPARK_REMOTE", "").strip()
    if env:
        yield env, "EO_SPARK_REMOTE"
        return
    server = spark_connect.Server(int(os.environ.get("EO_SPARK_CONNECT_PORT", spark_connect.PORT)))
    if spark_connect.accepts(server.port):
        yield server.url, "already running (make spark-connect), left running"
        return
    t0 = time.perf_counter()
    spark_connect.start(server)
    try:
        yield server.url, f"started for this demo in {time.perf_counter() - t0:.0f} s, stopped at the end"
    finally:
        spark_connect.stop(server)
        print(f"  Spark Connect server {server.url} stopped")


def cmd_demo(args: argparse.Namespace) -> int:
    from tools.localrun import airflow_env, ensure_db, failure_reason, run_interval
    from tools.sample_data import generate

    root = data_root()
    days = [(date.fromisoformat(args.start) + timedelta(days=i)).isoformat() for i in range(args.days)]
    print(f"exactly-once demo: pv_pipeline over {len(days)} days ({days[0]} .. {days[-1]})")
    print(f"  data root: {redact(root)}  (EO_DATA_ROOT)")
    info = generate(f"{root}/landing", days)
    print(f"  generated sample app logs: {len(info['files'])} files, {sum(info['lines'].values())} lines, incl. "
          f"{sum(info['duplicates'].values())} duplicates and {sum(info['malformed'].values())} malformed lines")
    print("  the days = ONE Airflow DAG run (airflow dags test) of a batch - a backfill's fast path: one Spark job "
          "for all days,\n  and each day still its own transaction: begin -> write -> pre_commit -> validate (GX) "
          "-> commit, abort as teardown")
    failed = 0
    migrate = threading.Thread(target=ensure_db, args=(airflow_env(),), daemon=True)
    migrate.start()  # the metadata DB is created while the Spark Connect server starts
    with demo_spark(args.spark) as (remote, how):
        migrate.join()
        print(f"  Spark: {'Spark Connect server ' + redact(remote) if remote else 'spark-submit'} ({how})")
        env = {"EO_SPARK_REMOTE": remote} if remote else None
        spark = f"Spark Connect {redact(remote)}" if remote else "spark-submit"
        todo = list(days)
        if len(todo) > 1:
            res = run_interval("pv_pipeline", todo[0], extra_env=env,
                               conf={"eo_batch": {"end": f"{todo[-1]}T00:00:00+00:00"}})
            print(f"  [1-{len(days)}/{len(days)}] {todo[0]} .. {todo[-1]} as one batch ... "
                  f"{'ok' if res.ok else 'FAILED'} in {res.seconds:.1f} s ({spark}, one job for {len(todo)} days)")
            if not res.ok:
                print(f"      reason: {failure_reason(res.log_path)}\n      full log: {res.log_path}")
            todo = [d for d in todo if not committed_day(d)]  # what the batch did not commit runs on its own
        for day in todo:
            i = days.index(day) + 1
            res = run_interval("pv_pipeline", day, extra_env=env)
            print(f"  [{i}/{len(days)}] {day} ... {'ok' if res.ok else 'FAILED'} in {res.seconds:.1f} s ({spark})")
            if not res.ok:
                failed += 1
                print(f"      reason: {failure_reason(res.log_path)}\n      full log: {res.log_path}")
                break
    print("\nSummary (from the transaction log):")
    print_table(summary_rows(days))
    print(f"\n  output table : {root}/warehouse/app_pv/dt=YYYY-MM-DD/ (Parquet: app_id, pv, uv, cumulative_pv)")
    print(f"  read it      : pyarrow.dataset.dataset('{root}/warehouse/app_pv', partitioning='hive')")
    print(f"  DQ reports   : {reports_dir()}/data_docs/index.html  (open in a browser)")
    print(f"  run summaries: {reports_dir()}/runs/pv_pipeline/")
    print(f"  task logs    : {root}/logs/pv_pipeline/")
    return 1 if failed else 0


def cmd_run_interval(args: argparse.Namespace) -> int:
    from tools.localrun import failure_reason, run_interval

    if bool(args.date) == bool(args.start):
        raise SystemExit("give --date YYYY-MM-DD (a daily interval) or --start <ISO-8601 UTC instant>")
    if args.date:
        Interval.daily(args.date)  # refuses a malformed date before anything runs
        what, kw = date_interval(args.dag, args.date)
    else:
        start = utc(args.start)
        what, kw = f"starting {start.isoformat()}", {"start": start}
    print(f"{args.dag}: running the interval {what} through Airflow"
          + (" (reprocess: re-freezing sources)" if args.reprocess else "") + " ...", flush=True)
    if args.allow_shrinking and not args.reprocess:
        raise SystemExit("--allow-shrinking only applies to a reprocess: add --reprocess (REPROCESS=1)")
    res = run_interval(args.dag, reprocess=args.reprocess, allow_shrinking=args.allow_shrinking, **kw)
    if res.ok:
        print(f"{args.dag} {res.day}: succeeded in {res.seconds:.0f} s (log: {res.log_path})")
        if args.dag == "pv_pipeline" and args.date:
            print_table(summary_rows([args.date]))
        return 0
    print(f"{args.dag} {res.day}: FAILED after {res.seconds:.0f} s: {failure_reason(res.log_path)}\n"
          f"  full log: {res.log_path}", file=sys.stderr)
    return 1


def date_interval(dag_id: str, day: str) -> tuple[str, dict[str, Any]]:
    """``DATE=`` of ``make run-interval``: the one interval that starts on ``day`` in the schedule's time
    zone (as ``make backfill`` reads a date) - on a UTC schedule the daily UTC interval starting at ``day``
    (the contract); refused (SystemExit, saying to give ``START=``) when the schedule has none or several
    intervals on that date. The UTC day is never taken on another time zone's schedule: west of UTC an
    interval starting at 00:00Z starts on the local day before (in winter only, for a local-time cron)."""
    from exactly_once.errors import LayoutError
    from exactly_once.protocol.timetables import interval_starting_at, intervals_of_day, local_midnight, zone
    from tools.localrun import load_dag

    timetable = load_dag(dag_id).timetable
    utc_day = Interval.daily(day)
    try:
        if local_midnight(timetable, utc_day.start.date()) == utc_day.start \
                and interval_starting_at(timetable, utc_day.start) == utc_day:
            return f"[{day}, +1 day)", {"day": day}
        ivs = intervals_of_day(timetable, date.fromisoformat(day))
    except LayoutError as exc:
        raise SystemExit(str(exc)) from None
    if len(ivs) != 1:
        starts = ", ".join(iv.start.isoformat() for iv in ivs[:3]) + (", ..." if len(ivs) > 3 else "")
        raise SystemExit(f"DATE={day} names a daily interval, but {dag_id}'s schedule has {len(ivs)} intervals "
                         f"starting on {day} ({zone(timetable)}){': ' + starts if ivs else ''}; give START=<the "
                         "interval's start, ISO-8601> instead")
    iv = ivs[0]
    return (f"{iv} (the interval of {day} in {zone(timetable)}, {iv.end - iv.start})",
            {"start": iv.start, "end": iv.end})


def cmd_sample(args: argparse.Namespace) -> int:
    root = data_root()
    if args.dag == "pv_pipeline":
        from tools.sample_data import generate

        start = args.start or DEMO_START
        days = [(date.fromisoformat(start) + timedelta(days=i)).isoformat() for i in range(args.days or DEMO_DAYS)]
        info = generate(f"{root}/landing", days)
        print(f"pv_pipeline: {len(info['files'])} files under {redact(root)}/landing/app_logs ({days[0]} .. {days[-1]})")
        return 0
    if args.dag == "flights_hourly":
        from tools.flights_sample import write_landing

        info = write_landing(f"{root}/landing", start=args.start, days=args.days)
        print(f"flights_hourly: {info['files']} hourly CSV files, {info['rows']} flights under "
              f"{redact(root)}/landing/flights ({info['first']} .. {info['last']})")
        return 0
    raise SystemExit(f"no sample generator for DAG {args.dag!r}; known: {', '.join(SAMPLES)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.dev", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the page-view demo end to end")
    d.add_argument("--days", type=int, default=DEMO_DAYS)
    d.add_argument("--start", default=DEMO_START)
    d.add_argument("--spark", choices=("connect", "submit"), default="connect",
                   help="connect (default): a Spark Connect server (EO_SPARK_REMOTE, the running `make "
                        "spark-connect` one, or one started for the demo); submit: spark-submit per day")
    d.set_defaults(fn=cmd_demo)
    r = sub.add_parser("run-interval", help="one DAG run for one interval of the DAG's schedule")
    r.add_argument("--dag", required=True)
    r.add_argument("--date", help="YYYY-MM-DD: the daily interval starting at that midnight (UTC), or on a daily "
                                  "schedule in another time zone the interval starting on that local date")
    r.add_argument("--start", help="ISO-8601 UTC instant: the interval of the DAG's schedule starting there")
    r.add_argument("--reprocess", action="store_true", help="re-freeze the sources (take in late files)")
    r.add_argument("--allow-shrinking", action="store_true",
                   help="let the reprocess read fewer input files than the committed version did")
    r.set_defaults(fn=cmd_run_interval)
    s = sub.add_parser("sample", help="write an example DAG's landing zone under EO_DATA_ROOT")
    s.add_argument("--dag", required=True, choices=SAMPLES)
    s.add_argument("--start", help="first day (YYYY-MM-DD)")
    s.add_argument("--days", type=int, help="number of days")
    s.set_defaults(fn=cmd_sample)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    code = args.fn(args)
    if args.cmd == "demo":
        print(f"\ndone in {time.perf_counter() - t0:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
