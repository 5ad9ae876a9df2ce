"""Page-view counts (DESIGN §5): the ``write`` phase of ``pv_pipeline`` for one daily interval.

Submitted by Airflow's SparkSubmitOperator (``spark-submit spark_jobs/pv_counts.py --spec spec.json``),
run as ``python spark_jobs/pv_counts.py --spec spec.json``, or called in-process as
``run(spark, spec)`` against any session, including a long-lived Spark Connect one: ``run`` uses only
the DataFrame API (no RDDs, no SparkContext, no Python UDFs, no driver-local temp files).

Spec (JSON)::

    {"pipeline", "sink", "txn", "day": "YYYY-MM-DD", "partition": "dt=YYYY-MM-DD",
     "inputs": [{"path", "size", "mtime", "etag"}...],     # the frozen source positions
     "prev_state": "<dir of the previous checkpoint's state parquet>" | null,
     "staging_dir": "<the transaction's staging dir>", "spark_remote": "sc://..." | null}

Outputs, only below ``staging_dir`` (``s3://`` URLs are handed to Spark as ``s3a://``):

* ``data/<partition>/part-*.parquet`` - ``app_id`` string, ``pv``/``uv``/``cumulative_pv`` long;
  one row per app with ``pv >= 1``, one file, sorted by ``app_id``;
* ``_quarantine/part-*.json`` - ``{"file", "raw" (first 10,000 chars), "reason"}`` per malformed
  line (absent when there is none);
* ``_state/part-*.parquet`` - ``app_id`` string, ``cumulative_pv`` long: the full new keyed state;
* ``_counts.json`` - written last, atomically, by the driver: its presence means the dir is complete.
  A stale one is deleted first, so a run that dies part-way never leaves a complete-looking dir.

Line rules (``tests/reference_pv.py`` implements them independently; the two must agree exactly).
Lines are split on ``\\n`` only (a UTF-8 BOM at the start of a file is skipped; invalid UTF-8 becomes
U+FFFD). Reasons, first match wins:

1. ``not_json`` - not exactly one JSON value (RFC 8259: no NaN, comments, trailing commas or trailing
   content; blank lines included), duplicate keys in any object, or beyond the parser's limits: a line
   over 2,000,000 chars, arrays/objects nested deeper than 64, a number with more than 1000 digits, a key over
   50,000 UTF-16 units;
2. ``not_object`` - valid JSON but not an object;
3. for each field of ``event_id, app_id, user_id, event, ts`` in this order: ``missing:<f>`` (absent),
   ``bad_type:<f>`` (not a JSON string), ``empty:<f>`` (``""``);
4. ``bad_ts`` - ``ts`` is not ``YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`` with a real calendar date
   (years 0001-9999), hour <= 23, minute/second <= 59, offset within ±18:00 (minutes <= 59).

Dedup keeps, per ``event_id``, the valid line with the smallest (ts instant in microseconds - extra
fraction digits truncated -, line text). ``pv``/``uv`` count those events with ``event == "page_view"``
per ``app_id``; ``cumulative_pv`` = previous state (0 if none) + ``pv``; the new state holds every app of
the previous state plus every app with ``pv >= 1`` now. A lone surrogate escape (``"\\ud800"``) in a
value is stored as ``?`` (UTF-8 cannot hold it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from functools import reduce
from pathlib import Path
from typing import Any, Sequence

_PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
if _PLUGINS not in sys.path:
    sys.path.insert(0, _PLUGINS)

from pyspark.sql import Column, DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from exactly_once.errors import ConfigError, StorageError  # noqa: E402
from exactly_once.failpoints import failpoint  # noqa: E402
from exactly_once.ids import check_partition  # noqa: E402
from exactly_once.storage import storage_for, to_json  # noqa: E402

FIELDS = ("event_id", "app_id", "user_id", "event", "ts")
MAX_LINE_CHARS = 2_000_000
# Deepest nesting the parser is given. It recurses once per level on the task thread's stack, and a
# StackOverflowError there is fatal to the executor (in local mode, to the driver too): at Jackson's own
# limit (1000) a 1 MiB default stack overflows. 64 levels use about 64 KiB (as System.Text.Json's default).
MAX_DEPTH = 64
RAW_CHARS = 10_000
PAGE_VIEW = "page_view"
STATE_SCHEMA = "app_id string, cumulative_pv long"
# ASCII digits only; \z: Java's $ would also match before a final line terminator inside the value.
TS_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})\z"
_GLOB_CHARS = "\\*?[]{}"


def spark_url(path: str) -> str:
    """The URL Spark should use for ``path``: ``file://`` for local paths, ``s3a://`` for ``s3://``.

    Hadoop glob metacharacters are escaped, so a file literally named ``a[1].jsonl`` is read as such.
    """
    if path.startswith("s3://"):
        url = "s3a://" + path[len("s3://"):]
    elif "://" in path:
        url = path
    else:
        url = "file://" + os.path.abspath(path)
    return "".join("\\" + c if c in _GLOB_CHARS else c for c in url)


def _child(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or a URL (parts are fixed names or checked partitions)."""
    return "/".join([base.rstrip("/"), *parts])


