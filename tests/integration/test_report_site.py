"""The gate's report site and GX state across validations and processes: what a run stores, which suite pages
it renders, a suite saved by another process meanwhile, pages GX did not render, and the report templates an
earlier process compiled. The staged intervals are test_quality's."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_quality import GOOD, SUITE, _set, run, stage

from exactly_once.quality import ValidationOutcome


def test_a_passing_suite_stores_the_basic_result_and_a_failing_one_the_details_and_suite_pages_render_once(
        tmp_path, monkeypatch):
    # what a batch of hundreds of intervals saves per validation: a passing suite skips the failure details
    # (SUMMARY: value counts, the failing rows' keys) and a suite page this process rendered is not rendered again
    reports = tmp_path / "shared_reports"
    page = reports / "expectations" / "app_pv" / "checkpoint.html"
    assert run(tmp_path, name="day1", report_root=reports).passed
    first = page.stat().st_mtime_ns
    bad = run(tmp_path, _set("prev.cumulative_pv", [20, 4]), name="day2", report_root=reports)
    assert not bad.passed and page.stat().st_mtime_ns == first
    assert any("app_id=a (cumulative_pv=15, prev_cumulative_pv=20)" in line for line in bad.failures)

    def stored(run_name: str) -> dict[str, dict]:
        out = {}
        for path in (reports / "_gx" / "validations").rglob("*.json"):
            if run_name in path.parts:
                with open(path) as f:
                    result = json.load(f)
                out[result["suite_name"]] = result
        return out
    passing, failing = stored("pv_pipeline.day1"), stored("pv_pipeline.day2")
    assert set(passing) == set(failing) == {"app_pv", "app_pv.counts", "app_pv.checkpoint", "app_pv.completeness"}
    assert not any("partial_unexpected_counts" in r["result"] for s in passing.values() for r in s["results"])
    failed = [r for r in failing["app_pv.checkpoint"]["results"] if not r["success"]]
    assert failed and all(r["result"]["partial_unexpected_index_list"] for r in failed)  # the keys of its rows
    monkeypatch.setattr("exactly_once.quality.gx._CONTEXTS", {})  # as in the next task's process
    assert run(tmp_path, name="day3", report_root=reports).passed and page.stat().st_mtime_ns == first
    page.unlink()  # gone (a cleanup): rendered again
    assert run(tmp_path, name="day4", report_root=reports).passed and page.is_file()
    changed = tmp_path / "suite.json"  # the suite file changed: its pages are rendered anew
    suite = json.loads(Path(SUITE).read_text())
    suite["expectations"] = suite["expectations"][:-1]
    changed.write_text(json.dumps(suite))
    table_page = reports / "expectations" / "app_pv.html"
    before, table_before = page.stat().st_mtime_ns, table_page.stat().st_mtime_ns
    assert run(tmp_path, name="day5", report_root=reports, suite_path=str(changed)).passed
    assert page.stat().st_mtime_ns == before and table_page.stat().st_mtime_ns > table_before


def test_a_suite_another_process_saved_meanwhile_is_saved_again_and_each_version_checks_its_own(
        tmp_path, monkeypatch):
    """A process's GX context keeps each suite's validation definition (a batch's host validates hundreds of
    intervals with it). Another process saving another version of the suite in the shared report root makes
    this one's stale: the next validation here saves its own version again and checks its own expectations.
    Another version in the same process is registered anew and checks its own too."""
    from exactly_once.quality import gx as G

    reports = tmp_path / "shared_reports"
    shorter = tmp_path / "suite.json"
    suite = json.loads(Path(SUITE).read_text())
    n = len(suite["expectations"])
    suite["expectations"] = suite["expectations"][:-2]
    shorter.write_text(json.dumps(suite))

    def checked(outcome: ValidationOutcome) -> int:
        assert outcome.passed, outcome.failures
        return outcome.summary["suites"]["app_pv"]["evaluated"]

    def stored() -> int:
        return len(json.loads((reports / "_gx" / "expectations" / "app_pv.json").read_text())["expectations"])

    assert checked(run(tmp_path, name="day1", report_root=reports)) == n
    mine = dict(G._CONTEXTS)
    monkeypatch.setattr(G, "_CONTEXTS", {})  # another process: a context of its own, the shorter version
    assert checked(run(tmp_path, name="day2", report_root=reports, suite_path=str(shorter))) == n - 2
    assert stored() == n - 2
    monkeypatch.setattr(G, "_CONTEXTS", mine)  # this process again: its definition's suite went stale
    assert checked(run(tmp_path, name="day3", report_root=reports)) == n and stored() == n
    assert checked(run(tmp_path, name="day4", report_root=reports, suite_path=str(shorter))) == n - 2
    assert checked(run(tmp_path, name="day5", report_root=reports)) == n and stored() == n


def test_a_suite_page_gx_did_not_render_is_rendered_by_the_next_validation(tmp_path, monkeypatch):
    """GX logs a page it cannot render and goes on: the suite page then still shows the suite's previous version,
    so it is not marked as current - the next validation of that version renders it."""
    from exactly_once.quality.gx_view import KeyedSiteSectionBuilder

    reports = tmp_path / "shared_reports"
    page = reports / "expectations" / "app_pv.html"
    shorter = tmp_path / "suite.json"
    suite = json.loads(Path(SUITE).read_text())
    suite["expectations"] = suite["expectations"][:-1]
    shorter.write_text(json.dumps(suite))
    assert run(tmp_path, name="day1", report_root=reports).passed
    first = page.read_text()
    real = KeyedSiteSectionBuilder.build
    monkeypatch.setattr(KeyedSiteSectionBuilder, "build", lambda self, resource_identifiers=None: (
        None if self.name == "expectations" else real(self, resource_identifiers)))  # no suite page written
    assert run(tmp_path, name="day2", report_root=reports, suite_path=str(shorter)).passed
    assert page.read_text() == first  # the previous version's page, as GX left it
    monkeypatch.setattr(KeyedSiteSectionBuilder, "build", real)
    assert run(tmp_path, name="day3", report_root=reports, suite_path=str(shorter)).passed
    assert page.read_text() != first  # rendered from the version validated


def test_a_run_page_gx_did_not_render_fails_the_validation_with_what_to_do(tmp_path, monkeypatch):
    from great_expectations.render.renderer.site_builder import SiteBuilder

    from exactly_once.errors import StorageError

    monkeypatch.setattr(SiteBuilder, "get_resource_url", lambda self, resource_identifier=None, **kw: None)
    with pytest.raises(StorageError, match=r"rendered no report page for app_pv\.completeness under .*the verdict "
                                           r"was not recorded, and a retry of the validate task validates again"):
        run(tmp_path, name="day1")


_COMPILES = """
import json, sys
import jinja2
compiled = []
real = jinja2.Environment.compile
jinja2.Environment.compile = lambda self, source, name=None, *a, **k: (  # a template file, not a string
    compiled.append(name) if name else None) or real(self, source, name, *a, **k)
