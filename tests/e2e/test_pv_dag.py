"""The pv_pipeline DAG through Airflow (``airflow dags test``), end to end, with real Spark.

Asserts on the data: the published table equals an independent pure-Python computation from the
landing files; re-runs publish an identical version; a crash at any failpoint followed by a re-run ends
exactly where a clean run ends, with nothing left behind.
"""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest

from pv_checks import (assert_clean, assert_lineage_once_per_publish, expected_rows, lineage_transport, sink,
                       visible_rows)

from exactly_once.ids import Interval
from exactly_once.records.txlog import State
from tools.localrun import run_interval
from tools.sample_data import generate

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]


def _db(query: str) -> list[tuple]:
    with sqlite3.connect(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db") as con:
        return list(con.execute(query))


def assert_report_links() -> None:
    """The validate task's "Data quality report" button (an extra link, stored as XCom) opens the run's
    "Exactly-once report" tab: the plugin's report page inside Airflow's UI (followed in Chromium by
    tests/integration/test_airflow_ui.py)."""
    rows = _db("select x.value, r.run_id from xcom x join dag_run r on r.id = x.dag_run_id "
               "where x.key = '_link_ReportLink' and x.task_id = 'app_pv.validate' and r.dag_id = 'pv_pipeline'")
    assert rows, "no report link"
    for value, run_id in rows:
        assert json.loads(value) == f"/dags/pv_pipeline/runs/{quote(run_id, safe='')}/plugin/eo-run-report"


def notes_by_day() -> dict[str, str | None]:
    """The note of the latest run of pv_pipeline per interval start day (set by the plugin's listener;
    ``airflow dags test`` replaces an earlier run of the same logical date)."""
    rows = _db("select substr(r.data_interval_start, 1, 10), n.content from dag_run r "
               "left join dag_run_note n on n.dag_run_id = r.id where r.dag_id = 'pv_pipeline' order by r.id")
    return dict(rows)


def latest_asset_extras(n: int) -> list[dict]:
    rows = _db(f"select extra from asset_event where source_dag_id = 'pv_pipeline' order by id desc limit {int(n)}")
    return [json.loads(extra) for (extra,) in reversed(rows)]


def assert_published_notes_and_events(root, versions: list[tuple[str, int]]) -> None:
    """The asset events of the last runs, and each interval's latest run note, name the version it
    published, with its rows and files (``versions``: (day, epoch) in run order)."""
    notes = notes_by_day()
    for (day, epoch), extra in zip(versions, latest_asset_extras(len(versions))):
        iv = Interval.daily(day)
        st = sink(root).status(iv)[epoch]
        assert st.state is State.COMMITTED
        rows, files = st.manifest.rows, st.manifest.files
        assert extra["version"] == sink(root).ref(iv, epoch).name and extra["rows"] == rows and extra["files"] == files
        assert extra["interval"] == {"start": iv.start.isoformat(), "end": iv.end.isoformat()}
        assert extra["partitions"] == [f"dt={day}"]
        assert extra["report_url"].startswith("/eo/dags/pv_pipeline/runs/")
        if epoch == max(e for d, e in versions if d == day):
            assert notes[day] == f"published e{epoch}: {rows} rows, {files} file{'s' if files != 1 else ''}"


def task_states(day: str) -> dict[str, str]:
    """The task states of the latest run of pv_pipeline for ``day`` (without the group's prefix)."""
    rows = _db("select t.task_id, t.state from task_instance t join dag_run r on r.run_id = t.run_id "
               "and r.dag_id = t.dag_id where r.id = (select max(id) from dag_run where dag_id = 'pv_pipeline' "
               f"and substr(data_interval_start, 1, 10) = '{day}')")
    return {task.rsplit(".", 1)[-1]: state for task, state in rows}


def run_ok(day: str, **kw) -> None:
    res = run_interval("pv_pipeline", day, **kw)
    assert res.ok, f"{day} failed; log tail:\n" + "\n".join(res.log_path.read_text().splitlines()[-40:])


def test_intervals_match_the_reference_and_reruns_publish_identical_versions(data_root):
    generate(str(data_root / "landing"), DAYS, events_per_day=600)
    for day in DAYS:
        run_ok(day)
        # the write's first try wrote what commit published: the teardown had nothing to do (no task start)
        assert task_states(day) == {"begin": "success", "write": "success", "pre_commit": "success",
                                    "validate": "success", "commit": "success", "abort": "skipped"}
    expected = expected_rows(data_root, DAYS)
    assert visible_rows(data_root) == expected
    assert_clean(data_root, DAYS)
    assert_report_links()

    # re-running a committed interval publishes one new, identical version, and says nothing is stale
    run_ok(DAYS[1])
    assert visible_rows(data_root) == expected
    versions = sink(data_root).status(Interval.daily(DAYS[1]))
    assert max(versions) == 2
    report = json.loads((data_root / "reports" / "runs" / "pv_pipeline"
                         / f"{Interval.daily(DAYS[1]).token}.e000002.json").read_text())
    assert report["stale_intervals"] == [] and report["late_files"]["new"] == []
    assert_clean(data_root, DAYS)
    assert_published_notes_and_events(data_root, [(DAYS[0], 1), (DAYS[1], 1), (DAYS[2], 1), (DAYS[1], 2)])


def test_ordering_late_files_and_reprocessing(data_root):
    generate(str(data_root / "landing"), DAYS[:2], events_per_day=300)
    # day 2 before day 1: refused with a clear error, nothing published
    res = run_interval("pv_pipeline", DAYS[1])
    assert not res.ok and "PredecessorPendingError" in res.log_path.read_text()  # at once: no run of day 1
    assert notes_by_day()[DAYS[1]].startswith("refused: PredecessorPendingError: ")   # why, on the run
    assert visible_rows(data_root) == {}
    run_ok(DAYS[0])
    run_ok(DAYS[1])
    before = visible_rows(data_root)

    # a late file lands in day 1: the committed version is untouched, a retry replays the frozen inputs
    late = data_root / "landing" / "app_logs" / f"dt={DAYS[0]}" / "hour=23" / "late.jsonl"
    late.parent.mkdir(parents=True)
    late.write_text(json.dumps({"event_id": "late-1", "app_id": "app_late", "user_id": "u1",
                                "event": "page_view", "ts": f"{DAYS[0]}T23:59:00Z"}) + "\n")
    run_ok(DAYS[0])
    assert visible_rows(data_root) == before, "a plain re-run must replay the frozen inputs"
    report_dir = data_root / "reports" / "runs" / "pv_pipeline"
    latest = sorted(report_dir.glob(f"{Interval.daily(DAYS[0]).token}.e*.json"))[-1]
    assert json.loads(latest.read_text())["late_files"]["new"] == [f"dt={DAYS[0]}/hour=23/late.jsonl"]

    # reprocessing takes the late file in, publishes a new version and reports day 2 as stale
    run_ok(DAYS[0], reprocess=True)
    after = visible_rows(data_root)
    assert ("app_late", 1, 1, 1) in after[DAYS[0]] and after[DAYS[1]] == before[DAYS[1]]
    latest = sorted(report_dir.glob(f"{Interval.daily(DAYS[0]).token}.e*.json"))[-1]
    assert json.loads(latest.read_text())["stale_intervals"] == [Interval.daily(DAYS[1]).token]
    assert_clean(data_root, DAYS[:2])


CRASH_POINTS = ["begin.after", "write.partial", "pre_commit.after", "validate.after",
                "commit.before_publish", "commit.mid_publish", "commit.after_publish"]


def test_crash_at_every_failpoint_each_recovered_by_the_next_run(data_root, monkeypatch):
    """One interval, killed at each failpoint in turn (``os._exit`` kills the whole ``airflow dags test``,
    as a crash of the worker would). Each next run must first recover what the crashed one left; after
    every crash a reader sees nothing or one complete version; a final clean run ends exactly where a
    clean run ends, with no leftovers. (The same matrix x {crash, error} x {local, S3} runs at the
    pipeline level in tests/integration/test_fault_matrix.py.)

    OpenLineage (Airflow's provider, file transport): each version that went live - by the commit task
    or, after a crash mid-commit, by the next run's begin - is in exactly one event."""
    for key, value in lineage_transport(data_root.parent / "lineage.jsonl").items():
        monkeypatch.setenv(key, value)
    generate(str(data_root / "landing"), DAYS[:1], events_per_day=300)
    expected = expected_rows(data_root, DAYS[:1])
    for point in CRASH_POINTS:
        monkeypatch.setenv("EO_FAILPOINTS", f"{point}=crash")
        crashed = run_interval("pv_pipeline", DAYS[0])
        assert not crashed.ok, f"{point}: the run should have died"
        assert "[failpoint] " + point in crashed.log_path.read_text(), f"{point} was not reached"
        seen = visible_rows(data_root)
        assert seen in ({}, expected), f"after a crash at {point} a partial version is visible: {seen}"
    monkeypatch.delenv("EO_FAILPOINTS")
    run_ok(DAYS[0])
    assert visible_rows(data_root) == expected
    assert_clean(data_root, DAYS[:1])
    lineage = assert_lineage_once_per_publish(data_root, data_root.parent / "lineage.jsonl", DAYS[:1])
    finishers = {e["job"]["name"].rsplit(".", 1)[1] for e in lineage}
    assert finishers == {"begin", "commit"}, finishers  # crashed commits' publishes finished by begin


def test_failing_gate_with_abort_crashing_midway_then_clean_rerun(data_root, monkeypatch):
    generate(str(data_root / "landing"), DAYS[:1], events_per_day=300)
    monkeypatch.setenv("EO_PV_MAX_MALFORMED_RATIO", "0.0")  # the sample has malformed lines: gate fails
    assert not run_interval("pv_pipeline", DAYS[0]).ok       # the run's note says which check failed
    failed = sink(data_root).status(Interval.daily(DAYS[0]))[1]
    ratio = failed.validation["summary"]["rejected_ratio"]
    assert notes_by_day()[DAYS[0]] == f"aborted: rejected_ratio {ratio:.3g} > 0"
    monkeypatch.setenv("EO_FAILPOINTS", "abort.mid=crash")
    assert not run_interval("pv_pipeline", DAYS[0]).ok
    assert visible_rows(data_root) == {}, "a failed gate must publish nothing"
    monkeypatch.delenv("EO_FAILPOINTS")
    monkeypatch.delenv("EO_PV_MAX_MALFORMED_RATIO")
    run_ok(DAYS[0])
    assert visible_rows(data_root) == expected_rows(data_root, DAYS[:1])
    assert_clean(data_root, DAYS[:1])
    assert_published_notes_and_events(data_root, [(DAYS[0], 3)])


@pytest.mark.spark_submit
def test_airflow_retries_recover_within_one_run(data_root, monkeypatch):
    """error:once at mid-publish; the commit task's Airflow retry finishes the same publish. The write
    task uses spark-submit here (the other e2e runs use the shared Spark Connect server). The publish is
    in one OpenLineage event: the retry's, not the failed attempt's."""
    for key, value in lineage_transport(data_root.parent / "lineage.jsonl").items():
        monkeypatch.setenv(key, value)
    generate(str(data_root / "landing"), DAYS[:1], events_per_day=300)
    monkeypatch.setenv("EO_RETRIES", "2")
    monkeypatch.setenv("EO_FAILPOINTS", "commit.mid_publish=error:once")
    run_ok(DAYS[0])
    assert visible_rows(data_root) == expected_rows(data_root, DAYS[:1])
    assert_clean(data_root, DAYS[:1])
    assert max(sink(data_root).status(Interval.daily(DAYS[0]))) == 1, "the retry must not start a new epoch"
    (event,) = assert_lineage_once_per_publish(data_root, data_root.parent / "lineage.jsonl", DAYS[:1])
    assert event["eventType"] == "COMPLETE" and event["job"]["name"] == "pv_pipeline.app_pv.commit"
