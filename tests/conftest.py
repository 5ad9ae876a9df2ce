"""Shared fixtures: a real S3 server on loopback (moto_server), a Spark session, storage roots.

Tests that need a service skip with a reason when it is missing, unless ``EO_REQUIRE_SERVICES=1``
(as in CI), where a missing service is a failure.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tools/ (harnesses outside the installed package)
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT / "tests"))
# Airflow reads its home at import: give every test run its own, never ~/airflow or the demo's.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="eo-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
S3_CREDS = {"key": "eo-test-key", "secret": "eo-test-secret-do-not-log"}


from eo_testing import REQUIRE, free_port, need, wait_port  # noqa: E402,F401  (re-exported)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API server (``moto_server``) on 127.0.0.1, used through s3fs over HTTP.

    Yields ``{"endpoint_url", "key", "secret"}``; also exported as the AWS_* / EO_S3_ENDPOINT_URL
    environment for child processes.
    """
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    need(exe is not None, "moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        need(wait_port(port), "moto_server did not start")
        endpoint = f"http://127.0.0.1:{port}"
        env = {"EO_S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": S3_CREDS["key"],
               "AWS_SECRET_ACCESS_KEY": S3_CREDS["secret"], "AWS_DEFAULT_REGION": "us-east-1"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        yield {"endpoint_url": endpoint, **S3_CREDS}
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def signing_s3():
    """One loopback S3 server that checks every request's signature (``cluster_helpers.
    authenticating_s3_server``), shared by the tests whose credentials must come from a connection only:
    ``{"endpoint_url", "key", "secret"}``; each test makes its own bucket (:func:`make_bucket`)."""
    from cluster_helpers import authenticating_s3_server

    with authenticating_s3_server() as server:
        yield server


def make_bucket(s3: dict) -> str:
    """Create a fresh bucket on the loopback server and return its name."""
    import boto3

    name = f"eo-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3["endpoint_url"], aws_access_key_id=s3["key"],
                 aws_secret_access_key=s3["secret"], region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def table_url(request, tmp_path):
    """A fresh table location on the local filesystem and on the loopback S3 server."""
    if request.param == "local":
        return str(tmp_path / "warehouse" / "t")
    s3 = request.getfixturevalue("s3_server")
    return f"s3://{make_bucket(s3)}/warehouse/t"


SMALL_STACK = "320k"


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (a JVM start costs seconds).

    Its threads get a third of the JVM's default 1 MiB stack, so input that makes Spark recurse (deeply
    nested JSON: ``pv_counts.MAX_DEPTH``) fails here long before it could on a default deployment.
    """
    need(shutil.which("java") is not None, "Java is not installed")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("eo-tests")
               .config("spark.driver.extraJavaOptions", f"-Xss{SMALL_STACK}")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    # py4j logs every closed connection at INFO, also from finalizers at interpreter exit, after pytest
    # closed its streams ("--- Logging error ---"); its warnings and errors still show.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """ONE Spark Connect server (tools/spark_connect.py, pip's pyspark) for the whole test run, on a free
    loopback port; yields its ``sc://`` URL. Tests that are not about spark-submit itself reuse it."""
    from tools import spark_connect as sc

    server = start_connect_server(tmp_path_factory.mktemp("spark-connect"))
    try:
        yield server.url
    finally:
        sc.stop(server)


def start_connect_server(state_dir: Path, port: int | None = None):
    """Start a small Spark Connect server (pid/log under ``state_dir``) on ``port`` (a free one by
    default) and return its ``tools.spark_connect.Server``; the caller stops it."""
    need(shutil.which("java") is not None, "Java is not installed")
    from tools import spark_connect as sc

    server = sc.Server(port or free_port(), state_dir, "local[2]")
    sc.start(server, extra_conf={"spark.driver.extraJavaOptions": f"-Xss{SMALL_STACK}",
                                 "spark.sql.shuffle.partitions": "4"})
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return server


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """A fresh ``EO_DATA_ROOT`` for whole-pipeline runs; Airflow retries are fast but real (1 s base delay)."""
    need(shutil.which("java") is not None, "Java is not installed")
    root = tmp_path / "data"
    monkeypatch.setenv("EO_DATA_ROOT", str(root))
    monkeypatch.setenv("EO_RETRY_DELAY_SECONDS", "1")
    monkeypatch.setenv("EO_RETRIES", "0")
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    return Path(root)


@pytest.fixture(autouse=True)
def e2e_spark(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The e2e DAG runs (tests/e2e/) send their write phase to the ONE shared Spark Connect server
    (``spark_connect``) through ``EO_SPARK_REMOTE``, so a DAG run pays no JVM start. A test marked
    ``spark_submit`` keeps spark-submit (one e2e run does, so that path stays tested through Airflow).
    It lives here, not in tests/e2e/conftest.py: a second module named ``conftest`` would shadow this
    one for the tests that import helpers from it."""
    if "e2e" not in Path(str(request.node.path)).parts:
        return None
    if request.node.get_closest_marker("spark_submit"):
        monkeypatch.delenv("EO_SPARK_REMOTE", raising=False)
        return None
    remote = request.getfixturevalue("spark_connect")
    monkeypatch.setenv("EO_SPARK_REMOTE", remote)
    return remote
