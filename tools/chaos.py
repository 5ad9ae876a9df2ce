"""Chaos run under the real Airflow scheduler: ``python -m tools.chaos --days 10 --kills 12 --seed 7``.

The command line of :class:`tools.chaos_run.ChaosRun` (LocalExecutor on one machine; module docstring
there) and, with ``--executor celery``, of :class:`tools.chaos_fleet.FleetChaosRun` (two Celery workers
sharing nothing but S3, the metadata DB and Redis). Prints the report's summary; exit 0 only with no
violation and every interval committed.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys

from tools.chaos_fleet import FleetChaosRun, reference_verify
from tools.chaos_run import PG, ChaosRun, check_table, classify
from tools.chaos_targets import TARGETS

__all__ = ["PG", "ChaosRun", "FleetChaosRun", "check_table", "classify", "main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__.split("\n\n")[0])
    for name, default in (("--days", 10), ("--kills", 12), ("--seed", 7), ("--events-per-day", 300)):
        p.add_argument(name, type=int, default=default)
    p.add_argument("--deadline", type=float, default=1500, help="seconds for the whole run")
    p.add_argument("--min-gap", type=float, default=20.0, help="minimum seconds between two kills")
    p.add_argument("--out", help="run dir (airflow home, data, logs, report); default: a new temp dir")
    p.add_argument("--spark", choices=("connect", "submit"), default="connect",
                   help="write phase: a client of one Spark Connect server the run starts, or spark-submit")
    p.add_argument("--no-infra", dest="infra", action="store_false",
                   help="kill only task processes, never the scheduler or the Spark Connect server")
    p.add_argument("--executor", choices=("local", "celery"), default="local",
                   help="local: the LocalExecutor on one machine; celery: two Celery workers sharing nothing but "
                        "S3, the metadata DB and Redis, data root on a loopback S3 server (tools.chaos_fleet)")
    p.add_argument("--write", choices=("oracle", "spark"), default="oracle",
                   help="with --executor celery: the write stand-in (no s3a here) computes with the pure-Python "
                        "oracle, or runs the real Spark job on a private local mirror")
    p.add_argument("--reference", action="store_true",
                   help="also compare what a reader of the target sees with the tests' pure-Python reference")
    p.add_argument("--target", choices=TARGETS, default="files",
                   help="what pv is published into: files (pv_pipeline), delta (pv_pipeline, "
                        "EO_PV_TABLE_FORMAT=delta) or postgres (pv_to_db into the run's own database)")
    p.add_argument("--batch", action="store_true",
                   help="the backfill takes pv_pipeline's batched path (one write job for all days)")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the components, drop the DB
    verify = reference_verify if a.reference else None
    common = {"days": a.days, "kills": a.kills, "seed": a.seed, "deadline": a.deadline, "out": a.out,
              "events_per_day": a.events_per_day, "min_gap": a.min_gap, "infra": a.infra, "target": a.target}
    if a.executor == "celery":
        if a.target != "files":
            p.error("--executor celery checks the files target on S3 only")
        report = FleetChaosRun(write=a.write, verify=verify, **common).run()
    else:
        report = ChaosRun(spark=a.spark, batch=a.batch, verify=verify, **common).run()
    print(json.dumps({k: report[k] for k in ("seed", "target", "kills_made", "kills_by_kind", "task_retries", "violations",
                      "dag_runs_succeeded", "intervals_committed", "violation_count", "wall_seconds")}, indent=2))
    return 0 if report["violation_count"] == 0 and report["intervals_committed"] == len(report["days"]) else 1


if __name__ == "__main__":
    sys.exit(main())
