"""Helpers for the deployment-shaped integration tests.

* :class:`StandaloneCluster` - a real Spark standalone cluster (one master, N workers) started from the
  installed PySpark on 127.0.0.1, each daemon in its own process group so that it is always torn down.
* :func:`write_like_pv_counts` - a stand-in for the ``write`` phase on S3, for where Spark cannot reach
  S3 (pip's PySpark has no hadoop-aws jars). It honours ``spark_jobs/pv_counts.py``'s output contract
  exactly and computes with the independent oracle ``tests/reference_pv.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator


from conftest import free_port
from fault_helpers import stage_write


# ---------------------------------------------------------------------------------------------- Spark

SPARK_HOME = Path(sys.executable).resolve().parents[1] / "lib" / "python3.11" / "site-packages" / "pyspark"
if not SPARK_HOME.is_dir():  # the venv's interpreter may be a symlink to the base Python
    SPARK_HOME = Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "pyspark"


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read())


@dataclass
class StandaloneCluster:
    """A Spark standalone master + ``workers`` workers on 127.0.0.1 (1 core, 1 GB each)."""

    workdir: Path
    workers: int = 2
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    worker_ui_ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def master_json_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}/json/"

    def worker_json_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}/json/" for p in self.worker_ui_ports]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.workdir / "logs"), "SPARK_WORKER_DIR": str(self.workdir / "work"),
            "SPARK_PID_DIR": str(self.workdir / "pids"), "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        })
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / "logs" / f"{name}.out", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self.env(),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # own process group: killed as a whole
        log.close()
        self.procs.append(proc)

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        self.wait_ready(timeout)

    def spawn(self) -> None:
        """Start the daemons without waiting for them (see :meth:`wait_ready`)."""
        for sub in ("logs", "work", "pids"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.webui_port)])
        for i in range(self.workers):
            ui = free_port()
            self.worker_ui_ports.append(ui)
            self._spawn(f"worker{i + 1}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                           "--cores", "1", "--memory", "1g", "--webui-port", str(ui),
                                           "--work-dir", str(self.workdir / "work" / f"w{i + 1}"),
                                           self.master_url])

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the master's JSON says every worker is registered and alive."""
        deadline = time.time() + timeout
        state: Any = None
        while time.time() < deadline:
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Spark daemon(s) exited at start: {dead}; logs in {self.workdir / 'logs'}")
            try:
                state = get_json(self.master_json_url, timeout=2)
                if state.get("aliveworkers") == self.workers:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Spark cluster not ready after {timeout:.0f}s (last master state: {state}); "
                           f"logs in {self.workdir / 'logs'}")

    def stop(self) -> None:
        """Kill every daemon's process group (workers first), then reap them. Never raises."""
        for proc in reversed(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)

    def state(self) -> dict[str, Any]:
        return get_json(self.master_json_url)

    def worker_states(self) -> list[dict[str, Any]]:
        return [get_json(u) for u in self.worker_json_urls()]


@contextmanager
def standalone_cluster(workers: int = 2, workdir: Path | None = None,
                       meanwhile: Callable[[], None] | None = None) -> Iterator[StandaloneCluster]:
    """Start a cluster, yield it, and always tear it down (even when the start or the body fails).

    ``meanwhile`` runs while the daemons start (e.g. the Airflow DB migration), before waiting for them.
    """
    cluster = StandaloneCluster(Path(workdir or tempfile.mkdtemp(prefix="eo-spark-")), workers=workers)
    try:
        cluster.spawn()
        if meanwhile is not None:
            meanwhile()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


def job_only_python(cache: Path) -> Path:
    """A Spark driver host's Python: a venv with only pyarrow and fsspec at the lock's versions - no
    Airflow, no exactly_once (it arrives by ``--py-files``), no pyspark (spark-submit puts the Spark
    distribution's own, ``$SPARK_HOME/python/lib``, first on the driver's path, as on a cluster node).
    Built once per cache dir from uv's cache (about a second)."""
    from tools.compat import Corner, venv_for

    lock = (Path(__file__).resolve().parents[1] / "requirements.lock").read_text().splitlines()
    pins = tuple(line.strip() for line in lock if line.startswith(("pyarrow==", "fsspec==")))
    assert len(pins) == 2, pins
    return venv_for(Corner("driver-job-only", "job", pins), None, cache) / "bin" / "python"


# ------------------------------------------------------------------------------- write stand-in (S3)

# The write phase without Spark (for S3, where this machine's Spark cannot reach): one implementation,
# shared with the fault matrix - see fault_helpers.stage_write.
write_like_pv_counts = stage_write


@contextmanager
def authenticating_s3_server() -> Iterator[dict[str, str]]:
    """A loopback ``moto_server`` that verifies every request's signature against IAM.

    moto checks credentials only with ``INITIAL_NO_AUTH_ACTION_COUNT``: the first actions (here: create
    an IAM user, give it a policy, make its access key) run unauthenticated, every later request must be
    signed with a key moto issued. Yields ``{"endpoint_url", "key", "secret"}`` of that user.
    """
    import shutil

    import boto3

    from conftest import need, wait_port

    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    need(exe is not None, "moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        need(wait_port(port), "moto_server did not start")
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="eo-pipeline")
        iam.put_user_policy(UserName="eo-pipeline", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="eo-pipeline")["AccessKey"]
        yield {"endpoint_url": endpoint, "key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
