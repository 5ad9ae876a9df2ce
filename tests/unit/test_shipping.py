"""The library shipped to the Spark driver (exactly_once.job.shipping, the write task's spark-submit).

The zip is deterministic, holds the job side without the Airflow layer, and imports from ``sys.path``
alone; the write task puts it on ``--py-files`` for every master but ``local``, takes the driver's and
executors' Python from the task environment (none in cluster deploy mode) and refuses cluster deploy
mode on a standalone master. The real thing on a standalone cluster with a job-only driver is
tests/integration/test_spark_cluster.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from exactly_once.errors import ConfigError
from exactly_once.job.shipping import PACKAGE, library_zip, needs_shipping, ship_mode

APP = "/jobs/app.py"


def test_the_zip_is_the_job_side_deterministic_and_named_after_its_content(tmp_path):
    a = library_zip(tmp_path / "a")
    b = library_zip(tmp_path / "b")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()
    assert library_zip(tmp_path / "a") == a  # built once per content
    names = set(zipfile.ZipFile(a).namelist())
    expected = {f"exactly_once/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")
                if p.relative_to(PACKAGE).parts[0] != "airflow"}
    assert names == expected
    assert {"exactly_once/job/__init__.py", "exactly_once/contracts.py", "exactly_once/__init__.py"} <= names
    assert not list((tmp_path / "a").glob(".*.tmp"))

    copy = tmp_path / "src" / "exactly_once"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert library_zip(tmp_path / "c", package=copy).name == a.name
    (copy / "job" / "__init__.py").write_text((copy / "job" / "__init__.py").read_text() + "\n# changed\n")
    assert library_zip(tmp_path / "c", package=copy).name != a.name


def test_the_job_side_imports_from_the_zip_alone(tmp_path):
    shipped = library_zip(tmp_path)
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import exactly_once.job, exactly_once.contracts; "
            "print(json.dumps([exactly_once.job.__file__, sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'airflow')]))")
    # -I: no PYTHONPATH (the repo's plugins/), the zip first on the path
    out = subprocess.run([sys.executable, "-I", "-c", code, str(shipped)], capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout
    where, airflow = json.loads(out.strip().splitlines()[-1])
    assert where == f"{shipped}/exactly_once/job/__init__.py" and airflow == []


@pytest.mark.parametrize("master,deploy,mode,ships", [
    ("local[*]", None, "auto", False), ("local", "client", "auto", False),
    ("spark://h:7077", "client", "auto", True), ("yarn", "cluster", "auto", True),
    ("k8s://https://h:6443", "cluster", "auto", True), ("yarn", "client", "auto", True),
    ("local-cluster[2,1,1024]", None, "auto", True),
    ("local[*]", None, "always", True), ("yarn", "cluster", "never", False),
])
def test_when_the_library_ships(master, deploy, mode, ships):
    assert needs_shipping(master, deploy, mode) is ships


def test_an_unknown_ship_mode_says_what_to_use(monkeypatch):
    monkeypatch.setenv("EO_SPARK_SHIP_LIBRARY", "sometimes")
    with pytest.raises(ConfigError, match="auto, always, never"):
        ship_mode()


def submit_command(monkeypatch, tmp_path, conn: dict, **env: str) -> tuple[list[str], dict]:
    """The spark-submit command line the write task runs for ``conn`` (the provider's own builder), and
    the environment it gives spark-submit."""
    from exactly_once.airflow.write import WriteOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("EO_SPARK_SHIP_CACHE", str(tmp_path / "ship"))
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "EO_SPARK_SHIP_LIBRARY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    op = WriteOperator(task_id="write", application=APP, conn_id="spark_default", py_files="/jobs/helpers.zip",
                       env_vars={"PYSPARK_PYTHON": "/parse/time/python", "EO_FAILPOINTS": "x=crash"})
    op._prepare_submit()
    hook = op._get_hook()
    return hook._build_spark_submit_command(APP), dict(hook._env_vars or {})


def py_files(cmd: list[str]) -> list[str]:
    return cmd[cmd.index("--py-files") + 1].split(",") if "--py-files" in cmd else []


def test_local_master_ships_nothing_and_runs_the_task_python(monkeypatch, tmp_path):
    cmd, env = submit_command(monkeypatch, tmp_path, {"conn_type": "spark", "host": "local[2]"})
    assert py_files(cmd) == ["/jobs/helpers.zip"]
    assert env == {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                   "EO_FAILPOINTS": "x=crash"}


def test_a_cluster_master_gets_the_library_and_the_environment_s_pythons(monkeypatch, tmp_path):
    cmd, env = submit_command(monkeypatch, tmp_path, {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077,
                                                 "extra": {"deploy-mode": "client"}},
                         PYSPARK_DRIVER_PYTHON="/job/venv/bin/python")
    shipped, *rest = py_files(cmd)
    assert Path(shipped).parent == tmp_path / "ship" and shipped.endswith(".zip") and rest == ["/jobs/helpers.zip"]
    assert (env["PYSPARK_PYTHON"], env["PYSPARK_DRIVER_PYTHON"]) == (sys.executable, "/job/venv/bin/python")


def test_yarn_cluster_mode_ships_the_library_and_no_airflow_worker_python(monkeypatch, tmp_path):
    cmd, _ = submit_command(monkeypatch, tmp_path, {"conn_type": "spark", "host": "yarn",
                                                    "extra": {"deploy-mode": "cluster"}})
    assert cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    assert len(py_files(cmd)) == 2 and py_files(cmd)[0].endswith(".zip")
    confs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--conf"]
    assert "spark.yarn.appMasterEnv.EO_FAILPOINTS=x=crash" in confs  # the rest of the env still goes
    assert not [c for c in confs if "PYSPARK" in c], confs


def test_never_leaves_the_shipping_to_the_deployment(monkeypatch, tmp_path):
    cmd, _ = submit_command(monkeypatch, tmp_path, {"conn_type": "spark", "host": "yarn",
                                                    "extra": {"deploy-mode": "cluster"}},
                            EO_SPARK_SHIP_LIBRARY="never")
    assert py_files(cmd) == ["/jobs/helpers.zip"]


def test_standalone_cluster_deploy_mode_is_refused_with_the_way_out(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="client mode only.*deploy-mode to client"):
        submit_command(monkeypatch, tmp_path, {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077,
                                               "extra": {"deploy-mode": "cluster"}})


@pytest.mark.parametrize("worker_env", [None, "another_pipelines_s3"])
def test_the_write_task_hands_the_job_its_pipelines_storage_connection(monkeypatch, worker_env):
    """The write task gives spark-submit the options of ``PipelineConfig.storage_conn_id`` (as every other
    task of the group reads storage), whatever the worker's ``EO_STORAGE_CONN_ID`` says: unset, or naming
    another pipeline's connection. Before, it read that variable only: no (or the wrong) credentials."""
    from datetime import datetime, timezone

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, CronDataIntervalTimetable

    from exactly_once.airflow import exactly_once_group
    from exactly_once.job.options import OPTIONS_ENV
    from exactly_once.protocol.config import PipelineConfig
    from exactly_once.protocol.layout import Source

    def conn(secret: str) -> str:
        return json.dumps({"conn_type": "aws", "login": "k", "password": secret,
                           "extra": {"endpoint_url": "http://127.0.0.1:1"}})

    monkeypatch.setenv("AIRFLOW_CONN_PIPELINES_S3", conn("ours"))
    monkeypatch.setenv("AIRFLOW_CONN_ANOTHER_PIPELINES_S3", conn("theirs"))
    if worker_env:
        monkeypatch.setenv("EO_STORAGE_CONN_ID", worker_env)
    else:
        monkeypatch.delenv("EO_STORAGE_CONN_ID", raising=False)
    cfg = PipelineConfig(pipeline="conn_dag", sink="t", root="/tmp/eo-unused", application=APP,
                         sources=Source("s", format="csv", path="{start:%Y-%m-%d}"), partitions="day={start:%Y-%m-%d}",
                         storage_conn_id="pipelines_s3")
    with DAG("conn_dag", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=datetime(2024, 1, 1, tzinfo=timezone.utc)) as dag:
        exactly_once_group(cfg, group_id="t")
    write = dag.task_dict["t.write"]
    handed: list[str | None] = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: handed.append(os.environ.get(OPTIONS_ENV)))
    monkeypatch.setattr(write, "_prepare_submit", lambda: None)
    monkeypatch.setattr(write, "application_args", ["--spec", "file:///nonexistent/spec.json"])
    write.execute({"ti": SimpleNamespace(try_number=1)})
    assert len(handed) == 1 and json.loads(handed[0] or "{}").get("secret") == "ours", handed
    assert OPTIONS_ENV not in os.environ  # restored after the job