def check_frozen(inputs: Sequence[dict[str, Any]]) -> None:
    """Refuse to run unless every input still has its frozen size (and etag, when both are known)."""
    for item in inputs:
        path, size = item["path"], int(item["size"])
        store, key = storage_for(path)
        try:
            meta = store.file_meta(key)
        except FileNotFoundError:
            meta = {"size": "missing", "etag": None}
        if meta["size"] != size:
            raise StorageError(f"source {path} changed since it was frozen (size {size} -> {meta['size']}); "
                               "replay is impossible")
        if item.get("etag") and meta.get("etag") and item["etag"] != meta["etag"]:
            raise StorageError(f"source {path} changed since it was frozen (etag {item['etag']} -> "
                               f"{meta['etag']}); replay is impossible")


def read_lines(spark: SparkSession, inputs: Sequence[dict[str, Any]]) -> DataFrame:
    """``file`` (the spec's path, verbatim), ``raw`` (the line, valid UTF-8): every line of every input."""
    frames = [spark.read.option("lineSep", "\n").text(spark_url(item["path"]))
              .select(F.lit(item["path"]).alias("file"), F.make_valid_utf8("value").alias("raw"))
              for item in inputs]
    if not frames:
        return spark.createDataFrame([], "file string, raw string")
    return reduce(DataFrame.unionAll, frames)


def _field_kind(f: str) -> Column:
    """``missing`` / ``bad_type`` / ``empty`` / null (a non-empty string) for field ``f``."""
    return (F.when(F.col(f"_v_{f}").isNull(), "missing")
            .when(F.col(f"_t_{f}") != "STRING", "bad_type")
            .when(F.length(f"_s_{f}") == 0, "empty"))


def too_deep(raw: Column) -> Column:
    """True if the JSON text ``raw`` nests arrays/objects more than ``MAX_DEPTH`` levels, found without recursion.

    Only lines with more than ``MAX_DEPTH`` of ``[``/``{`` (an upper bound of the depth) pay for the exact
    answer: escapes, then everything but quotes and brackets, then strings are removed, and ``MAX_DEPTH``
    passes each delete the innermost ``[]``/``{}`` pairs; what is left is deeper (or not JSON at all).
    Every regex is a plain scan (no repeated group), so Java's matcher does not recurse either.
    """
    skeleton = F.regexp_replace(F.regexp_replace(F.regexp_replace(raw, r"(?s)\\.", ""),
                                                 r'[^"\[\]{}]+', ""), r'"[^"]*+"', "")
    peeled = F.aggregate(F.sequence(F.lit(1), F.lit(MAX_DEPTH)), skeleton,
                         lambda acc, _: F.regexp_replace(acc, r"\[]|\{}", ""))
    return F.when(F.regexp_count(raw, F.lit(r"[\[{]")) > MAX_DEPTH, F.length(peeled) > 0).otherwise(False)


