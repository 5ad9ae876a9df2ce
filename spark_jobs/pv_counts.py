"""Page-view counts (DESIGN §5): the ``write`` phase of ``pv_pipeline`` for one daily interval.

Submitted by Airflow's SparkSubmitOperator (``spark-submit spark_jobs/pv_counts.py --spec spec.json``),
run as ``python spark_jobs/pv_counts.py --spec spec.json``, or called in-process as
``run(spark, spec)`` against any session, including a long-lived Spark Connect one: ``run`` uses only
the DataFrame API (no RDDs, no SparkContext, no Python UDFs, no driver-local temp files).

It uses the job-side API (:mod:`exactly_once.job`, ``docs/JOB_API.md``) for the plumbing: the spec,
the frozen inputs (checked unchanged), the output dir of its one partition (``dt=YYYY-MM-DD``), the
previous and new state dirs, the quarantine dir and the counts. What it writes:

* ``<partition>/part-*.parquet`` - ``app_id`` string, ``pv``/``uv``/``cumulative_pv`` long;
  one row per app with ``pv >= 1``, one file, sorted by ``app_id``;
* quarantine ``part-*.json`` - ``{"file", "raw" (first 10,000 chars), "reason"}`` per malformed
  line (absent when there is none);
* state ``part-*.parquet`` - ``app_id`` string, ``cumulative_pv`` long: the full new keyed state;
* counts (:class:`~exactly_once.contracts.Counts`): records = input lines; rejected = malformed (by
  reason); deduplicated = valid lines dropped as duplicate events; out = distinct events;
  ``metrics.page_views``.

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

import sys
from functools import reduce
from pathlib import Path
from typing import Any, Sequence

try:
    import exactly_once  # noqa: F401 - installed, or shipped to the Spark driver by --py-files
except ImportError:  # run from a checkout without the package installed: the repo's copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from pyspark.sql import Column, DataFrame, SparkSession, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from exactly_once.contracts import Counts, FrozenInput, JobSpec  # noqa: E402
from exactly_once.errors import ConfigError  # noqa: E402
from exactly_once.failpoints import failpoint  # noqa: E402
from exactly_once.job import BatchContext, JobContext, run_job, spark_path  # noqa: E402

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
# The common line, matched by one scan instead of two JSON parses: an object of the five fields in this order
# and at most one more member, every key and value a string without escapes or control characters (so its
# text IS its value), JSON whitespace between tokens. Such a line is exactly one JSON value, an object, with
# no duplicate key (the extra key is none of the five) and within every parser limit (a key of at most 1,000
# chars; the line's length is checked apart). Anything else - other order, escapes, a number, a BOM - is
# parsed as JSON. Splitting such a line on '"' puts value k (0-based) at index 4k + 3.
_WS, _TEXT = r"[ \t\r]*+", r'[^"\\\x00-\x1f]'
_MEMBER = _WS + '"{key}"' + _WS + ":" + _WS + '"' + _TEXT + '*+"' + _WS
FLAT_LINE = ("^\\{" + ",".join(_MEMBER.format(key=f) for f in FIELDS)
             + "(?:," + _MEMBER.format(key="(?!(?:" + "|".join(FIELDS) + ')")' + _TEXT + "{0,1000}+") + ")?\\}\\z")


def read_lines(spark: SparkSession, inputs: Sequence[FrozenInput]) -> DataFrame:
    """``file`` (the spec's path, verbatim), ``raw`` (the line, valid UTF-8): every line of every input."""
    frames = [spark.read.option("lineSep", "\n").text(spark_path(item.path))
              .select(F.lit(item.path).alias("file"), F.make_valid_utf8("value").alias("raw"))
              for item in inputs]
    if not frames:
        return spark.createDataFrame([], "file string, raw string")
    return reduce(DataFrame.unionAll, frames)


def _field_kind(f: str) -> Column:
    """``missing`` / ``bad_type`` / ``empty`` / null (a non-empty string) for field ``f``."""
    return (F.when(F.col("_flat"), F.when(F.length(f"_s_{f}") == 0, "empty"))
            .when(F.col(f"_v_{f}").isNull(), "missing")
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


def classify(lines: DataFrame, keep: Sequence[str] = ()) -> DataFrame:
    """Add ``reason`` (null for a valid line), the five fields as strings, and ``ts_us`` (valid lines);
    the columns ``keep`` (a batch's interval) are carried along.

    ``try_parse_json`` reads one value and ignores what follows it, so the line is parsed wrapped twice:
    ``{"x":<line>}`` and ``[<line>]``. Trailing content after the value must then be ``,`` for both to
    parse, which gives the first wrapper a second key. So: both parse and the first has exactly one key
    <=> the line is exactly one JSON value. A line that matches :data:`FLAT_LINE` is not parsed at all: its
    fields are its text between quotes. Each step is a separate projection so that every parse runs once per
    line (the optimizer does not collapse projections that would duplicate expensive work).
    """
    raw = F.col("raw")
    short = F.length(raw) <= MAX_LINE_CHARS
    step = lines.select(*keep, "file", "raw", (short & raw.rlike(FLAT_LINE)).alias("_flat"))
    flat, parse = F.col("_flat"), ~F.col("_flat") & short & ~too_deep(raw)  # a flat line is never parsed
    step = step.select(
        *keep, "file", "raw", "_flat", F.when(flat, F.split(raw, '"')).alias("_parts"),
        F.when(parse, F.try_parse_json(F.concat(F.lit('{"x":'), raw, F.lit("}")))).alias("_w1"),
        F.when(parse, F.try_parse_json(F.concat(F.lit("["), raw, F.lit("]")))).isNotNull().alias("_w2"))
    one_key = F.size(F.try_variant_get("_w1", "$", "map<string,variant>")) == 1
    step = step.select(
        *keep, "file", "raw", "_flat", "_parts",
        F.when(F.col("_w1").isNotNull() & F.col("_w2") & one_key,
               F.variant_get("_w1", "$.x", "variant")).alias("_doc"))
    step = step.select(
        *keep, "file", "raw", "_flat", "_parts", (flat | F.col("_doc").isNotNull()).alias("_json"),
        (flat | F.coalesce(F.schema_of_variant("_doc").startswith("OBJECT<"), F.lit(False))).alias("_obj"),
        *[F.variant_get("_doc", f"$.{f}", "variant").alias(f"_v_{f}") for f in FIELDS])
    step = step.select(
        *keep, "file", "raw", "_flat", "_parts", "_json", "_obj",
        *[c for f in FIELDS for c in (F.col(f"_v_{f}"), F.schema_of_variant(f"_v_{f}").alias(f"_t_{f}"))])
    step = step.select(
        *keep, "file", "raw", "_flat", "_json", "_obj", *[f"_v_{f}" for f in FIELDS], *[f"_t_{f}" for f in FIELDS],
        *[F.when(flat, F.col("_parts")[4 * k + 3])
          .when(F.col(f"_t_{f}") == "STRING", F.try_variant_get(f"_v_{f}", "$", "string")).alias(f"_s_{f}")
          for k, f in enumerate(FIELDS)])
    ts = F.col("_s_ts")
    ts_ok = ts.rlike(TS_PATTERN) & ~ts.startswith("0000") & ts.try_cast("timestamp").isNotNull()
    reason = F.when(~F.col("_json"), "not_json").when(~F.col("_obj"), "not_object")
    for f in FIELDS:
        kind = _field_kind(f)
        reason = reason.when(kind.isNotNull(), F.concat(kind, F.lit(f":{f}")))
    reason = reason.when(~ts_ok, "bad_ts")
    return step.select(
        *keep, "file", "raw", reason.alias("reason"), *[F.col(f"_s_{f}").alias(f) for f in FIELDS[:4]],
        F.unix_micros(ts.try_cast("timestamp")).alias("ts_us"))


def _first_lines(lines: DataFrame, group: Sequence[str]) -> DataFrame:
    """Per group of ``group``: the columns of its first line by (``ts_us``, ``raw``) - the copy the dedup rule
    keeps - and ``n``, the group's number of lines. An aggregation (a min over the line as a struct), not a window:
    a window holds every line of a group at once, and one event sent a million times is one group."""
    rest = [c for c in lines.columns if c not in (*group, "ts_us", "raw")]
    first = F.min(F.struct("ts_us", "raw", *rest)).alias("_first")
    return lines.groupBy(*group).agg(first, F.count(F.lit(1)).alias("n")).select(*group, "_first.*", "n")


def per_app(parsed: DataFrame, prev_state: DataFrame) -> DataFrame:
    """Dedup valid lines and join with the previous state.

    Columns ``app_id, events, pv, uv, cumulative_pv, in_state`` - one row per app seen now (valid
    events of any kind) or in the previous state; ``in_state`` marks the rows of the new state.
    """
    valid = parsed.filter(F.col("reason").isNull()).select("event_id", "ts_us", "raw", "app_id", "user_id", "event")
    events = _first_lines(valid, ["event_id"])
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


def _check_session(spark: SparkSession, spec: JobSpec) -> str:
    """The one partition of a daily interval; refuses a session whose configuration would change the
    line rules (duplicate keys must stay malformed)."""
    if spark.conf.get("spark.sql.variant.allowDuplicateKeys", "false").lower() == "true":
        raise ConfigError("spark.sql.variant.allowDuplicateKeys=true would accept duplicate JSON keys")
    if len(spec.partitions) != 1:
        raise ConfigError(f"pv_counts writes one partition per interval, the spec owns {list(spec.partitions)}")
    return spec.partitions[0]


def run(spark: SparkSession, spec: JobSpec | dict[str, Any] | str) -> Counts:
    """Compute and stage one interval (see the module docstring); returns the counts it wrote.

    Raises StorageError if an input is no longer as frozen, FailpointError at ``write.partial``.
    """
    ctx = JobContext.open(spark, spec)
    return ctx.finish(compute(ctx))


def compute(ctx: JobContext) -> Counts:
    """Page views per app for one interval (see the module docstring)."""
    spark = ctx.spark
    partition = _check_session(spark, ctx.spec)
    inputs = ctx.source().inputs
    parsed = classify(read_lines(spark, inputs)).persist()
    apps = per_app(parsed, ctx.read_prev_state(STATE_SCHEMA)).persist()
    try:
        by_reason = {r["reason"]: r["count"] for r in parsed.groupBy("reason").count().collect()}
        tot = apps.agg(F.sum("events").alias("events"), F.sum("pv").alias("pv"),
                       F.count_if(F.col("pv") > 0).alias("rows"), F.count_if("in_state").alias("state")).first()
        malformed = dict(sorted((k, v) for k, v in by_reason.items() if k is not None))
        valid, distinct = by_reason.get(None, 0), int(tot["events"] or 0)

        (apps.filter(F.col("pv") > 0).select("app_id", "pv", "uv", "cumulative_pv").coalesce(1)
         .sortWithinPartitions("app_id").write.mode("overwrite").parquet(ctx.output_dir(partition)))
        if malformed:
            (parsed.filter(F.col("reason").isNotNull())
             .select("file", F.substring("raw", 1, RAW_CHARS).alias("raw"), "reason").coalesce(1)
             .write.mode("overwrite").json(ctx.quarantine_dir))
        else:
            ctx.clear_quarantine()
        failpoint("write.partial")
        (apps.filter("in_state").select("app_id", "cumulative_pv").coalesce(1).sortWithinPartitions("app_id")
         .write.mode("overwrite").parquet(ctx.state_dir))
    finally:
        apps.unpersist()
        parsed.unpersist()

    files, size = ctx.input_stats()
    return Counts(records_in=valid + sum(malformed.values()), records_out=distinct,
                  records_rejected=sum(malformed.values()), records_deduplicated=valid - distinct,
                  rows_written={partition: int(tot["rows"])}, state_rows=int(tot["state"]),
                  input_files=files, input_bytes=size, rejected_by_reason=malformed,
                  metrics={"page_views": int(tot["pv"] or 0)})


IV = BatchContext.INTERVAL


def _one_pass(parsed: DataFrame) -> DataFrame:
    """Per interval, in ONE aggregation of the parsed lines (the wide rows are never stored): every distinct valid
    event once - the copy the rule of :func:`per_app` keeps, ``n`` = its valid lines - and every malformed line
    alone (``n`` = 1; ``file`` and ``raw``, cut to ``RAW_CHARS``, for the quarantine).
    Columns ``eo_interval, reason, n, app_id, user_id, event, file, raw``."""
    valid = F.col("reason").isNull()
    keyed = parsed.select(
        IV, "reason", F.when(valid, F.col("event_id")).alias("_k"),
        F.when(~valid, F.monotonically_increasing_id()).alias("_line"),  # a malformed line is its own group
        "ts_us", F.when(valid, F.col("raw")).otherwise(F.substring("raw", 1, RAW_CHARS)).alias("raw"),
        "app_id", "user_id", "event", F.when(~valid, F.col("file")).alias("file"))
    return (_first_lines(keyed, [IV, "reason", "_k", "_line"])
            .select(IV, "reason", "n", "app_id", "user_id", "event", "file", F.when(~valid, F.col("raw")).alias("raw")))


def _chained_state(batch: BatchContext, apps: DataFrame) -> DataFrame:
    """The new state of every interval of the batch: ``eo_interval, app_id, cumulative_pv``.

    An app is in an interval's state from the interval where it first had a page view (or from the
    chain's first interval, if the chain's previous state holds it) to the chain's last interval; its
    cumulative_pv there = the chain's previous state + every pv of the chain up to that interval - the
    state a single-interval run computes, interval after interval."""
    spark = batch.spark
    n = len(batch)
    heads = [batch.head(i) for i in range(n)]
    last = {h: max(i for i in range(n) if heads[i] == h) for h in set(heads)}
    chains = spark.createDataFrame([(i, heads[i], last[heads[i]]) for i in range(n)],
                                   f"{IV} int, chain int, chain_last int")
    init = batch.read_prev_states(STATE_SCHEMA).select(F.col(IV).alias("chain"), "app_id",
                                                      F.col("cumulative_pv").alias("init"))
    seen = apps.filter(F.col("pv") > 0).join(chains, IV).select("chain", "app_id", F.col(IV).alias("first"))
    starts = init.join(chains.filter(F.col(IV) == F.col("chain")), "chain").select("chain", "app_id", F.col(IV).alias("first"))
    active = (seen.unionByName(starts).groupBy("chain", "app_id").agg(F.min("first").alias("first"))
              .join(chains.select("chain", "chain_last").distinct(), "chain").join(init, ["chain", "app_id"], "left"))
    grid = active.select("chain", "app_id", F.coalesce("init", F.lit(0)).alias("init"),
                         F.explode(F.sequence("first", "chain_last")).alias(IV))
    pv = grid.join(apps.select(IV, "app_id", "pv"), [IV, "app_id"], "left")
    running = Window.partitionBy("chain", "app_id").orderBy(IV).rowsBetween(Window.unboundedPreceding, 0)
    return pv.select(IV, "app_id", (F.col("init") + F.sum(F.coalesce("pv", F.lit(0))).over(running)).alias("cumulative_pv"))


def compute_batch(batch: BatchContext) -> list[Counts]:
    """Page views per app for every interval of a batch, in one Spark job: the same rows, state,
    quarantine and counts, interval by interval, as :func:`compute` run on each in order."""
    spark = batch.spark
    for job in batch.jobs:
        _check_session(spark, job.spec)
    raw = spark.read.option("lineSep", "\n").text(batch.inputs()) if batch.inputs() else \
        spark.createDataFrame([], "value string")
    lines = batch.tag(raw).select(IV, F.col(BatchContext.FILE).alias("file"), F.make_valid_utf8("value").alias("raw"))
    lines_once = _one_pass(classify(lines, keep=[IV])).persist()
    apps = state = None
    try:
        by_reason: dict[int, dict[Any, int]] = {}
        for r in lines_once.groupBy(IV, "reason").agg(F.sum("n").alias("n")).collect():
            by_reason.setdefault(r[IV], {})[r["reason"]] = r["n"]
        is_pv = F.col("event") == PAGE_VIEW
        apps = lines_once.filter(F.col("reason").isNull()).groupBy(IV, "app_id").agg(
            F.count(F.lit(1)).alias("events"), F.count_if(is_pv).alias("pv"),
            F.count_distinct(F.when(is_pv, F.col("user_id"))).alias("uv")).persist()
        state = _chained_state(batch, apps).persist()
        tot = {r[IV]: r for r in apps.groupBy(IV).agg(
            F.sum("events").alias("events"), F.sum("pv").alias("pv"), F.count_if(F.col("pv") > 0).alias("rows"))
            .collect()}
        state_rows = {r[IV]: r["count"] for r in state.groupBy(IV).count().collect()}
        out = apps.filter(F.col("pv") > 0).join(state, [IV, "app_id"]).select(IV, "app_id", "pv", "uv", "cumulative_pv")
        batch.write(out, "data", sort_by=["app_id"])
        batch.write(lines_once.filter(F.col("reason").isNotNull()).select(IV, "file", "raw", "reason"),
                    "quarantine", fmt="json")
        failpoint("write.partial")
        batch.write(state, "state", sort_by=["app_id"])
    finally:
        for frame in (state, apps, lines_once):
            if frame is not None:
                frame.unpersist()

    counts = []
    for i, job in enumerate(batch.jobs):
        malformed = dict(sorted((k, v) for k, v in by_reason.get(i, {}).items() if k is not None))
        t = tot.get(i)
        distinct, ok = int(t["events"]) if t else 0, int(by_reason.get(i, {}).get(None, 0))
        files, size = job.input_stats()
        counts.append(Counts(records_in=ok + sum(malformed.values()), records_out=distinct,
                             records_rejected=sum(malformed.values()), records_deduplicated=ok - distinct,
                             rows_written={job.partitions[0]: int(t["rows"]) if t else 0},
                             state_rows=int(state_rows.get(i, 0)), input_files=files, input_bytes=size,
                             rejected_by_reason=malformed, metrics={"page_views": int(t["pv"]) if t else 0}))
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """CLI / spark-submit entry point: ``--spec <path or URL of the spec JSON>`` (one interval) or
    ``--batch <URL of a batch spec>`` (several, :func:`compute_batch`); prints the counts."""
    return run_job(compute, argv, app_name="pv_counts", compute_batch=compute_batch)


if __name__ == "__main__":
    sys.exit(main())
