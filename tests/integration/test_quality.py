"""The completeness / data-quality gate (DESIGN §4 step 4): GX 1.x suites on crafted staged dirs.

Every failing case is one well-formed interval with exactly one thing broken; each must fail with the
right one-line message. Both engines run on the same data; the Data Docs report is rendered headless.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REQUIRE, ROOT

from exactly_once.errors import UnsafeIdentifierError
from exactly_once.quality import ValidationOutcome, validate_staged

SUITE = str(ROOT / "expectations" / "app_pv.json")
PART = "dt=2024-01-02"
CHROMIUM = "/usr/bin/chromium"

# a consistent interval: prev state {a: 10, z: 4}; this interval a: 5 pv, b: 3, c: 1
GOOD: dict[str, Any] = {
    "data": {"app_id": ["a", "b", "c"], "pv": [5, 3, 1], "uv": [2, 3, 1], "cumulative_pv": [15, 3, 1]},
    "state": {"app_id": ["a", "b", "c", "z"], "cumulative_pv": [15, 3, 1, 4]},
    "prev": {"app_id": ["a", "z"], "cumulative_pv": [10, 4]},
    "counts": {"version": 1, "records_in": 110, "records_rejected": 2, "records_deduplicated": 8,
               "records_out": 100, "rows_written": {PART: 3}, "state_rows": 4, "input_files": 2,
               "input_bytes": 12345, "rejected_by_reason": {"not_json": 2}, "metrics": {"page_views": 9}},
}


def write_parquet(path: Path, columns: dict[str, list]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    types = {"app_id": pa.string()}
    table = pa.table({k: pa.array(v, types.get(k, pa.int64())) for k, v in columns.items()})
    pq.write_table(table, path / "part-00000.parquet")
    (path / "_SUCCESS").write_text("")


def stage(base: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Write a staged dir (+ previous state) for ``spec``; return validate_staged's data arguments."""
    staging = base / "staging"
    write_parquet(staging / "data" / PART, spec["data"])
    write_parquet(staging / "_state", spec["state"])
    (staging / "_quarantine").mkdir()
    prev = None
    if spec["prev"] is not None:
        prev = base / "prev_state"
        write_parquet(prev, spec["prev"])
    return {"staging_dir": str(staging), "partitions": [PART], "counts": spec["counts"],
            "prev_state_dir": str(prev) if prev else None}


