"""The Airflow side of batched backfills on S3 with the credentials only in Airflow connections: the wait's
trigger resolves the storage connection itself, every way a publish ends writes its reports there, and the
write job (spark-submit, a batch's job, Spark Connect) gets the connection's options and never shows them.
``begin`` is ``batch_runs_helpers.Begin`` (no scheduler); the local-disk cases are ``test_batch_runs``'s."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from batch_helpers import first_event, pv_oracle
from batch_runs_helpers import DAYS, IVS, Begin
from fault_helpers import Driver, Setup, sink_of, visible_rows

from exactly_once.ids import Interval
from exactly_once.protocol.batch import claim_intervals, mark_done
from tools.sample_data import generate

pytestmark = pytest.mark.timeout(300)


def test_the_trigger_resolves_the_storage_connection_itself_and_never_carries_its_secret(s3_server, monkeypatch):
    """On S3 the trigger carries the storage connection's id; the triggerer resolves its key and secret as a
    task does. Neither is in its arguments (stored in Airflow's DB) nor in its repr (the triggerer's log)."""
    from urllib.parse import quote

    from conftest import make_bucket

    from exactly_once.airflow.triggers import BatchWaitTrigger
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    secret = s3_server["secret"]
    monkeypatch.setenv("AIRFLOW_CONN_EO_WAIT_S3", f"aws://{s3_server['key']}:{quote(secret, safe='')}@/?"
                                                  f"endpoint_url={quote(s3_server['endpoint_url'], safe='')}")
    table = f"s3://{make_bucket(s3_server)}/warehouse/t"
    opts = {k: s3_server[k] for k in ("key", "secret", "endpoint_url")}
    sink = TwoPhaseCommitSink.at(table, pipeline="p", sink="t", storage_options=opts)
    claim_intervals(sink, IVS[:1], "b-s3", {}, stale_after=300)
    trigger = BatchWaitTrigger(table=table, pipeline="p", sink="t", interval=IVS[0].token, batch="b-s3", seen=None,
                               stale_after=300, poll=0.05, conn_id="eo_wait_s3")
    assert secret not in json.dumps(trigger.serialize()) and secret not in repr(trigger)
    assert first_event(trigger, 1) is None
    mark_done(sink, "b-s3")
    assert first_event(trigger, 2) == {"interval": IVS[0].token, "why": "batch b-s3 is over"}


@pytest.fixture
def s3_connection_only(signing_s3, tmp_path, monkeypatch):
    """A fresh bucket on the session's signature-checking S3 server; the credentials only in the Airflow
    connection ``eo_s3_only`` (no AWS_* variable, no credentials file, no instance metadata). Yields a
    function that lands ``days`` and returns the Setup of a pipeline starting at the first one, its data
    root and reports on S3, and an s3fs handle to look with."""
    import s3fs
    from conftest import make_bucket
    from test_s3_pipeline import aws_conn

    for key in [k for k in os.environ if k.startswith("AWS_")] + ["EO_S3_ENDPOINT_URL"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    monkeypatch.setenv("AIRFLOW_CONN_EO_S3_ONLY", aws_conn(signing_s3["key"], signing_s3["secret"],
                                                            signing_s3["endpoint_url"]))
    bucket = make_bucket(signing_s3)
    fs = s3fs.S3FileSystem(key=signing_s3["key"], secret=signing_s3["secret"], skip_instance_cache=True,
                           client_kwargs={"endpoint_url": signing_s3["endpoint_url"], "region_name": "us-east-1"})

    def land(days: list[str]) -> tuple[Setup, Any]:
        generate(str(tmp_path / "landing"), days, events_per_day=20)
        fs.put(str(tmp_path / "landing") + "/", f"{bucket}/eo/landing/", recursive=True)
        return Setup(root=f"s3://{bucket}/eo", start=days[0], reports=f"s3://{bucket}/reports",
                     conn_id="eo_s3_only"), fs

    return land


@pytest.mark.parametrize("way", ["single", "backfill", "range"])
def test_reports_on_s3_with_credentials_only_in_the_connection_end_every_way(s3_connection_only, way):
    """Issue 46 case 4: the data root AND the reports on S3, the credentials only in the Airflow connection
    (the S3 server checks every request's signature). Two days (the pipeline's first two) end a single run
    each, in a batched backfill, or in one range run: every run ends green with its note, both days' run
    summaries and Data Docs are on S3. Before, a batched run's begin read its run summary without the
    connection's options: NoCredentialsError on every try, after the batch had published every day."""
    days = DAYS[:2]
    s3, fs = s3_connection_only(days)
    begin = Begin(s3)
    if way == "single":
        seen = [Driver(s3).clean_run(d)["commit"]["version"] for d in days]
    elif way == "backfill":
        seen = [begin.run(d, set(days)) for d in days]
    else:
        seen = [begin.run(days[0], set(), conf={"eo_batch": {"end": IVS[1].start.isoformat()}}, run_type="manual")]
    if way != "single":
        assert all(s.startswith("finished: published e1") and "in batch b-" in s for s in seen), seen
        assert begin.writes == 1
    sink = sink_of(s3)
    versions = [sink.committed(Interval.daily(d))[0].name for d in days]
    fs.invalidate_cache()
    bucket = s3.root.split("/")[2]
    assert sorted(p.rsplit("/", 1)[-1][:-5] for p in fs.ls(f"{bucket}/reports/runs/pv_pipeline")) == sorted(versions)
    docs = fs.ls(f"{bucket}/reports/data_docs/validations/app_pv")
    assert {f"pv_pipeline.{v}" for v in versions} <= {p.rsplit("/", 1)[-1] for p in docs}, docs