from exactly_once.quality import validate_staged
outcome = validate_staged(**json.loads(sys.argv[1]))
print(json.dumps({"passed": outcome.passed, "compiled": len(compiled)}))
"""


def test_a_new_process_loads_the_report_templates_an_earlier_one_compiled(tmp_path):
    """A validate task is a new process: it loads the Data Docs templates an earlier validation compiled from
    Jinja's per-user cache directory (under the temp dir) instead of compiling them again (~50 ms a task).
    Where that directory is not safe to use, the validation compiles them, as before."""
    args = {"suite_path": SUITE, "table": "app_pv", "report_root": str(tmp_path / "reports"),
            **stage(tmp_path / "case", copy.deepcopy(GOOD))}
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "GX_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])}

    def validate(name: str) -> dict[str, Any]:
        out = subprocess.run([sys.executable, "-c", _COMPILES, json.dumps({**args, "run_name": name})], env=env,
                             capture_output=True, text=True, timeout=300, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = validate("p.first")
    assert first["passed"] and first["compiled"] >= 10
    assert len(list(temp.glob("_jinja2-cache-*/*.cache"))) >= 10
    assert validate("p.second") == {"passed": True, "compiled": 0}
    entry = max(temp.glob("_jinja2-cache-*/*.cache"), key=lambda p: p.stat().st_size)
    size = entry.stat().st_size
    entry.write_bytes(entry.read_bytes()[:40])  # cut short (a disk that lost its tail): a miss, written anew
    assert validate("p.cut") == {"passed": True, "compiled": 1} and entry.stat().st_size == size
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    (unsafe / f"_jinja2-cache-{os.getuid()}").write_text("not a directory")  # Jinja refuses it
    env["TMPDIR"] = str(unsafe)
    third = validate("p.third")
    assert third["passed"] and third["compiled"] >= 10


def test_a_run_whose_name_holds_profiling_gets_its_pages(tmp_path):
    # GX's default filter skips validation pages of runs named "...profiling..." (a pipeline "user_profiling")
    outcome = run(tmp_path, name="user_profiling_day1")
    assert outcome.passed and outcome.reports and all(Path(p).is_file() for p in outcome.reports.values()), outcome.reports