def run(tmp_path: Path, mutate: Callable[[dict], None] | None = None, *, name: str = "case",
        report_root: Path | None = None, **kwargs: Any) -> ValidationOutcome:
    spec = copy.deepcopy(GOOD)
    if mutate:
        mutate(spec)
    args = stage(tmp_path / name, spec)
    return validate_staged(**{"suite_path": SUITE, "table": "app_pv", "run_name": f"pv_pipeline.{name}",
                              "report_root": str(report_root or tmp_path / "reports"), **args, **kwargs})


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A mutation that sets ``spec[a][b]`` (for ``path = "a.b"``)."""
    def mutate(spec: dict) -> None:
        section, key = path.split(".")
        spec[section][key] = value
    return mutate


def _drop_uv(spec: dict) -> None:
    del spec["data"]["uv"]


def _more_malformed(spec: dict) -> None:
    spec["counts"].update(records_in=120, records_rejected=12)  # 10% malformed, still adds up


def _prev_ahead(spec: dict) -> None:
    spec["prev"]["cumulative_pv"] = [20, 4]  # a was at 20: 15 now would go backwards
    spec["state"]["cumulative_pv"] = [15, 3, 1, 4]


FAILING = {
    "missing_column": (_drop_uv, r"^expect_table_columns_to_match_set\(table\): observed \['app_id', "
                                 r"'cumulative_pv', 'pv'\], expected columns \[.*\] exactly$"),
    "null_key": (_set("data.app_id", ["a", None, "c"]),
                 r"^expect_column_values_to_not_be_null\(app_id\): 1 unexpected of 3 rows"),
    "duplicate_key": (_set("data.app_id", ["a", "b", "b"]),
                      r"^expect_column_values_to_be_unique\(app_id\): 2 unexpected of 3 rows"),
    "too_many_malformed": (_more_malformed, r"^expect_column_values_to_be_between\(rejected_ratio\): "
                                            r"observed 0\.1, expected >= 0 and <= 0\.05 \(max_malformed_ratio = 0\.05: "
                                            r"12 of 120 input records were rejected, a share of 0\.1;"),
    "lines_do_not_add_up": (_set("counts.records_in", 111), r"^expect_column_values_to_be_between"
                            r"\(completeness_gap\): observed 1, expected == 0$"),
    "page_views_do_not_add_up": (_set("counts.metrics", {"page_views": 8}),
                                 r"^expect_column_values_to_be_between\(page_views_gap\): observed -1"),
    "rows_written_wrong": (_set("counts.rows_written", {PART: 4}),
                           r"^expect_column_values_to_be_between\(rows_written_gap\): observed 1, expected == 0 "
                           r"\(rows_written per partition: dt=2024-01-02: job reported 4, staged 3\)$"),
    "unowned_partition": (_set("counts.rows_written", {PART: 3, "dt=2024-01-03": 0}),
                          r"^expect_column_values_to_be_between\(unowned_partitions\): observed 1"),
    "count_missing": (lambda s: s["counts"].pop("records_out"),
                      r"^expect_column_values_to_not_be_null\(records_out\): observed None"),
    "counts_break_contract": (_set("counts.records_rejected", -1),
                              r"^counts do not follow the contract: counts: records_rejected must be a non-negative"),
    "pv_below_uv": (_set("data.uv", [2, 3, 2]),
                    r"^expect_column_pair_values_a_to_be_greater_than_b\(pv, uv\): 1 unexpected of 3 rows: "
                    r"app_id=c \(pv=1, uv=2\), expected pv >= uv$"),
    "cumulative_backwards": (_prev_ahead,
                             r"^expect_column_pair_values_a_to_be_greater_than_b"
                             r"\(cumulative_pv, prev_cumulative_pv\)"
                             r": 1 unexpected of 4 rows: app_id=a \(cumulative_pv=15, prev_cumulative_pv=20\)"),
}


def test_consistent_interval_passes_and_reports(tmp_path, caplog):
    """... and without GX's INFO chatter "Skipping registering function ... because it is a closure" (for every
    data context: ~200 lines in each validate task's log); the gate quiets only that logger."""
    import logging

    with caplog.at_level(logging.INFO):
        outcome = run(tmp_path, name="good")
    assert not [r for r in caplog.records if r.name.startswith("great_expectations._docs_decorators")]
    assert outcome.passed, outcome.failures
    assert outcome.failures == []
    summary = outcome.summary
    assert set(summary["suites"]) == {"app_pv.completeness", "app_pv", "app_pv.counts", "app_pv.checkpoint"}
    assert all(s["success"] and s["evaluated"] > 0 for s in summary["suites"].values())
    assert summary["rows"] == 3 and summary["rejected_ratio"] == round(2 / 110, 6)
    assert summary["duration_ms"] > 0 and set(summary["timings_ms"]) >= {"read_ms", "validate_ms", "docs_ms"}
    assert outcome.report_path == summary["suites"]["app_pv"]["report"]
    assert os.path.isfile(outcome.report_path) and outcome.report_path.startswith(str(tmp_path / "reports"))


def test_first_interval_has_no_previous_state(tmp_path):
    def first(spec: dict) -> None:
        spec["prev"] = None
        spec["data"]["cumulative_pv"] = [5, 3, 1]
        spec["state"] = {"app_id": ["a", "b", "c"], "cumulative_pv": [5, 3, 1]}
    outcome = run(tmp_path, first, name="first")
    assert outcome.passed, outcome.failures


