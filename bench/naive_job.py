"""The naive baseline's Spark application: the SAME pv job (``spark_jobs/pv_counts.py``), submitted by one
SparkSubmitOperator, writing straight to its final location - no begin, no staging, no manifest, no
validation, no commit protocol. It lists its own inputs and reads the previous day's state if present.

    spark-submit bench/naive_job.py --landing <root>/landing/app_logs --day YYYY-MM-DD --target <dir>

Output: ``<target>/<day>/data/dt=<day>/part-*.parquet`` (+ ``_state``, ``_counts.json`` beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "plugins", ROOT / "spark_jobs"):
    sys.path.insert(0, str(p))

import pv_counts  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from tools.sample_data import pv_spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--landing", required=True)
    ap.add_argument("--day", required=True)
    ap.add_argument("--target", required=True)
    a = ap.parse_args()
    prev = os.path.join(a.target, (date.fromisoformat(a.day) - timedelta(days=1)).isoformat(), "_state")
    spec = pv_spec(a.landing, a.day, os.path.join(a.target, a.day), prev if os.path.isdir(prev) else None)
    spark = SparkSession.builder.appName(f"naive_pv {a.day}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        counts = pv_counts.run(spark, spec)
    finally:
        spark.stop()
    print(json.dumps({"day": a.day, "counts": counts.to_dict()}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
