"""``eo`` - the command line: demo, run one interval, inspect and repair transactions.

    eo demo                         sample logs for several days, each day run through Airflow, a summary
    eo run-interval --dag pv_pipeline --date 2026-01-03 [--reprocess]
    eo status [--dag pv_pipeline]   every interval's epochs and states, from the transaction log
    eo recover [--dag pv_pipeline]  finish decided commits, abort stale attempts
    eo gc [--dag pv_pipeline]       delete what the log says is finished (staging, old versions)
    eo history <table-url>          every version of every interval: time, rows, verdict (history.py)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import date, timedelta
from typing import Any

from .config import data_root, reports_dir
from .ids import Interval
from .storage import redact
from .txlog import State

DEMO_DAYS = 5
DEMO_START = "2026-01-01"


def dag_config(dag_id: str) -> Any:
    """The PipelineConfig that ``dags/<dag_id>.py`` declares (the DAG file is the single source)."""
    import importlib.util

    from .config import PROJECT_ROOT, PipelineConfig

    path = PROJECT_ROOT / "dags" / f"{dag_id}.py"
    spec = importlib.util.spec_from_file_location(f"eo_dag_{dag_id}", path)
    if spec is None or not path.exists():
        raise SystemExit(f"no DAG file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    configs = [v for v in vars(module).values() if isinstance(v, PipelineConfig)]
    if len(configs) != 1:
        raise SystemExit(f"{path} must declare exactly one PipelineConfig")
    return configs[0]


def summary_rows(dag_id: str, days: list[str]) -> list[dict[str, Any]]:
    """Per day: input lines, duplicates dropped, malformed, pv total, committed version."""
    sink = dag_config(dag_id).sink_handle()
    rows = []
    for day in days:
        found = sink.committed(Interval.daily(day))
        if not found:
            rows.append({"day": day, "version": "NOT COMMITTED"})
            continue
        txn, st = found
        counts = st.records.get("pre_committed", {}).get("counts", {})
        rows.append({"day": day, "version": f"e{txn.epoch:06d}", "lines": counts.get("lines_read"),
                     "dups": counts.get("duplicates_dropped"), "malformed": counts.get("malformed"),
                     "pv": counts.get("page_views"), "apps": counts.get("rows_written")})
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


def cmd_demo(args: argparse.Namespace) -> int:
    from .localrun import run_interval
    from .sample_data import generate

    root = data_root()
    days = [(date.fromisoformat(args.start) + timedelta(days=i)).isoformat() for i in range(args.days)]
    print(f"exactly-once demo: pv_pipeline over {len(days)} days ({days[0]} .. {days[-1]})")
    print(f"  data root: {redact(root)}  (EO_DATA_ROOT)")
    info = generate(f"{root}/landing", days)
    print(f"  generated sample app logs: {len(info['files'])} files, {sum(info['lines'].values())} lines, incl. "
          f"{sum(info['duplicates'].values())} duplicates and {sum(info['malformed'].values())} malformed lines")
    print("  each day = one Airflow DAG run (airflow dags test): begin -> spark write -> pre_commit -> "
          "validate -> commit, abort as teardown")
    failed = 0
    for i, day in enumerate(days, 1):
        print(f"  [{i}/{len(days)}] {day} ... ", end="", flush=True)
        res = run_interval("pv_pipeline", day)
        print(f"{'ok' if res.ok else 'FAILED'} ({res.seconds:.0f} s)")
        if not res.ok:
            from .localrun import failure_reason

            failed += 1
            print(f"      reason: {failure_reason(res.log_path)}\n      full log: {res.log_path}")
            break
    print("\nSummary (from the transaction log):")
    print_table(summary_rows("pv_pipeline", days))
    print(f"\n  output table : {root}/warehouse/app_pv/dt=YYYY-MM-DD/ (Parquet: app_id, pv, uv, cumulative_pv)")
    print(f"  read it      : pyarrow.dataset.dataset('{root}/warehouse/app_pv', partitioning='hive')")
    print(f"  DQ reports   : {reports_dir()}/data_docs/index.html  (open in a browser)")
    print(f"  run summaries: {reports_dir()}/runs/pv_pipeline/")
    print(f"  task logs    : {root}/logs/pv_pipeline/")
    return 1 if failed else 0


def cmd_run_interval(args: argparse.Namespace) -> int:
    from .localrun import failure_reason, run_interval

    Interval.daily(args.date)  # refuses a malformed date before anything runs
    print(f"{args.dag}: running interval [{args.date}, +1 day) through Airflow"
          + (" (reprocess: re-freezing sources)" if args.reprocess else "") + " ...", flush=True)
    res = run_interval(args.dag, args.date, reprocess=args.reprocess)
    if res.ok:
        print(f"{args.dag} {args.date}: succeeded in {res.seconds:.0f} s (log: {res.log_path})")
        if args.dag == "pv_pipeline":
            print_table(summary_rows(args.dag, [args.date]))
        return 0
    print(f"{args.dag} {args.date}: FAILED after {res.seconds:.0f} s: {failure_reason(res.log_path)}\n"
          f"  full log: {res.log_path}", file=sys.stderr)
    return 1


def _sink(args: argparse.Namespace) -> Any:
    return dag_config(args.dag).sink_handle()


def cmd_status(args: argparse.Namespace) -> int:
    sink = _sink(args)
    for iv in sink.log.intervals():
        epochs = sink.status(iv)
        desc = ", ".join(f"e{e}:{st.state.value}{'' if st.published or st.state is not State.COMMITTED else '(publishing)'}"
                         for e, st in epochs.items())
        print(f"{iv.day}  {desc}")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    actions = _sink(args).recover(stale_after=args.stale_after)
    print("\n".join(actions) or "nothing to recover")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    from .maintenance import gc

    report = gc(_sink(args), min_age=args.min_age)
    for k, v in report.items():
        print(f"{k}: {len(v)}" + ("".join(f"\n  {x}" for x in v) if args.verbose else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the page-view demo end to end")
    d.add_argument("--days", type=int, default=DEMO_DAYS)
    d.add_argument("--start", default=DEMO_START)
    d.set_defaults(fn=cmd_demo)
    r = sub.add_parser("run-interval", help="one DAG run for the daily interval starting at --date")
    r.add_argument("--dag", required=True)
    r.add_argument("--date", required=True)
    r.add_argument("--reprocess", action="store_true", help="re-freeze the sources (take in late files)")
    r.set_defaults(fn=cmd_run_interval)
    for name, fn, helptext in (("status", cmd_status, "show the transaction log"),
                               ("recover", cmd_recover, "finish or abort unfinished transactions"),
                               ("gc", cmd_gc, "remove finished staging, old versions, compact the log")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--dag", default="pv_pipeline", help="the DAG (pipeline) whose sink to inspect")
        s.add_argument("--stale-after", type=float, default=6 * 3600, help="seconds before an open txn is stale")
        s.add_argument("--min-age", type=float, default=3600, help="gc: keep superseded versions this long")
        s.add_argument("-v", "--verbose", action="store_true")
        s.set_defaults(fn=fn)
    from .history import add_parser as add_history  # noqa: PLC0415 - the command lives in its module

    add_history(sub)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    code = args.fn(args)
    if args.cmd == "demo":
        print(f"\ndone in {time.perf_counter() - t0:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