@pytest.mark.parametrize("case", sorted(FAILING))
def test_broken_interval_fails_with_one_line_per_expectation(tmp_path, case):
    mutate, pattern = FAILING[case]
    outcome = run(tmp_path, mutate, name=case)
    assert not outcome.passed
    assert any(re.search(pattern, line) for line in outcome.failures), outcome.failures
    assert all("\n" not in line for line in outcome.failures)
    assert os.path.isfile(outcome.report_path)  # the page of the first failed suite
    failed = [name for name, s in outcome.summary["suites"].items() if not s["success"]]
    assert outcome.report_path == outcome.summary["suites"][failed[0]]["report"]


def test_the_longest_pipeline_names_runs_are_validated_and_reported(tmp_path):
    """A pipeline (DAG id) of 128 characters - the most a name may have - gives a 170-character run name
    (``<pipeline>.<txn>``): validated and on the index, not refused as unsafe (it was, and every run failed)."""
    run_name = f"{'p' * 128}.20130101T000000Z_20130201T000000Z.e000001"
    outcome = run(tmp_path, name="long", run_name=run_name)
    assert outcome.passed, outcome.failures
    assert run_name in (tmp_path / "reports" / "index.html").read_text()
    with pytest.raises(UnsafeIdentifierError, match="at most 200"):
        run(tmp_path, name="longer", run_name="p" * 201)


def test_malformed_threshold_is_configurable(tmp_path):
    assert run(tmp_path, _more_malformed, name="lenient", max_malformed_ratio=0.2).passed
    strict = run(tmp_path, _more_malformed, name="strict")  # default 0.05
    assert not strict.passed
    assert strict.failures == ["expect_column_values_to_be_between(rejected_ratio): observed 0.1, "
                               "expected >= 0 and <= 0.05 (max_malformed_ratio = 0.05: 12 of 120 input records "
                               "were rejected, a share of 0.1; fix the input, or raise the pipeline's "
                               "max_malformed_ratio if this share is normal)"]


def test_index_lists_every_run_across_intervals(tmp_path):
    reports = tmp_path / "shared_reports"
    ok = run(tmp_path, name="day1", report_root=reports)
    bad = run(tmp_path, _set("counts.records_in", 111), name="day2", report_root=reports)
    assert ok.passed and not bad.passed
    assert os.path.isfile(ok.report_path) and os.path.isfile(bad.report_path)
    index = (reports / "index.html").read_text()
    rows = re.findall(r'<tr class="eo-run (eo-ok|eo-failed)">(.*?)</tr>', index)
    assert len(rows) == 8  # 4 suites x 2 runs
    for outcome, run_name, status in ((ok, "pv_pipeline.day1", "Succeeded"), (bad, "pv_pipeline.day2", "Failed")):
        page = os.path.relpath(outcome.report_path, reports)
        assert any(run_name in r and status in r and page in r for _, r in rows)
    assert "great-expectations-web-assets" not in index  # no remote tracking image


_OPENED: list[str] | None = None  # paths opened while a test records them (an audit hook cannot be removed)


_LISTED: list[str] | None = None  # directories listed meanwhile (os.scandir, os.listdir: os.walk too)


def _record_opens(event: str, args: tuple) -> None:
    if not args or not isinstance(args[0], (str, os.PathLike)):
        return
    if _OPENED is not None and event == "open":
        _OPENED.append(os.fspath(args[0]))
    if _LISTED is not None and event in ("os.scandir", "os.listdir"):
        _LISTED.append(os.path.abspath(os.fspath(args[0])))


