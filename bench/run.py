"""``make bench`` / ``python -m bench``: the price of exactly-once, measured side by side.

Sections (``--only`` picks some; default all):

* ``write``    Spark write path: plain overwrite vs FileOutputCommitter v1 / v2 vs the two-phase commit
* ``commit``   ``commit()`` alone vs number of files, local FS and a loopback S3 server (moto_server)
* ``recovery`` recovering a transaction that crashed after pre_commit vs a full run
* ``airflow``  one pv_pipeline interval through Airflow (``airflow dags test``) vs a naive one-task DAG
* ``backfill`` a K-interval ``airflow backfill create`` of both DAGs under the real scheduler (PostgreSQL)
* ``batched``  backfill cost against intervals (a year, a month, one): batched vs per-interval vs naive
* ``validate`` the GX completeness gate on a staged pv output vs the write; GX import time
* ``dbload``   the database target's load vs a naive executemany loader vs COPY / LOAD DATA (PostgreSQL, MariaDB)
* ``limit``    the plain-Spark floor: the pv computation as one plain Spark job over the landed days, no Airflow

Results: ``bench/results/<timestamp>.json``; ``docs/BENCHMARKS.md`` (+ ``docs/img/commit_vs_files.png``)
is rendered from the newest result of each section (``--report-only`` re-renders without measuring).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, loadavg, machine, say  # noqa: E402

SECTIONS = ("write", "commit", "recovery", "airflow", "backfill", "batched", "validate", "dbload", "limit")
RESULTS = ROOT / "bench" / "results"


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, fewer repetitions (a few minutes)")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma list of {SECTIONS}")
    p.add_argument("--sizes", help="rows for the write/recovery sections (default 1000000,10000000)")
    p.add_argument("--recovery-sizes", help="rows for the recovery section (default: --sizes)")
    p.add_argument("--write-files", type=int, help="files per write (Spark partitions), default 8")
    p.add_argument("--files", help="file counts for the commit section (default 10,100,1000,10000)")
    p.add_argument("--s3-files", help="file counts for S3 in the commit section (default: --files)")
    p.add_argument("--reps", type=int, help="timed repetitions (default 3)")
    p.add_argument("--warmup", type=int, help="warm-up runs per variant (default 1)")
    p.add_argument("--intervals", type=int, help="Airflow intervals per DAG for the median (default 3)")
    p.add_argument("--airflow-warmup", type=int, default=1, help="untimed Airflow intervals per DAG first (0 or 1)")
    p.add_argument("--backfill", type=int,
                   help="intervals of the scheduler backfill over Spark Connect (default 100; quick 3)")
    p.add_argument("--backfill-submit", type=int,
                   help="intervals of the scheduler backfill over spark-submit (default 30; quick 3)")
    p.add_argument("--backfill-modes", default="connect,submit", help="backfill modes: connect, submit")
    p.add_argument("--backfill-dags", default="ours,naive",
                   help="backfill DAGs: ours, naive (ours alone is checked against the test oracle); the batched "
                        "section's year skips the naive DAG without naive")
    p.add_argument("--backfill-idle-sleep", type=float,
                   help="the scheduler's scheduler_idle_sleep_time in the backfill deployments (default: Airflow's 1 s)")
    p.add_argument("--backfill-batched", type=int,
                   help="batched section: days of the long backfill, ours batched vs naive (default 365; quick 3; 0 skips it)")
    p.add_argument("--backfill-month", type=int,
                   help="batched section: days of the short backfills, ours batched, ours per interval and naive "
                        "(default 30; quick 2; 0 skips them)")
    p.add_argument("--backfill-max-active-runs", type=int, default=10,
                   help="batched section: the batched backfills' --max-active-runs (default 10, Airflow's own - the "
                        "CLI's and the backfill dialog's: the other runs finish behind the host's gate; the naive and "
                        "per-interval backfills always run 1 at a time)")
    p.add_argument("--backfill-parallelism", type=int, default=4,
                   help="batched section: Airflow's [core] parallelism in its deployments, the LocalExecutor's "
                        "worker slots (default 4, Airflow's own 32; at 2 the batch's host holds one of the two "
                        "slots for the whole batch and the other runs queue for the other)")
    p.add_argument("--backfill-month-ways", default="batched,naive,per-interval,one-task",
                   help="batched section: the month's ways - batched, naive (deployment month), per-interval (six "
                        "tasks a run), one-task (EO_PV_ONE_TASK=1: a run's begin publishes its interval alone)")
    p.add_argument("--backfill-env", default="",
                   help="batched section: extra EO_* settings of its deployments, comma KEY=VALUE list "
                        "(e.g. EO_BATCH_POKE_SECONDS=300)")
    p.add_argument("--backfill-no-range", action="store_true",
                   help="batched section: skip the year as one range-triggered DAG run (its own deployment)")
    p.add_argument("--backfill-naive-first", action="store_true", help="backfill the naive DAG before ours")
    p.add_argument("--limit-days", type=int, help="limit section: days of the plain-Spark floor (default 365; quick 3)")
    p.add_argument("--spark-remote", help="limit section: the sc:// URL of a running Spark Connect server to use "
                                          "(default: start one)")
    p.add_argument("--events", type=int, help="events per interval for the airflow/backfill sections (default 20000)")
    p.add_argument("--validate-events", type=int, help="events for the validate section (default 500000)")
    p.add_argument("--db-sizes", help="rows for the dbload section (default 100000,1000000)")
    p.add_argument("--db-kinds", default="postgresql,mysql", help="databases for the dbload section")
    p.add_argument("--no-s3", action="store_true", help="commit section: local filesystem only")
    p.add_argument("--workdir", help="scratch dir (default: a temp dir, deleted unless --keep)")
    p.add_argument("--keep", action="store_true", help="keep the scratch dir")
    p.add_argument("--airflow-home", help="AIRFLOW_HOME for the Airflow section (default bench/results/airflow-home)")
    p.add_argument("--out", help="results JSON path (default bench/results/<timestamp>.json)")
    p.add_argument("--doc", default=str(ROOT / "docs" / "BENCHMARKS.md"), help="markdown report to (re)write")
    p.add_argument("--no-doc", action="store_true", help="do not touch docs/")
    p.add_argument("--report-only", action="store_true", help="re-render the doc from bench/results/*.json")
    a = p.parse_args(argv)
    q = a.quick
    a.sizes = _ints(a.sizes) if a.sizes else ([100_000, 1_000_000] if q else [1_000_000, 10_000_000])
    a.recovery_sizes = _ints(a.recovery_sizes) if a.recovery_sizes else a.sizes
    a.files = _ints(a.files) if a.files else ([10, 100, 1000] if q else [10, 100, 1000, 10000])
    a.s3_files = _ints(a.s3_files) if a.s3_files else a.files
    a.write_files = a.write_files or 8
    a.reps = a.reps if a.reps is not None else 3
    a.warmup = a.warmup if a.warmup is not None else 1
    a.intervals = a.intervals if a.intervals is not None else 3
    a.backfill = a.backfill if a.backfill is not None else (3 if q else 100)
    a.backfill_submit = a.backfill_submit if a.backfill_submit is not None else (3 if q else 30)
    a.backfill_batched = a.backfill_batched if a.backfill_batched is not None else (3 if q else 365)
    a.backfill_month = a.backfill_month if a.backfill_month is not None else (2 if q else 30)
    a.limit_days = a.limit_days if a.limit_days is not None else (3 if q else 365)
    a.events = a.events or 20_000
    a.validate_events = a.validate_events or (100_000 if q else 500_000)
    a.db_sizes = _ints(a.db_sizes) if a.db_sizes else ([100_000] if q else [100_000, 1_000_000])
    a.db_kinds = tuple(k.strip() for k in a.db_kinds.split(",") if k.strip())
    a.only = [s.strip() for s in a.only.split(",") if s.strip()]
    bad = set(a.only) - set(SECTIONS)
    if bad:
        p.error(f"unknown section(s) {sorted(bad)}; choose from {SECTIONS}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    from bench import report

    if a.report_only:
        report.render_from_results(RESULTS, Path(a.doc))
        return 0
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out_path = Path(a.out) if a.out else RESULTS / f"{stamp}.json"
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="eo-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": stamp, "argv": sys.argv[1:] if argv is None else argv, "machine": machine(),
        "config": {k: v for k, v in vars(a).items() if k not in ("doc", "out")}, "sections": {}}
    say(f"machine: {results['machine']['cores']} cores, {results['machine']['ram_gb']} GB, "
        f"load {results['machine']['loadavg_start']}; workdir {work}")
    t0 = time.perf_counter()

    def save() -> None:
        results["machine"]["loadavg_end"] = loadavg()
        results["seconds"] = round(time.perf_counter() - t0, 1)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")

    try:
        spark = None
        if {"write", "recovery", "validate"} & set(a.only):
            from bench.spark_sections import spark_session

            spark = spark_session()
        for section in a.only:
            s0 = time.perf_counter()
            if section == "write":
                from bench.spark_sections import write_path

                res = write_path(spark, work, a.sizes, a.write_files, a.reps, a.warmup)
            elif section == "commit":
                from bench.commit_files import commit_vs_files

                res = commit_vs_files(work, a.files, a.reps, a.warmup, s3=not a.no_s3, s3_counts=a.s3_files)
            elif section == "recovery":
                from bench.spark_sections import recovery

                res = recovery(spark, work, a.recovery_sizes, a.write_files, a.reps, a.warmup)
            elif section == "validate":
                from bench.spark_sections import validate_cost

                res = validate_cost(spark, work, a.validate_events, a.reps, a.warmup)
            elif section == "dbload":
                from bench.db_load import db_load

                res = db_load(work, a.db_sizes, a.reps, a.warmup, a.db_kinds)
            elif section == "backfill":
                from bench.backfill import backfill_compare

                n = {"connect": a.backfill, "submit": a.backfill_submit}
                res = backfill_compare(work, {m.strip(): n[m.strip()] for m in a.backfill_modes.split(",")},
                                       a.events, naive_first=a.backfill_naive_first,
                                       dags=tuple(d.strip() for d in a.backfill_dags.split(",") if d.strip()),
                                       idle_sleep=a.backfill_idle_sleep)
            elif section == "limit":
                from bench.limit import limit_section

                res = limit_section(work, a.limit_days, a.events, a.spark_remote)
            elif section == "batched":
                from bench.backfill_cost import batched_compare

                res = batched_compare(work, a.backfill_batched, a.backfill_month, a.events,
                                      idle_sleep=a.backfill_idle_sleep, max_active_runs=a.backfill_max_active_runs,
                                      range_run=not a.backfill_no_range, parallelism=a.backfill_parallelism,
                                      naive="naive" in [d.strip() for d in a.backfill_dags.split(",")],
                                      month_ways=tuple(w.strip() for w in a.backfill_month_ways.split(",") if w.strip()),
                                      env=dict(kv.strip().split("=", 1) for kv in a.backfill_env.split(",") if kv.strip()))
            else:
                from bench.airflow_cmp import airflow_compare

                home = Path(a.airflow_home) if a.airflow_home else RESULTS / "airflow-home"
                res = airflow_compare(work, a.intervals, a.events, home, a.airflow_warmup)
            res["section_seconds"] = round(time.perf_counter() - s0, 1)
            results["sections"][section] = res
            save()
        if spark is not None:
            spark.stop()
    finally:
        save()
        if not a.keep and not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    say(f"results: {out_path} ({results['seconds']:.0f}s)")
    print(report.tables(results))
    if not a.no_doc:
        report.render_from_results(RESULTS, Path(a.doc), extra=[(out_path, results)])
        say(f"report: {a.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