def classify(lines: DataFrame) -> DataFrame:
    """Add ``reason`` (null for a valid line), the five fields as strings, and ``ts_us`` (valid lines).

    ``try_parse_json`` reads one value and ignores what follows it, so the line is parsed wrapped twice:
    ``{"x":<line>}`` and ``[<line>]``. Trailing content after the value must then be ``,`` for both to
    parse, which gives the first wrapper a second key. So: both parse and the first has exactly one key
    <=> the line is exactly one JSON value. Each step is a separate projection so that every parse runs
    once per line (the optimizer does not collapse projections that would duplicate expensive work).
    """
    raw = F.col("raw")
    fits = (F.length(raw) <= MAX_LINE_CHARS) & ~too_deep(raw)
    step = lines.select(
        "file", "raw",
        F.when(fits, F.try_parse_json(F.concat(F.lit('{"x":'), raw, F.lit("}")))).alias("_w1"),
        F.when(fits, F.try_parse_json(F.concat(F.lit("["), raw, F.lit("]")))).isNotNull().alias("_w2"))
    one_key = F.size(F.try_variant_get("_w1", "$", "map<string,variant>")) == 1
    step = step.select(
        "file", "raw",
        F.when(F.col("_w1").isNotNull() & F.col("_w2") & one_key,
               F.variant_get("_w1", "$.x", "variant")).alias("_doc"))
    step = step.select(
        "file", "raw", F.col("_doc").isNotNull().alias("_json"),
        F.coalesce(F.schema_of_variant("_doc").startswith("OBJECT<"), F.lit(False)).alias("_obj"),
        *[F.variant_get("_doc", f"$.{f}", "variant").alias(f"_v_{f}") for f in FIELDS])
    step = step.select(
        "file", "raw", "_json", "_obj",
        *[c for f in FIELDS for c in (F.col(f"_v_{f}"), F.schema_of_variant(f"_v_{f}").alias(f"_t_{f}"))])
    step = step.select(
        "file", "raw", "_json", "_obj", *[f"_v_{f}" for f in FIELDS], *[f"_t_{f}" for f in FIELDS],
        *[F.when(F.col(f"_t_{f}") == "STRING", F.try_variant_get(f"_v_{f}", "$", "string")).alias(f"_s_{f}")
          for f in FIELDS])
    ts = F.col("_s_ts")
    ts_ok = ts.rlike(TS_PATTERN) & ~ts.startswith("0000") & ts.try_cast("timestamp").isNotNull()
    reason = F.when(~F.col("_json"), "not_json").when(~F.col("_obj"), "not_object")
    for f in FIELDS:
        kind = _field_kind(f)
        reason = reason.when(kind.isNotNull(), F.concat(kind, F.lit(f":{f}")))
    reason = reason.when(~ts_ok, "bad_ts")
    return step.select(
        "file", "raw", reason.alias("reason"), *[F.col(f"_s_{f}").alias(f) for f in FIELDS[:4]],
        F.unix_micros(ts.try_cast("timestamp")).alias("ts_us"))


def per_app(parsed: DataFrame, prev_state: DataFrame) -> DataFrame:
    """Dedup valid lines and join with the previous state.

    Columns ``app_id, events, pv, uv, cumulative_pv, in_state`` - one row per app seen now (valid
    events of any kind) or in the previous state; ``in_state`` marks the rows of the new state.
    """
    first = F.min(F.struct("ts_us", "raw", "app_id", "user_id", "event")).alias("e")
    events = (parsed.filter(F.col("reason").isNull()).groupBy("event_id").agg(first)
              .select("e.app_id", "e.user_id", "e.event"))
    is_pv = F.col("event") == PAGE_VIEW
    apps = events.groupBy("app_id").agg(
        F.count(F.lit(1)).alias("events"), F.count_if(is_pv).alias("pv"),
        F.count_distinct(F.when(is_pv, F.col("user_id"))).alias("uv"))
    joined = apps.join(prev_state.withColumnRenamed("cumulative_pv", "prev"), "app_id", "full_outer")
    pv = F.coalesce(F.col("pv"), F.lit(0))
    return joined.select(
        "app_id", F.coalesce(F.col("events"), F.lit(0)).alias("events"), pv.alias("pv"),
        F.coalesce(F.col("uv"), F.lit(0)).alias("uv"),
        (F.coalesce(F.col("prev"), F.lit(0)) + pv).alias("cumulative_pv"),
        (F.col("prev").isNotNull() | (pv > 0)).alias("in_state"))