JOB = str(Path(__file__).resolve().parents[1] / "s3_job.py")


class SparkBegin(Begin):
    """Begin whose batch write is the library's own ``write_batch`` (spark-submit of ``tests/s3_job.py``)."""

    def __init__(self, setup: Setup, settings: dict[str, Any]) -> None:
        super().__init__(setup)
        self.settings = settings

    def write_batch(self, url: str, attempt: int) -> None:
        from exactly_once.airflow.write import write_batch

        self.writes += 1
        write_batch(self.settings, url, attempt)


@pytest.mark.spark
@pytest.mark.parametrize("way", ["submit", "submit-batch", "connect"])
def test_the_write_job_reads_and_writes_s3_with_the_connections_options_and_never_shows_them(
        s3_connection_only, tmp_path, monkeypatch, caplog, capfd, request, way):
    """Issue 46: the write job's process has no Airflow connection, and no AWS_* variable here. The write
    task hands it the storage connection's options - in spark-submit's environment (``submit-batch``: a
    batched backfill's job, local Spark; ``submit``: the write task of one run, spark-submit being the
    fleet's JVM-less stand-in, which reads the spec and writes the output as the job would), directly to a
    Spark Connect write (``connect``) - and the job (``tests/s3_job.py`` through ``run_job``: its spec, the
    inputs' check, its counts) reads and writes S3 with them. Every day (two in the batch, one otherwise; no quality gate)
    publishes the oracle's rows; the secret is in no log line
    or output (the Spark provider logs spark-submit's command line and everything it prints), and the task's
    environment is as before. Before, the job read its spec without credentials: NoCredentialsError."""
    import os

    from exactly_once.airflow.taskgroup import spark_env
    from exactly_once.airflow.write import WriteOperator
    from exactly_once.job.options import OPTIONS_ENV

    days = DAYS[:2] if way == "submit-batch" else DAYS[:1]  # one JVM start a way
    s3, _ = s3_connection_only(days)
    s3 = s3.replace(suite=None)  # no quality gate: the other test validates on S3 (GX costs ~5 s a day here)
    secret = json.loads(os.environ["AIRFLOW_CONN_EO_S3_ONLY"])["password"]
    monkeypatch.delenv("EO_STORAGE_CONN_ID", raising=False)  # the pipeline's own connection, as the group hands it
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")  # the venv's spark-submit
    if way == "connect":
        monkeypatch.setenv("EO_SPARK_REMOTE", request.getfixturevalue("spark_connect"))
    else:
        monkeypatch.delenv("EO_SPARK_REMOTE", raising=False)
    caplog.set_level("INFO")
    if way == "submit-batch":
        settings = {"application": JOB, "conn_id": "eo_no_such_spark", "conf": {}, "env_vars": spark_env(),
                    "name": "s3-job", "storage_conn_id": "eo_s3_only"}
        begin = SparkBegin(s3, settings)
        seen = [begin.run(d, set(days)) for d in days]
        assert all(s.startswith("finished: published e1") and "in batch b-" in s for s in seen), seen
        assert begin.writes == 1
    else:
        application = JOB
        if way == "submit":  # the fleet's spark-submit stand-in in its JVM-less mode (tools/s3_standin.py)
            application = str(Path(__file__).resolve().parents[2] / "spark_jobs" / "pv_counts.py")
            (tmp_path / "bin").mkdir()
            (tmp_path / "bin" / "spark-submit").write_text(f"#!/bin/sh\nexec {sys.executable} -m tools.s3_standin \"$@\"\n")
            (tmp_path / "bin" / "spark-submit").chmod(0o755)
            monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
            monkeypatch.setenv("EO_STANDIN_COMPUTE", "oracle")
        driver = Driver(s3)
        for day in days:
            began = driver.task(day, "begin", {})
            assert began.ok, began
            xcom = {"txn": began.result["txn"], "spec": began.result["spec"]}
            ran = WriteOperator(task_id="write", application=application, conn_id="eo_no_such_spark",
                                env_vars=spark_env(), storage_conn_id=s3.conn_id, application_args=["--spec", xcom["spec"]]
                                ).execute({"ti": SimpleNamespace(try_number=1)})
            assert ran["spark"] == ("connect" if way == "connect" else "submit"), ran
            for phase in ("pre_commit", "validate", "commit", "abort"):
                out = driver.task(day, phase, xcom)
                assert out.ok, out
    assert visible_rows(s3) == pv_oracle(str(tmp_path), days)
    assert OPTIONS_ENV not in os.environ
    printed = capfd.readouterr()
    logged = caplog.text + printed.out + printed.err
    assert secret not in logged
    if way != "connect":  # the provider logged spark-submit's command line, without the options
        assert "Spark-Submit cmd" in logged and OPTIONS_ENV not in logged
