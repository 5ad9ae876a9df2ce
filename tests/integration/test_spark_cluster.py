"""pv_pipeline through Airflow on a real Spark standalone cluster (one master, two workers, loopback).

The DAG is unchanged: only the ``spark_default`` connection points at the cluster (client deploy mode:
spark-submit and the driver run in the Airflow task, executors on the workers). Everything the job
reads and writes is under ``EO_DATA_ROOT``, which master, workers and driver all see here (one host).
On separate hosts ``EO_DATA_ROOT`` must be shared storage (NFS, HDFS) or S3 through s3a.

The write task ships the library to the cluster on ``--py-files`` (exactly_once.job.shipping). The first
interval's driver is the Airflow task's own Python; the second's is a job-only venv (no Airflow, no
exactly_once, no pyspark: ``PYSPARK_DRIVER_PYTHON``/``PYSPARK_PYTHON`` with ``SPARK_HOME``), which imports
the library from the shipped zip (this test's Airflow finds the library through PYTHONPATH, which
spark-submit hands on to the driver behind the zip: the runtime the job reports shows which copy ran).
Spark refuses cluster deploy mode for Python applications on a
standalone master, so client mode with a driver that has nothing but the job's own needs is the nearest
this cluster gets to a driver on another host (docs/DEPLOYING.md, YARN and Kubernetes).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_helpers import SPARK_HOME, job_only_python, standalone_cluster
from conftest import need
from e2e.pv_checks import assert_clean, expected_rows, sink, visible_rows

from exactly_once.ids import Interval
from tools.localrun import airflow_env, ensure_db, run_interval
from tools.sample_data import generate

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.timeout(900)]
DAYS = ["2026-01-01", "2026-01-02"]
SUBMIT_NAME = "pv_pipeline-app_pv"  # SparkSubmitOperator's name=f"{pipeline}-{sink}"


def spark_conn(port: int) -> str:
    """The ``spark_default`` connection for a standalone master, as an Airflow JSON connection."""
    return json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port,
                       "extra": {"deploy-mode": "client"}})


# Small-job JVM settings for the cluster's applications (deployment configuration, not code): the
# executors are fresh JVMs that live for seconds, so C1-only JIT is faster than tiered compilation.
SPARK_DEFAULTS = """\
spark.executor.extraJavaOptions -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
spark.driver.extraJavaOptions -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
"""


@pytest.fixture
def run_env(tmp_path, monkeypatch) -> dict[str, str]:
    """A fresh ``EO_DATA_ROOT`` and fast failures (no Airflow retries), in os.environ and returned."""
    need(shutil.which("java") is not None, "Java is not installed")
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(SPARK_DEFAULTS)
    env = {"EO_DATA_ROOT": str(tmp_path / "data"), "EO_RETRIES": "0", "EO_RETRY_DELAY_SECONDS": "1",
           "EO_FAILPOINTS_STATE": str(tmp_path / "failpoints"), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_CONF_DIR": str(conf_dir)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    return env


@pytest.fixture
def cluster(run_env, tmp_path):
    """Master + two workers; the Airflow metadata DB is migrated while the daemons start."""
    with standalone_cluster(workers=2, workdir=tmp_path / "spark",
                            meanwhile=lambda: ensure_db(airflow_env(run_env))) as c:
        yield c


def test_connection_form_resolves_to_the_standalone_master(monkeypatch):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_conn(7077))
    conn = SparkSubmitHook(conn_id="spark_default")._connection
    assert conn["master"] == "spark://127.0.0.1:7077"
    assert conn["deploy_mode"] == "client"


def shipped_run(log: str) -> tuple[str, dict]:
    """The zip the write task put on ``--py-files``, and the ``runtime`` the job reported (its JSON line)."""
    (cmd,) = [line for line in log.splitlines() if "Spark-Submit cmd:" in line]
    shipped = cmd.split("--py-files ", 1)[1].split()[0].split(",")[0]
    (line,) = [line for line in log.splitlines() if '{"counts": ' in line]  # the task log wraps the line
    job, _ = json.JSONDecoder().raw_decode(line[line.index('{"counts": '):])
    return shipped, job["runtime"]


def test_two_intervals_through_airflow_on_a_standalone_cluster(cluster, run_env, tmp_path, monkeypatch):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    env = {**run_env, "AIRFLOW_CONN_SPARK_DEFAULT": spark_conn(cluster.port)}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", env["AIRFLOW_CONN_SPARK_DEFAULT"])
    # the provider's own resolution of the connection the DAG's write task uses
    resolved = SparkSubmitHook(conn_id="spark_default")._connection
    assert (resolved["master"], resolved["deploy_mode"]) == (cluster.master_url, "client")
    # the second interval's driver: a job-only venv, which cannot import Airflow or the library
    job_python = job_only_python(tmp_path / "venvs")
    for module in ("airflow", "exactly_once"):
        probe = subprocess.run([job_python, "-I", "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"the job-only venv imports {module}"
    drivers = {DAYS[0]: str(Path(sys.executable)), DAYS[1]: str(job_python)}

    root = Path(run_env["EO_DATA_ROOT"])
    generate(str(root / "landing"), DAYS, events_per_day=200)
    for day in DAYS:
        python = drivers[day]
        t0 = time.perf_counter()
        res = run_interval("pv_pipeline", day, timeout=400, extra_env={
            **env, "PYSPARK_DRIVER_PYTHON": python, "PYSPARK_PYTHON": python, "SPARK_HOME": str(SPARK_HOME)})
        log = res.log_path.read_text(errors="replace")
        assert res.ok, f"{day} failed after {time.perf_counter() - t0:.0f}s; log tail:\n" + "\n".join(
            log.splitlines()[-60:])
        assert f"--master {cluster.master_url}" in log, "spark-submit did not target the cluster"
        assert f"--name {SUBMIT_NAME}" in log
        # the driver ran the given Python, with the library from the zip the task shipped
        shipped, runtime = shipped_run(log)
        assert Path(shipped).name.startswith("exactly_once-") and shipped.endswith(".zip"), shipped
        assert runtime == {"python": python, "exactly_once": f"{shipped}/exactly_once"}, runtime

    # the data: what a plain reader sees equals the independent reference, chained over both days
    assert visible_rows(root) == expected_rows(root, DAYS)
    assert_clean(root, DAYS)

    # the Spark applications really ran on the cluster, with executors on both workers. The job's
    # SparkSession.builder.appName("pv_counts <txn>") overrides spark-submit's --name, so the master
    # lists each application under the transaction it computed.
    committed = sink(root)
    txns = {committed.committed(Interval.daily(day))[0].name for day in DAYS}
    state = cluster.state()
    assert state["aliveworkers"] == 2
    apps = [a for a in state["completedapps"] if a["name"] in {f"pv_counts {t}" for t in txns}]
    assert len(apps) == len(DAYS), [(a["name"], a["state"]) for a in state["completedapps"]]
    assert all(a["state"] == "FINISHED" for a in apps), apps
    app_ids = {a["id"] for a in apps}
    workers = cluster.worker_states()
    for w in workers:
        ran = {e["appid"] for e in w["finishedexecutors"]}
        assert app_ids <= ran, f"worker {w['id']} hosted no executor of {app_ids - ran}"
    # executors ran tasks (their stderr is in the worker's work dir: <app id>/<executor id>/stderr)
    for app_id in app_ids:
        tasks = sum(stderr.read_text(errors="replace").count("Running task")
                    for stderr in (cluster.workdir / "work").glob(f"w*/{app_id}/*/stderr"))
        assert tasks > 0, f"no task ran on a worker-hosted executor of {app_id}"