def test_a_run_reads_no_earlier_runs_results_and_the_index_shows_the_newest(tmp_path, monkeypatch):
    # GX's own index builder re-reads every stored validation result on each build, and its section
    # builder lists (walks) every stored result to pick the ones to render: O(history) per run
    global _OPENED, _LISTED
    reports = tmp_path / "shared_reports"
    for day in (1, 2):
        assert run(tmp_path, name=f"day{day}", report_root=reports).passed
    earlier = {str(p) for p in (reports / "_gx" / "validations").rglob("*.json")}
    assert len(earlier) == 8  # 4 suites x 2 runs
    monkeypatch.setattr("exactly_once.quality.gx.INDEX_ROWS", 4)
    sys.addaudithook(_record_opens)
    _OPENED, _LISTED = [], []
    try:
        assert run(tmp_path, name="day3", report_root=reports).passed
        opened, listed = set(_OPENED), set(_LISTED)
    finally:
        _OPENED = _LISTED = None
    assert not earlier & opened, sorted(earlier & opened)[:3]
    results = str((reports / "_gx" / "validations").resolve())
    assert not [p for p in listed if p == results or p.startswith(results + os.sep)], sorted(listed)[:5]
    index = (reports / "index.html").read_text()
    rows = re.findall(r'<tr class="eo-run eo-ok">(.*?)</tr>', index)
    assert len(rows) == 4 and all("pv_pipeline.day3" in r for r in rows)  # the newest run's 4 suites
    assert "Validation runs (12)" in index and "8 older runs are not listed here" in index
    for suite in ("app_pv", "app_pv.counts", "app_pv.checkpoint", "app_pv.completeness"):  # dotted: nested
        page = "expectations/" + suite.replace(".", "/") + ".html"
        assert f'<a href="{page}">{suite}</a>' in index and (reports / page).is_file()


