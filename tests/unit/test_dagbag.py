"""Every DAG imports cleanly, retries every task, and wraps its work in the begin/abort setup-teardown pair."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PHASES = ["begin", "write", "pre_commit", "validate", "commit", "abort"]


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert "pv_pipeline" in dagbag.dags


def test_every_task_retries_with_backoff(dagbag):
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            assert task.retries >= 1, f"{dag.dag_id}.{task.task_id} has no retries"
            assert task.retry_exponential_backoff, f"{dag.dag_id}.{task.task_id} has no backoff"


def test_every_dag_has_the_setup_teardown_pair(dagbag):
    for dag in dagbag.dags.values():
        if "maintenance" in dag.tags:  # eo_rollback: one task over the protocol, no transaction of its own
            continue
        setups = [t for t in dag.tasks if t.is_setup]
        teardowns = [t for t in dag.tasks if t.is_teardown]
        assert setups and teardowns, dag.dag_id
        for td in teardowns:
            assert set(td.upstream_task_ids) & {s.task_id for s in setups}, f"{td.task_id} not tied to its setup"


def test_pv_pipeline_is_the_two_phase_commit_in_order(dagbag):
    dag = dagbag.dags["pv_pipeline"]
    ids = [f"app_pv.{p}" for p in PHASES]
    assert set(ids) <= set(dag.task_dict)
    for a, b in zip(ids, ids[1:]):
        assert b in dag.task_dict[a].downstream_task_ids, f"{a} -> {b} missing"
    write = dag.task_dict["app_pv.write"]
    assert type(write).__name__ == "WriteOperator"  # a SparkSubmitOperator, or a Spark Connect client
    assert "SparkSubmitOperator" in [c.__name__ for c in type(write).__mro__]
    assert dag.task_dict["app_pv.write"]._conn_id == "spark_default"
    from airflow.sdk import Asset, AssetAlias

    outlets = {t.task_id: t.outlets for t in dag.tasks if t.outlets}
    assert not [t for t, o in outlets.items() if any(isinstance(x, Asset) for x in o)], \
        "no static Asset outlet: it would announce every success of its task, also when nothing was published"
    # whoever publishes - commit, or begin/the teardown finishing a publish commit did not - announces the
    # table through the group's alias
    assert sorted(outlets) == ["app_pv.abort", "app_pv.begin", "app_pv.commit"]
    assert all(len(o) == 1 and isinstance(o[0], AssetAlias) for o in outlets.values())
    assert dag.max_active_runs == 1


def test_timetable_gives_real_daily_intervals(dagbag):
    """Airflow 3's default cron timetable gives zero-length intervals; ours must not."""
    from tools.localrun import logical_date_for

    from airflow.serialization.encoders import coerce_to_core_timetable

    tt = coerce_to_core_timetable(dagbag.dags["pv_pipeline"].timetable)
    run_after = datetime.fromisoformat(logical_date_for("2026-01-03"))
    iv = tt.infer_manual_data_interval(run_after=run_after)
    assert (iv.start, iv.end) == (datetime(2026, 1, 3, tzinfo=timezone.utc), datetime(2026, 1, 4, tzinfo=timezone.utc))
    nxt = tt.next_dagrun_info(last_automated_data_interval=iv, restriction=_no_restriction())
    assert nxt.data_interval.start == iv.end
    assert (nxt.data_interval.end - nxt.data_interval.start).total_seconds() == 86400


def _no_restriction():
    from airflow.timetables.base import TimeRestriction

    return TimeRestriction(earliest=None, latest=None, catchup=True)


def test_flights_hourly_is_an_hourly_stateless_pipeline(dagbag):
    dag = dagbag.dags["flights_hourly"]
    assert {f"departures.{p}" for p in PHASES} <= set(dag.task_dict)
    assert dag.max_active_runs > 1  # stateless: hours may run in parallel
    write = dag.task_dict["departures.write"]
    assert write.application_args[2:] == ["--delay-threshold", "15"]
    assert write.application.endswith("spark_jobs/flights_hourly.py")


def test_eo_finds_a_dag_by_id_from_any_directory(tmp_path, monkeypatch, capsys):
    from exactly_once.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path / "data"))
    assert main(["status", "--dag", "flights_hourly"]) == 0
    assert f"flights_hourly/departures: {tmp_path}/data/warehouse/departures\n" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no DAG 'nope'"):
        main(["status", "--dag", "nope"])


@pytest.mark.parametrize("folder, dag_id", [("dags", "pv_pipeline"), ("dags", "pv_to_db"),
                                            ("bench/dags", "naive_pv")])
def test_eo_pv_end_stops_the_schedule_after_a_backfills_last_day(folder, dag_id, monkeypatch):
    """A deployment that runs only a backfill of days ending yesterday sets ``EO_PV_END`` to its last day. When
    its run goes past midnight UTC, the day that just ended must not get a scheduled run of its own (stop 59's CI:
    three tests met a run nobody asked for). Midnight is stood in for by a last day two days back."""
    from datetime import timedelta

    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import DataInterval, TimeRestriction

    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    first, last = today - timedelta(days=4), today - timedelta(days=2)
    monkeypatch.setenv("EO_PV_START", first.date().isoformat())
    ran = DataInterval(last, last + timedelta(days=1))  # the backfill's last run
    for end, expected in ((None, DataInterval(today - timedelta(days=1), today)), (last.date().isoformat(), None)):
        if end:
            monkeypatch.setenv("EO_PV_END", end)
        dag = DagBag(dag_folder=str(ROOT / folder)).dags[dag_id]
        assert dag.end_date == (last if end else None), dag_id
        nxt = coerce_to_core_timetable(dag.timetable).next_dagrun_info(
            last_automated_data_interval=ran,
            restriction=TimeRestriction(earliest=dag.start_date, latest=dag.end_date, catchup=dag.catchup))
        assert (nxt and nxt.data_interval) == expected, (dag_id, end)
