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


HOOK = "[airflow.task.hooks.airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook] loc=spark_submit.py:965"


def test_a_failed_spark_job_is_explained_by_its_own_error_not_by_spark_submit(tmp_path):
    """The job's traceback reaches the task log through the spark-submit hook, and the task then fails with
    "Cannot execute: spark-submit ..." (the last error line). `make backfill` / `make run-interval` print
    the job's own exception instead - what the user has to fix."""
    log = tmp_path / "run.log"
    job = [f"2026-11-27T05:03:47.910681Z [info     ] Traceback (most recent call last): {HOOK}",
           f"2026-11-27T05:03:47.911505Z [info     ] File \"/x/job.py\", line 6, in compute_batch {HOOK}",
           f"2026-11-27T05:03:47.911602Z [info     ] AttributeError: 'NoneType' object has no attribute '_jvm' {HOOK}"]
    task = ["2026-11-27T05:03:48.138763Z [error    ] Task failed with exception     [task] loc=task_runner.py:1651",
            "Traceback (most recent call last):",
            '  File "/x/airflow/sdk/execution_time/task_runner.py", line 1579, in _run_task_and_map_outcome',
            "airflow.sdk.exceptions.AirflowException: Cannot execute: spark-submit --master local[*] job.py --batch x"]
    log.write_text("\n".join(job + task) + "\n")
    assert localrun.failure_reason(log) == \
        "the Spark job failed: AttributeError: 'NoneType' object has no attribute '_jvm'"
    log.write_text("\n".join(task) + "\n")  # no job output kept: the task's own line
    assert localrun.failure_reason(log).startswith("airflow.sdk.exceptions.AirflowException: Cannot execute:")
    log.write_text("2026-11-27T05:03:48Z [error    ] ValidationFailedError: dq failed: 3 rows [task]\n")
    assert "ValidationFailedError: dq failed" in localrun.failure_reason(log)
    # two tries (helper-30): the last one was killed (exit 137) without an exception - try 1's error is not
    # its reason; a job line holding a password is masked, as the hook masks its own tail
    killed = [f"2026-11-27T05:03:50Z [info     ] Killed {HOOK}", *task[:3],
              task[3].replace("--batch x", "--batch x. Error code is: 137."), "Last spark-submit output:", "Killed"]
    log.write_text("\n".join(["::group::Pre Execute", *job, *task, "Last spark-submit output:", job[-1],
                              "[DAG TEST] starting task_id=t.begin", "::group::Pre Execute", *killed]) + "\n")
    assert localrun.failure_reason(log).endswith("Error code is: 137.")
    secret = f"2026-11-27T05:03:47Z [info     ] ValueError: jdbc user=etl password=hunter2 url=postgresql://u:pw@db/x {HOOK}"
    log.write_text("\n".join([secret, *task]) + "\n")
    assert localrun.failure_reason(log) == "the Spark job failed: ValueError: jdbc user=etl password=*** url=postgresql://***@db/x"


def test_local_runs_retry_quickly_unless_told_otherwise(tmp_path, monkeypatch):
    """`airflow dags test` honours the tasks' retries: at the DAG's 30 s with exponential backoff a broken job
    kept `make backfill` silent for six minutes. Local runs retry 2 s apart; EO_RETRY_DELAY_SECONDS wins."""
    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path))
    monkeypatch.setattr(localrun, "ensure_db", lambda env=None: None)
    seen: list[dict[str, str]] = []
    monkeypatch.setattr(localrun, "airflow", lambda args, env=None, log_path=None, timeout=None: seen.append(env) or 0)
    monkeypatch.setattr(localrun, "run_logical_date", lambda dag_id, start, end: start)
    monkeypatch.delenv("EO_RETRY_DELAY_SECONDS", raising=False)
    localrun.run_interval("pv_pipeline", "2026-01-03")
    monkeypatch.setenv("EO_RETRY_DELAY_SECONDS", "45")
    localrun.run_interval("pv_pipeline", "2026-01-04")
    assert [e["EO_RETRY_DELAY_SECONDS"] for e in seen] == ["2", "45"]


def test_an_interval_dags_test_would_date_after_the_dags_end_is_refused_before_it_runs(monkeypatch):
    """`make run-interval` / `make backfill` run an interval with `airflow dags test`, whose run is dated at the
    interval's end. For the last interval of a DAG that ended that date is after the tasks' end: Airflow would
    create no task and the run would "succeed" having done nothing (a user's DAG, session 30). Refused before
    anything runs, saying what runs it; the interval before it runs as ever."""
    from datetime import datetime, timezone

    monkeypatch.setenv("EO_PV_START", "2026-01-01")
    monkeypatch.setenv("EO_PV_END", "2026-01-05")
    day = lambda d: datetime(2026, 1, d, tzinfo=timezone.utc)  # noqa: E731
    assert localrun.undated("pv_pipeline", day(4), day(5)) == ""
    why = localrun.undated("pv_pipeline", day(5), day(6))
    assert "dates the run of [2026-01-05T00:00:00+00:00, 2026-01-06T00:00:00+00:00) at 2026-01-06" in why, why
    assert "after the end_date 2026-01-05 00:00:00+00:00 of every task the group needs" in why, why
    assert ("`airflow backfill create --dag-id pv_pipeline --from-date 2026-01-05T00:00:00+00:00 --to-date "
            "2026-01-05T00:00:00+00:00 --reprocess-behavior completed`") in why, why
    with pytest.raises(SystemExit, match="Airflow would create no task"):
        localrun.run_interval("pv_pipeline", "2026-01-05")