def _validate(spark: SparkSession, spec: dict[str, Any]) -> None:
    """Refuse a spec that lacks keys or would write outside its staging dir, and a session whose
    configuration would change the line rules (duplicate keys must stay malformed)."""
    if spark.conf.get("spark.sql.variant.allowDuplicateKeys", "false").lower() == "true":
        raise ConfigError("spark.sql.variant.allowDuplicateKeys=true would accept duplicate JSON keys")
    missing = [k for k in ("partition", "inputs", "staging_dir") if k not in spec]
    if missing:
        raise ConfigError(f"pv_counts spec lacks {missing}")
    check_partition(spec["partition"])
    prev = spec.get("prev_state")
    if prev and prev.rstrip("/").startswith(spec["staging_dir"].rstrip("/") + "/"):
        raise ConfigError(f"prev_state {prev} lies inside the staging dir it would overwrite")


def run(spark: SparkSession, spec: dict[str, Any]) -> dict[str, Any]:
    """Compute and stage one interval (see the module docstring); returns the ``_counts.json`` dict.

    Raises StorageError if an input is no longer as frozen, FailpointError at ``write.partial``.
    """
    _validate(spark, spec)
    inputs, partition, staging = list(spec["inputs"]), spec["partition"], spec["staging_dir"]
    store, root = storage_for(staging)
    counts_path = store.join(root, "_counts.json")
    store.remove_tree(counts_path)
    check_frozen(inputs)

    parsed = classify(read_lines(spark, inputs)).persist()
    prev = (spark.read.schema(STATE_SCHEMA).parquet(spark_url(spec["prev_state"])) if spec.get("prev_state")
            else spark.createDataFrame([], STATE_SCHEMA))
    apps = per_app(parsed, prev).persist()
    try:
        by_reason = {r["reason"]: r["count"] for r in parsed.groupBy("reason").count().collect()}
        tot = apps.agg(F.sum("events").alias("events"), F.sum("pv").alias("pv"),
                       F.count_if(F.col("pv") > 0).alias("rows"), F.count_if("in_state").alias("state")).first()
        malformed = dict(sorted((k, v) for k, v in by_reason.items() if k is not None))
        valid, distinct = by_reason.get(None, 0), int(tot["events"] or 0)

        (apps.filter(F.col("pv") > 0).select("app_id", "pv", "uv", "cumulative_pv").coalesce(1)
         .sortWithinPartitions("app_id").write.mode("overwrite").parquet(spark_url(_child(staging, "data", partition))))
        if malformed:
            (parsed.filter(F.col("reason").isNotNull())
             .select("file", F.substring("raw", 1, RAW_CHARS).alias("raw"), "reason").coalesce(1)
             .write.mode("overwrite").json(spark_url(_child(staging, "_quarantine"))))
        else:
            store.remove_tree(store.join(root, "_quarantine"))
        failpoint("write.partial")
        (apps.filter("in_state").select("app_id", "cumulative_pv").coalesce(1).sortWithinPartitions("app_id")
         .write.mode("overwrite").parquet(spark_url(_child(staging, "_state"))))
    finally:
        apps.unpersist()
        parsed.unpersist()

    counts = {
        "lines_read": valid + sum(malformed.values()), "malformed": sum(malformed.values()),
        "valid_lines": valid, "duplicates_dropped": valid - distinct, "distinct_events": distinct,
        "page_views": int(tot["pv"] or 0), "rows_written": int(tot["rows"]),
        "rows_per_partition": {partition: int(tot["rows"])}, "apps_in_state": int(tot["state"]),
        "input_files": len(inputs), "input_bytes": sum(int(i["size"]) for i in inputs),
        "malformed_by_reason": malformed,
    }
    store.write_atomic(counts_path, to_json(counts))
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """CLI / spark-submit entry point: ``--spec <path or URL of the spec JSON>``; prints the counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="path or s3:// URL of the job spec JSON")
    args = parser.parse_args(argv)
    store, key = storage_for(args.spec)
    spec = json.loads(store.read_bytes(key))
    remote = spec.get("spark_remote")
    if remote:
        spark = SparkSession.builder.remote(remote).getOrCreate()
    else:
        spark = SparkSession.builder.appName(f"pv_counts {spec.get('txn', '')}".strip()).getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
    try:
        counts = run(spark, spec)
    finally:
        spark.stop()
    print(json.dumps({"txn": spec.get("txn"), "counts": counts}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
