"""The gate (DESIGN §4 step 4) with Great Expectations 1.x: two layers of checks on the *staged* output.

1. **Completeness** - every pipeline gets it, built here from the counts schema
   (:class:`~exactly_once.contracts.Counts`), suite ``<table>.completeness`` on the counts frame: every
   record read is accounted for (``completeness_gap == 0``), the rejected share is at most
   ``max_malformed_ratio``, the rows each partition holds are the rows the job says it wrote, and no
   partition outside the interval's own was written.
2. **The table's own suite** - ``suite_path`` (e.g. ``expectations/orders.json``) on the staged data,
   plus its companions ``<stem>.<anything>.json`` on the frames of :mod:`exactly_once.quality.frames`
   (``meta.eo.frame``: ``"data"`` - the default -, ``"counts"`` or ``"checkpoint"``; ``meta.eo.key_columns``
   identify a row in failure reports and key the checkpoint frame; ``meta.eo.fill``/``derive`` add columns).

Each suite file is a GX 1.x ExpectationSuite JSON (``ExpectationSuite(**json)``) and is the source of
truth: no table rule is hard-coded here. Runtime values (``$PARAMETER``) are ``max_malformed_ratio`` plus
``parameters``. Every run is stored and rendered as GX Data Docs under ``report_root``
(:mod:`exactly_once.quality.gx`). This module imports neither Airflow nor GX at import time.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import ConfigError
from ..ids import check_name, check_partition
from . import gx_fast
from .frames import FrameReader, Frames, apply_derivations, build_frames, read_checkpoint
from .gx import SuiteRun, build_docs, is_remote, local_root, make_context, quiet_gx, run_suites, site
from .suites import gx_suite, read_suite, suite_paths

COMPLETENESS_COLUMNS = ("records_in", "records_out", "records_rejected", "records_deduplicated",
                        "records_filtered", "rows_written", "staged_rows")


@dataclass
class ValidationOutcome:
    """The gate's verdict.

    ``passed``: every expectation of every suite succeeded. ``failures``: one line per failed
    expectation, ``"<expectation type>(<column(s)>): observed <value>, expected <rule>"`` (led by a
    ``counts do not follow the contract: ...`` line when the job's counts are malformed).
    ``summary``: JSON-serialisable facts (rows, ratios, per-suite statistics and pages, timings in ms,
    ``duration_ms`` = whole call). ``report_path``: local path of the Data Docs page to show for this
    validation (the first failed suite's page, else the table suite's), None if no report was written.
    """

    passed: bool
    failures: list[str]
    summary: dict[str, Any]
    report_path: str | None
    reports: dict[str, str] = field(default_factory=dict)


def completeness_suite(table: str) -> dict[str, Any]:
    """The completeness suite every pipeline gets, as GX 1.x suite JSON (see the module docstring)."""
    def exp(kind: str, notes: str, **kwargs: Any) -> dict[str, Any]:
        return {"type": kind, "kwargs": kwargs, "meta": {}, "notes": notes, "severity": "critical"}

    zero = {"min_value": 0, "max_value": 0}
    expectations = [exp("expect_column_values_to_not_be_null", "a count the job must report", column=c)
                    for c in (*COMPLETENESS_COLUMNS[:6], "completeness_gap", "rejected_ratio", "rows_written_gap")]
    expectations += [exp("expect_column_values_to_be_between", "counts are never negative", column=c, min_value=0)
                     for c in COMPLETENESS_COLUMNS[:5]]
    expectations += [
        exp("expect_column_values_to_be_between", "records in = out + rejected + deduplicated + filtered",
            column="completeness_gap", **zero),
        exp("expect_column_values_to_be_between", "rows the job wrote per partition = rows staged",
            column="rows_written_gap", **zero),
        exp("expect_column_values_to_be_between", "only the interval's own partitions are written",
            column="unowned_partitions", **zero),
        exp("expect_column_values_to_be_between", "share of rejected input records within the configured limit",
            column="rejected_ratio", min_value=0, max_value={"$PARAMETER": "max_malformed_ratio"}),
    ]
    return {"name": f"{table}.completeness", "expectations": expectations,
            "meta": {"eo": {"frame": "counts"}}, "notes": "exactly_once: completeness from the job's counts"}


def load_suites(suite_path: str | None, table: str) -> list[tuple[str, dict[str, Any]]]:
    """``[(frame, suite json), ...]``: the completeness suite, ``suite_path``, then its companions (each
    file's shape checked: :mod:`exactly_once.quality.suites`)."""
    return [("counts", completeness_suite(table)), *(read_suite(p) for p in _paths(suite_path))]


def _paths(suite_path: str | None) -> list[str]:
    return suite_paths(suite_path) if suite_path is not None else []


def validate_staged(*, suite_path: str | None, staging_dir: str, partitions: Sequence[str],
                    counts: dict[str, Any], prev_state_dir: str | None, report_root: str, run_name: str,
                    table: str = "table", max_malformed_ratio: float = 0.05, engine: str = "pandas",
                    spark: Any = None, parameters: dict[str, Any] | None = None,
                    storage_options: dict[str, Any] | None = None,
                    file_rows: dict[str, dict[str, int]] | None = None) -> ValidationOutcome:
    """Validate the staged output of one transaction; store and render the results as Data Docs.

    Contract:
    * reads ``<staging_dir>/data/<partition>/`` (parquet) for every owned partition, and - for a
      checkpoint suite - ``<staging_dir>/_state/`` and ``prev_state_dir`` (the previous committed
      checkpoint's state; None for the first interval). ``counts`` is the write job's ``_counts.json``.
      Reads only: the staging dir is never modified.
    * ``engine="pandas"`` reads with pyarrow (no JVM); ``"spark"`` reads with ``spark`` and validates the
      data suite with GX's Spark datasource. The derived frames are small and always use pandas.
    * fails (``passed=False``) if any expectation of any suite fails or the counts break their contract;
      raises ConfigError for a misconfiguration (missing suite file, unknown engine, bad threshold) and
      StorageError when ``prev_state_dir`` is given but missing.
    * appends every suite result to the report site under ``report_root`` (one page per suite, index of
      all runs); ``run_name`` (an allow-listed name, e.g. ``<pipeline>.<txn>``) groups them. A local
      ``report_root`` is one machine's; a storage URL (``s3://...``, with ``storage_options``) is shared
      by every worker of a fleet (:mod:`exactly_once.quality.gx`).
    * ``storage_options`` go to s3fs for ``s3://`` URLs (pandas engine).
    * ``file_rows`` (the rows per file the manifest sealed for the partitions of several files - the job's,
      ``_file_rows.json``, where pre_commit took them): each file's rows as read must equal them
      (``rows_written_gap``).
    """
    t0, cpu0 = time.perf_counter(), time.process_time()
    check_name(run_name, "run name", max_len=200)  # <pipeline (<= 128)>.<txn (41)>
    check_name(table, "table name")
    for p in partitions:
        check_partition(p)
    if not 0 <= max_malformed_ratio <= 1 or math.isnan(max_malformed_ratio):
        raise ConfigError(f"max_malformed_ratio must be within [0, 1], not {max_malformed_ratio}")
    if not is_remote(report_root):
        local_root(report_root)  # a bad local root fails before anything is read
    suites = load_suites(suite_path, table)
    timings: dict[str, float] = {}

    quiet_gx()
    mark = time.perf_counter()
    import great_expectations as gx  # heavy (seconds): only the validate task pays for it

    gx_fast.install()  # GX's bookkeeping per expectation, cheaper; results unchanged
    timings["gx_import_ms"] = _ms(mark)
    mark = time.perf_counter()
    reader = FrameReader(engine, spark, storage_options)
    frames = build_frames(reader, staging_dir=staging_dir, partitions=partitions, counts=counts, file_rows=file_rows)
    files = ["the built-in completeness suite", *_paths(suite_path)]
    runs = _suite_runs(gx, suites, files, frames, engine, reader, staging_dir, prev_state_dir)
    timings["read_ms"] = _ms(mark)

    params = {"max_malformed_ratio": max_malformed_ratio, **(parameters or {})}
    remote = report_root.rstrip("/") if is_remote(report_root) else None
    with site(report_root) as root:  # the report root, or a private dir published to it (a fleet)
        mark = time.perf_counter()
        context = make_context(root)
        results, ids = run_suites(context, runs, run_name=run_name, parameters=params)
        timings["validate_ms"] = _ms(mark)
        mark = time.perf_counter()
        pages = build_docs(context, root, results, ids, {"partition": ",".join(partitions)},
                           publish_to=remote, storage_options=storage_options)
        timings["docs_ms"] = _ms(mark)
    root = remote or root

    failures = frames.problems + [explain(line, frames, max_malformed_ratio) if i == 0 else line
                                  for i, result in enumerate(results) for line in failure_lines(result)]
    reports = {run.suite.name: page for run, page in zip(runs, pages)}
    failed_pages = [page for result, page in zip(results, pages) if not result.success]
    passed = not frames.problems and all(result.success for result in results)
    summary = _summary(frames, runs, results, pages, root, partitions, engine, max_malformed_ratio)
    # this process's CPU time: below duration_ms when other processes share the CPU (or it waits on I/O)
    timings["cpu_ms"] = round((time.process_time() - cpu0) * 1000, 1)
    summary.update(passed=passed, failed_expectations=len(failures), timings_ms=timings,
                   duration_ms=_ms(t0))
    table_pages = [page for run, page in zip(runs, pages) if not run.suite.name.endswith(".completeness")]
    return ValidationOutcome(passed=passed, failures=failures, summary=summary,
                             report_path=(failed_pages or table_pages or pages or [None])[0], reports=reports)


def explain(line: str, frames: Frames, max_ratio: float) -> str:
    """A failed line of the completeness suite with what it is about: the option that sets the limit and
    its value (``max_malformed_ratio``), or the numbers per partition behind a gap."""
    row = frames.counts.iloc[0].to_dict()
    if line.startswith("expect_column_values_to_be_between(rejected_ratio):"):
        return (f"{line} (max_malformed_ratio = {max_ratio}: {_plain(row.get('records_rejected'))} of "
                f"{_plain(row.get('records_in'))} input records were rejected, a share of "
                f"{_plain(row.get('rejected_ratio'))}; fix the input, or raise the pipeline's max_malformed_ratio "
                "if this share is normal)")
    differ, files = frames.notes.get("rows_written_vs_staged"), frames.notes.get("file_rows_vs_staged")
    if line.startswith("expect_column_values_to_be_between(rows_written_gap):") and (differ or files):
        shown = "; ".join(f"{p}: job reported {reported}, staged {staged}" for p, (reported, staged) in (differ or {}).items())
        per_file = "; ".join(f"{f}: job counted {counted}, staged {staged}" for f, (counted, staged) in (files or {}).items())
        return (f"{line} (" + "; ".join(filter(None, [shown and f"rows_written per partition: {shown}",
                                                      per_file and f"rows per file (_file_rows.json): {per_file}"])) + ")")
    return line


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


def _suite_runs(gx: Any, suites: list[tuple[str, dict[str, Any]]], files: list[str], frames: Frames, engine: str,
                reader: FrameReader, staging_dir: str, prev_state_dir: str | None) -> list[SuiteRun]:
    runs = []
    for (frame_name, data), path in zip(suites, files):
        suite = gx_suite(gx, data, path)  # GX's own check of every expectation, named by file and field
        eo = (data.get("meta") or {}).get("eo") or {}
        keys = list(eo.get("key_columns", []))
        name = str(data.get("name", "?"))
        if frame_name == "data":  # (fill/derive on it were refused by read_suite)
            frame, frame_engine = frames.data, engine
        elif frame_name == "counts":
            frame, frame_engine = apply_derivations(frames.counts, eo, name), "pandas"
        else:
            frame = read_checkpoint(reader, frames.data, staging_dir=staging_dir, prev_state_dir=prev_state_dir,
                                    keys=keys)
            if frame is None:
                continue  # the data lacks the key columns: the data suite fails then
            frame, frame_engine = apply_derivations(frame, eo, name), "pandas"
        key_columns = [c for c in keys if c in list(frame.columns)]
        runs.append(SuiteRun(suite=suite, frame=frame, engine=frame_engine, key_columns=key_columns,
                             source=json.dumps(data, sort_keys=True, default=str)))
    return runs


def _summary(frames: Frames, runs: list[SuiteRun], results: list[Any], pages: list[str], root: str,
             partitions: Sequence[str], engine: str, max_ratio: float) -> dict[str, Any]:
    row = frames.counts.iloc[0].to_dict()
    return {
        "engine": engine, "partitions": list(partitions), "rows": frames.rows,
        "rejected_ratio": _plain(row.get("rejected_ratio")), "max_malformed_ratio": max_ratio,
        "completeness_gap": _plain(row.get("completeness_gap")),
        "measured": {str(k): _plain(v) for k, v in row.items()},  # what the counts suite checked
        "suites": {run.suite.name: {"success": bool(res.success),
                                    "evaluated": res.statistics.get("evaluated_expectations"),
                                    "failed": res.statistics.get("unsuccessful_expectations"),
                                    "report": page}
                   for run, res, page in zip(runs, results, pages)},
        "index_path": f"{root}/index.html", **{k: v for k, v in frames.notes.items()},
    }


# ---------------------------------------------------------------------------------------- failure lines
def _plain(value: Any) -> Any:
    """JSON/human-friendly scalar: numpy -> Python, 3.0 -> 3, NaN -> None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(value) if value.is_integer() else round(value, 6)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _domain(kwargs: dict[str, Any]) -> list[str]:
    """The column(s) an expectation is about ([] for a table expectation)."""
    if "column" in kwargs:
        return [str(kwargs["column"])]
    if "column_A" in kwargs:
        return [str(kwargs["column_A"]), str(kwargs["column_B"])]
    return list(kwargs.get("column_list") or [])


def _expected(kind: str, kw: dict[str, Any]) -> str:
    """The rule of an expectation in a few words, from its (parameter-resolved) kwargs."""
    if "min_value" in kw or "max_value" in kw:
        lo, hi = _plain(kw.get("min_value")), _plain(kw.get("max_value"))
        if lo is not None and lo == hi:
            return f"== {lo}"
        parts = ([f">= {lo}"] if lo is not None else []) + ([f"<= {hi}"] if hi is not None else [])
        return " and ".join(parts) or "any"
    if "column_A" in kw:
        a, b = kw["column_A"], kw["column_B"]
        if kind.endswith("a_to_be_greater_than_b"):
            return f"{a} {'>=' if kw.get('or_equal') else '>'} {b}"
        if kind.endswith("to_be_equal"):
            return f"{a} == {b}"
        if "value_pairs_set" in kw:
            return f"({a}, {b}) in {_plain(kw['value_pairs_set'])}"
    if "column_set" in kw:
        return f"columns {sorted(kw['column_set'])}" + (" exactly" if kw.get("exact_match", True) else "")
    if "type_list" in kw:
        return f"type in {kw['type_list']}"
    if "type_" in kw:
        return f"type {kw['type_']}"
    if "value_set" in kw:
        values = kw["value_set"]
        for ending, words in (("not_be_in_set", "values not in"), ("distinct_values_to_contain_set",
                              "distinct values include"), ("distinct_values_to_equal_set", "distinct values exactly"),
                              ("distinct_values_to_be_in_set", "distinct values in")):
            if kind.endswith(ending):
                return f"{words} {values}"
        return f"values in {values}"
    if kind.endswith("not_be_null"):
        return "no nulls"
    if kind.endswith("to_be_unique"):
        return "unique values"
    if "value" in kw:
        return f"== {_plain(kw['value'])}"
    return json.dumps({k: v for k, v in kw.items() if k != "batch_id"}, default=str)


def _observed(result: dict[str, Any], domain: list[str]) -> str:
    """``observed <v>`` (aggregate or one-row frame) or ``<n> unexpected of <m> rows: <key>=<k> (<values>)``."""
    if "observed_value" in result:
        return f"observed {_plain(result['observed_value'])}"
    unexpected, total = result.get("unexpected_count"), result.get("element_count")
    sample = _plain(result.get("partial_unexpected_list") or [])
    if total == 1 and sample:
        return f"observed {sample[0]}"
    if unexpected is None:
        return "observed nothing"
    rows = [r for r in result.get("partial_unexpected_index_list") or [] if isinstance(r, dict)][:5]
    if rows:  # rows identified by the suite's key columns, with the offending values
        shown = [" ".join(f"{k}={_plain(v)}" for k, v in r.items() if k not in domain)
                 + " (" + ", ".join(f"{k}={_plain(r[k])}" for k in domain if k in r) + ")" for r in rows]
        detail = "; ".join(shown)
    else:
        detail = f"values {sample[:5]}" if sample else ""
    return f"{unexpected} unexpected of {total} rows" + (f": {detail}" if detail else "")


def _exception(info: Any) -> str | None:
    """First line of the exception GX caught while evaluating an expectation, if any."""
    infos = [info] if isinstance(info, dict) and "raised_exception" in info else \
        list(info.values()) if isinstance(info, dict) else []
    for item in infos:
        if isinstance(item, dict) and item.get("raised_exception"):
            return (item.get("exception_message") or "error").strip().splitlines()[0][:300]
    return None


def failure_lines(suite_result: Any) -> list[str]:
    """One line per failed expectation of a GX ``ExpectationSuiteValidationResult``."""
    lines = []
    table_first = sorted(suite_result.results, key=lambda r: bool(_domain(dict(r.expectation_config.kwargs))))
    for r in table_first:
        if r.success:
            continue
        kind, kwargs = r.expectation_config.type, dict(r.expectation_config.kwargs)
        domain = _domain(kwargs)
        head = f"{kind}({', '.join(domain) or 'table'})"
        error = _exception(r.exception_info)
        if error:
            lines.append(f"{head}: error {error}")
        else:
            lines.append(f"{head}: {_observed(r.result or {}, domain)}, expected {_expected(kind, kwargs)}")
    return lines
