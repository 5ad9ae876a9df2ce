"""``make run-interval`` (tools.localrun) refuses a second run of an interval that is running, naming the
holder; each run gets its own log file. No Airflow runs here: the refusal comes before it."""
from __future__ import annotations

import os

import pytest

from tools import localrun


def test_a_second_run_of_a_running_interval_is_refused_with_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path))
    started = []
    monkeypatch.setattr(localrun, "ensure_db", lambda env=None: started.append("db"))
    with localrun.interval_lock("pv_pipeline", "2026-01-03"):  # the first run holds it (a real flock)
        with pytest.raises(SystemExit, match=rf"pv_pipeline 2026-01-03: this interval is already being run by "
                                             rf"pid {os.getpid()} since .* UTC; wait for that run to finish"):
            localrun.run_interval("pv_pipeline", "2026-01-03")
        assert started == []  # refused before Airflow was touched
        with localrun.interval_lock("pv_pipeline", "2026-01-04"):  # another interval is not blocked
            pass
    with localrun.interval_lock("pv_pipeline", "2026-01-03"):  # released after the first run
        pass


def test_each_run_of_an_interval_gets_its_own_log(tmp_path, monkeypatch):
    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path))
    first = localrun.attempt_log("pv_pipeline", "2026-01-03")
    first.parent.mkdir(parents=True)
    first.write_text("run 1\n")
    second = localrun.attempt_log("pv_pipeline", "2026-01-03")
    assert second != first and second.parent == first.parent == tmp_path / "logs" / "pv_pipeline"
    assert first.name.startswith("2026-01-03.") and first.suffix == ".log" and not second.exists()


def test_loading_a_dag_in_process_leaves_the_callers_environment_as_it_was(monkeypatch):
    """``load_dag`` (make backfill, dag_interval) sets the project's Airflow settings only while it reads
    the DAG: a quiet log level or the default local Spark connection left behind would reach every later
    ``airflow`` subprocess of the caller (a run on a cluster then logs no spark-submit line)."""
    monkeypatch.delenv("AIRFLOW__LOGGING__LOGGING_LEVEL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    before = dict(os.environ)
    assert localrun.load_dag("pv_pipeline").dag_id == "pv_pipeline"
    assert dict(os.environ) == before
