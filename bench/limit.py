"""Section ``limit`` (issue 48): the plain-Spark floor - what the page-view computation costs as ONE plain
Spark job over the landed days, with no Airflow, no protocol and no gate, beside every figure of ours.

The job (:func:`floor_job`) is what a careful data engineer writes by hand for the same output: read the days'
JSON lines as text, parse each once with ``from_json`` (Jackson, five string fields), drop what the generator
makes malformed with the cheapest checks that catch it on this data (not parsed, a field missing or empty, a
field whose JSON value is not a string - one regex over the line -, a timestamp that does not parse with the
one format the generator writes), dedup per day by ``event_id`` (``dropDuplicates``: every copy the generator
re-delivers carries the same fields), pv/uv per day and app, the cumulative sum over the days by a window, and
one Parquet file per day (``partitionBy("dt")``). It keeps no quarantine, no state, no counts and holds none of
the line rules beyond this data (``spark_jobs/pv_counts.py`` holds them for any input): a floor, not a rival.
Its output is checked row for row against the test oracle (``tests/reference_pv.py``) - a floor that computes
something else would say nothing.

It runs on a Spark Connect server (``local[*]``, 8 shuffle partitions: :mod:`tools.spark_connect`), the engine
ours' batched job runs on, after one untimed warm-up run over the first day (the JVM's first queries and JIT);
the server's start is reported apart. The ``batched`` section runs it over its month and year on its own
server; ``python -m bench --only limit`` runs it alone (``--limit-days``, ``--events``; ``--spark-remote`` uses
a running server instead of starting one).
"""
from __future__ import annotations

import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.backfill_metrics import oracle_rows, same_rows, table_rows
from bench.common import landing_days, loadavg, say
from bench.cpu import CpuSampler, peak_rss_mb

from tools import spark_connect
from tools.deployment import free_port

FIELDS = ("event_id", "app_id", "user_id", "event", "ts")
SCHEMA = ", ".join(f"{f} string" for f in FIELDS)
NOT_A_STRING = '"(?:' + "|".join(FIELDS) + r')"\s*:\s*[^"\s]'  # one of the five keys with a non-string value
TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss[.SSS]XXX"


def floor_job(spark: Any, app_logs: Path, days: list[str], out: Path) -> None:
    """The plain job (module docstring): ``app_logs/dt=<day>/...`` of ``days`` -> ``out/dt=<day>/*.parquet``
    (``app_id``, ``pv``, ``uv``, ``cumulative_pv``; one file per day, sorted by app)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = (spark.read.option("lineSep", "\n").text(str(app_logs))
             .where(F.col("dt").cast("string").isin(days)).select(F.col("dt").cast("string").alias("dt"), "value"))
    doc = lines.select("dt", "value", F.from_json("value", SCHEMA).alias("d")).select("dt", "value", "d.*")
    ok = ~F.col("value").rlike(NOT_A_STRING) & F.try_to_timestamp("ts", F.lit(TS_FORMAT)).isNotNull()
    for f in FIELDS:
        ok &= F.col(f).isNotNull() & (F.length(f) > 0)
    events = doc.where(ok).select("dt", *FIELDS[:4]).dropDuplicates(["dt", "event_id"])
    is_pv = F.col("event") == "page_view"
    per_day = events.groupBy("dt", "app_id").agg(
        F.count_if(is_pv).alias("pv"), F.count_distinct(F.when(is_pv, F.col("user_id"))).alias("uv")).where("pv > 0")
    running = Window.partitionBy("app_id").orderBy("dt").rowsBetween(Window.unboundedPreceding, 0)
    rows = per_day.select("dt", "app_id", "pv", "uv", F.sum("pv").over(running).alias("cumulative_pv"))
    (rows.repartition("dt").sortWithinPartitions("dt", "app_id")
     .write.mode("overwrite").partitionBy("dt").parquet(str(out)))


def process_cpu(pid: int | None) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far (None: unknown or gone)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times() if pid else None
    except psutil.Error:
        return None
    return None if t is None else t.user + t.system


def measure(spark: Any, landing: Path, days: list[str], work: Path, label: str,
            server_pid: int | None = None) -> dict[str, Any]:
    """The floor over ``days`` of ``landing``, timed (the wall clock, every process's CPU, and the Connect
    server's own CPU when ``server_pid`` is known: the other components are machine-wide), its output checked
    against the oracle; a warm-up run over the first day first (untimed)."""
    out = work / f"floor-{label}"
    shutil.rmtree(out, ignore_errors=True)
    floor_job(spark, landing / "app_logs", days[:1], work / f"floor-{label}-warmup")
    say(f"limit: the plain-Spark floor over {len(days)} days {days[0]} .. {days[-1]}")
    load0, jvm0 = loadavg(), process_cpu(server_pid)
    t0 = time.perf_counter()
    with CpuSampler() as cpu:
        floor_job(spark, landing / "app_logs", days, out)
    wall = round(time.perf_counter() - t0, 1)
    jvm1 = process_cpu(server_pid)
    equal, rows = same_rows(table_rows(out), oracle_rows(landing, days), days)
    say(f"  limit: {len(days)} days in {wall:.1f}s; output == oracle: {equal} ({rows:,} rows)")
    return {"intervals": len(days), "days": [days[0], days[-1]], "wall_seconds": wall, "cpu": cpu.result(),
            "server_cpu_seconds": round(jvm1 - jvm0, 1) if jvm0 is not None and jvm1 is not None else None,
            "server_peak_rss_mb": peak_rss_mb(server_pid),  # the JVM's highest so far (this job and all before it)
            "loadavg": [load0, loadavg()], "outputs_equal": equal, "rows": rows}


def connect(url: str) -> Any:
    """A Spark Connect client session of the server at ``url``."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).getOrCreate()


def limit_section(work: Path, days_n: int, events: int, remote: str | None = None) -> dict[str, Any]:
    """``python -m bench --only limit``: ``days_n`` days of ``events`` events (ending yesterday, as the batched
    section's), the floor over them on a fresh Connect server (or on ``remote``)."""
    if days_n < 1:
        raise SystemExit(f"--limit-days must be >= 1, not {days_n}")
    days, landing = landing_days(work, "limit-landing", days_n, events)
    res: dict[str, Any] = {"events_per_interval": events}
    with ExitStack() as stack:
        pid = None
        if remote is None:
            server = spark_connect.Server(free_port(), work / "limit-spark-connect")
            t0 = time.perf_counter()
            remote = spark_connect.start(server)
            stack.callback(spark_connect.stop, server)
            res["server"] = {"url": remote, "master": server.master, "start_seconds": round(time.perf_counter() - t0, 1)}
            pid = server.pid()
        else:
            res["server"] = {"url": remote, "master": None, "start_seconds": None}
        spark = connect(remote)
        stack.callback(spark.stop)
        res["floor"] = measure(spark, landing, days, work, "limit", pid)
    res["outputs_equal"] = res["floor"]["outputs_equal"]
    return res