def test_typical_output_cost(tmp_path):
    apps = [f"app{i:05d}" for i in range(5000)]
    pv = [1 + i % 50 for i in range(5000)]

    def typical(spec: dict) -> None:
        spec["data"] = {"app_id": apps, "pv": pv, "uv": [max(1, p // 2) for p in pv], "cumulative_pv": pv}
        spec["state"] = {"app_id": apps, "cumulative_pv": pv}
        spec["prev"] = None
        total = sum(pv)
        spec["counts"].update(records_in=total + 10, records_rejected=0, records_deduplicated=10, records_out=total,
                              metrics={"page_views": total}, rows_written={PART: 5000}, rejected_by_reason={})
    run(tmp_path, typical, name="warmup")
    outcome = run(tmp_path, typical, name="typical")
    assert outcome.passed, outcome.failures
    print(f"\nvalidate 5000 apps (pandas): {outcome.summary['duration_ms']} ms {outcome.summary['timings_ms']}")
    assert outcome.summary["duration_ms"] < 30_000


def test_spark_engine_gives_the_same_verdicts(tmp_path, spark):
    # GX on Spark runs one small Spark job per metric (~5 s per suite here): two cases only
    for name, mutate in (("spark_good", None), ("spark_pv_below_uv", FAILING["pv_below_uv"][0])):
        by_engine = {engine: run(tmp_path / engine, mutate, name=name, engine=engine, spark=spark)
                     for engine in ("pandas", "spark")}
        pandas_out, spark_out = by_engine["pandas"], by_engine["spark"]
        assert spark_out.passed == pandas_out.passed == (mutate is None)
        assert spark_out.summary["engine"] == "spark"
        assert "eo_spark" in spark_out.summary["suites"]["app_pv"]["report"]
        assert spark_out.failures == pandas_out.failures


def _chromium(url: str, user_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={user_dir}", "--window-size=1280,900", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True)


def _visible_text(dom: str) -> str:
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S | re.I)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)).replace("&amp;", "&")


def test_report_renders_in_a_headless_browser(tmp_path):
    if not os.path.exists(CHROMIUM):
        if REQUIRE:
            pytest.fail(f"{CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    reports = tmp_path / "reports"
    run(tmp_path, name="render_ok", report_root=reports)
    bad = run(tmp_path, FAILING["pv_below_uv"][0], name="render_bad", report_root=reports)
    page = f"file://{bad.report_path}"
    png = tmp_path / "report.png"
    _chromium(page, tmp_path / "chrome", f"--screenshot={png}")
    assert png.stat().st_size > 10_000  # a blank 1280x900 page is ~4 KB
    text = _visible_text(_chromium(page, tmp_path / "chrome", "--dump-dom").stdout)
    assert "Expectation Suite: app_pv" in text and "Status: Failed" in text
    assert "must always be greater than or equal to those in uv" in text and "FAILED" in text
    assert "values must never be null" in text
    index = _visible_text(_chromium(f"file://{reports}/index.html", tmp_path / "chrome", "--dump-dom").stdout)
    assert "pv_pipeline.render_ok" in index and "pv_pipeline.render_bad" in index
    assert "Succeeded" in index and "Failed" in index
    if os.environ.get("EO_KEEP_SCREENSHOT"):
        shutil.copy(png, os.environ["EO_KEEP_SCREENSHOT"])


def test_an_expectation_gx_refuses_is_a_config_error_naming_the_file_and_the_argument(tmp_path):
    """Issue 28: GX's own (pydantic) refusal of an argument surfaced as a raw traceback without the
    suite's file name, and was retried. It is a ConfigError (final) naming file, expectation and field."""
    from exactly_once.errors import ConfigError

    suite = tmp_path / "bad.json"
    suite.write_text('{"name": "bad", "expectations": [{"type": "expect_column_values_to_be_between", '
                     '"kwargs": {"column": "pv", "min_value": "zero", "max_value": 10}}]}')
    args = stage(tmp_path / "bad", copy.deepcopy(GOOD))
    with pytest.raises(ConfigError, match=r"bad\.json: expectations\[0\] \(expect_column_values_to_be_between\): "
                                          r"kwargs\.min_value: "):
        validate_staged(suite_path=str(suite), table="app_pv", report_root=str(tmp_path / "reports"),
                        run_name="pv_pipeline.bad", **args)
    assert not (tmp_path / "reports" / "index.html").exists()  # refused before any result was stored


@pytest.mark.s3
def test_a_fleet_shares_one_report_site_on_s3(tmp_path, s3_server, monkeypatch):
    """Issue 29: validations on two workers that share no disk (each its own TMPDIR) publish into one Data
    Docs site on S3: both runs' pages are there, the index lists both, the plugin's links and its reader
    serve them (and refuse an escape). A local report root was each worker's own: the UI found a page only
    on the machine that validated, and each worker's index listed its own runs (a URL root was refused)."""
    from conftest import make_bucket

    from exactly_once import reports
    from exactly_once.airflow.files import read_url_under
    from exactly_once.errors import UnsafeIdentifierError
    from exactly_once.storage import storage_for

    root = f"s3://{make_bucket(s3_server)}/reports"
    monkeypatch.setenv("EO_REPORTS_DIR", root)
    outcomes = []
    for worker in ("a", "b"):
        private = tmp_path / f"worker-{worker}"
        (private / "tmp").mkdir(parents=True)
        monkeypatch.setenv("TMPDIR", str(private / "tmp"))
        import tempfile

        monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR: the worker's own temp dir
        outcomes.append(run(private, name=f"on{worker}", report_root=f"{root}/data_docs"))
        assert not list((private / "tmp").iterdir()), "the private build dir is removed"
    assert all(o.passed for o in outcomes)
    store, base = storage_for(root)
    for o in outcomes:
        assert o.report_path.startswith(f"{root}/data_docs/validations/")
        assert store.exists(o.report_path[len("s3://"):])
        link = reports.report_link(o.report_path)
        assert link.startswith("/eo/reports/data_docs/validations/")
        page = read_url_under(root, link[len("/eo/reports/"):])
        assert page.media_type == "text/html" and b"pv_pipeline.on" in page.content
    index = read_url_under(root, "data_docs/").content.decode()
    assert "Validation runs (8)" in index  # 4 suites x 2 workers
    assert "pv_pipeline.ona" in index and "pv_pipeline.onb" in index
    assert '<a href="expectations/app_pv.html">app_pv</a>' in index
    assert read_url_under(root, "data_docs/validations").directory
    for bad in ("../x", "data_docs/../../etc/passwd", "data_docs//index.html"):
        with pytest.raises(UnsafeIdentifierError):
            read_url_under(root, bad)
    with pytest.raises(FileNotFoundError):
        read_url_under(root, "data_docs/no-such.html")

