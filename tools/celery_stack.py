"""The shared-nothing pieces of a test deployment: a loopback S3 server and CeleryExecutor workers.

:class:`S3Server` is a ``moto_server`` on 127.0.0.1 with one bucket: the only storage the workers share
(``EO_DATA_ROOT=s3://<bucket>/eo``, ``EO_REPORTS_DIR=s3://<bucket>/reports``; moto enforces
``If-None-Match: *``, the commit point).

:class:`CeleryWorkers` configures the CeleryExecutor the way Airflow's official compose file does -
Redis as the broker, the metadata database as the result backend - and runs N ``airflow celery worker``
processes. Each worker gets its own hostname (``celery -H`` and, through ``[core] hostname_callable`` =
:func:`worker_hostname`, ``task_instance.hostname``), and its own private AIRFLOW_HOME, TMPDIR, working
directory and task-log folder under ``<run dir>/workers/<name>/``: nothing on the local disk is shared
between workers, so a phase that reads what another phase left on a local path fails here.
Its broker traffic is isolated from anything else on the same Redis: Redis DB :data:`REDIS_DB`, a key
prefix and a queue named after the deployment; :meth:`CeleryWorkers.cleanup` deletes its keys.

Every worker consumes the deployment's queue, so Celery hands each task to whichever worker is free.
``spread=True`` makes the phases of one interval alternate between the workers instead, deterministically:
each worker also has a queue of its own, and a cluster policy (``airflow_local_settings.task_policy``, the
way a platform team pins tasks to worker pools) sends the phases of an exactly-once group to the workers'
queues in turn (begin -> a, write -> b, pre_commit -> a, ...).

Spark cannot reach S3 here (pip's PySpark has no s3a jars; ``docker/Dockerfile`` adds them), so each
worker's PATH starts with a ``spark-submit`` stand-in (:mod:`tools.s3_standin`): it mirrors the job's
frozen inputs and state into the worker's private temp dir, runs the real ``spark-submit`` of the real
job on them, and uploads the staged output to the transaction's S3 staging dir.

The workers import what every task imports once, before Celery forks its pool
(``[celery] celery_config_options`` = :mod:`tools.celery_config`).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
REDIS_DB = 13  # this harness's Redis database (other test suites use the default 0 and the targets' own)
BIN = Path(sys.executable).parent
PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOSTNAME_ENV = "EO_WORKER_HOSTNAME"


def worker_hostname() -> str:
    """``[core] hostname_callable`` of a test worker: its own name (``EO_WORKER_HOSTNAME``), so that
    ``task_instance.hostname`` tells two workers on one machine apart; the FQDN elsewhere."""
    return os.environ.get(HOSTNAME_ENV) or socket.getfqdn()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """``moto_server`` on a free loopback port (its own process group) with one bucket."""

    KEY, SECRET = "eo-deployment-key", "eo-deployment-secret"  # moto without IAM accepts any signature

    def __init__(self, run_dir: Path, bucket: str):
        self.run_dir, self.bucket, self.port = Path(run_dir), bucket, _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connection(self) -> str:
        """The ``aws`` Airflow connection (``AIRFLOW_CONN_EO_S3``) the pipeline's tasks use."""
        return json.dumps({"conn_type": "aws", "login": self.KEY, "password": self.SECRET,
                           "extra": {"endpoint_url": self.endpoint_url}})

    def env(self) -> dict[str, str]:
        """The same credentials for what runs without Airflow (failpoint state, the Spark stand-in)."""
        return {"AWS_ACCESS_KEY_ID": self.KEY, "AWS_SECRET_ACCESS_KEY": self.SECRET,
                "AWS_DEFAULT_REGION": "us-east-1", "EO_S3_ENDPOINT_URL": self.endpoint_url}

    def options(self) -> dict[str, Any]:
        """s3fs options for the harness's own reads and writes."""
        return {"key": self.KEY, "secret": self.SECRET, "endpoint_url": self.endpoint_url}

    def start(self) -> None:
        exe = shutil.which("moto_server", path=str(BIN)) or shutil.which("moto_server")
        if exe is None:
            raise RuntimeError("moto_server is not installed (pip install 'moto[server]')")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        with open(self.run_dir / "logs" / "moto.log", "ab") as out:
            self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)], env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        end = time.time() + 60
        while not _port_open(self.port):
            if time.time() > end or self.proc.poll() is not None:
                raise RuntimeError(f"moto_server did not start; see {self.run_dir}/logs/moto.log")
            time.sleep(0.2)
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.KEY,
                     aws_secret_access_key=self.SECRET, region_name="us-east-1").create_bucket(Bucket=self.bucket)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)


class CeleryWorkers:
    """The CeleryExecutor settings of one deployment and its workers' private directories and commands."""

    PHASES = ("begin", "write", "pre_commit", "validate", "commit", "abort")  # the group's tasks, in order

    def __init__(self, run_dir: Path, deployment_id: str, db_name: str, count: int = 2, concurrency: int = 1,
                 spread: bool = False):
        self.run_dir, self.id, self.concurrency, self.spread = Path(run_dir), deployment_id, concurrency, spread
        self.names = [f"eo-worker-{chr(ord('a') + i)}" for i in range(count)]
        self.queue, self.prefix = f"eo-celery-{deployment_id}", f"eo-celery-{deployment_id}:"
        self.db_name = db_name

    def own_queue(self, name: str) -> str:
        return f"{self.queue}-{name}"

    def write_policy(self, airflow_home: Path) -> None:
        """With ``spread``: the cluster policy of the scheduler's and dag-processor's AIRFLOW_HOME that routes
        the i-th phase of every exactly-once group to worker ``i mod N``'s own queue."""
        if not self.spread:
            return
        queues = [self.own_queue(n) for n in self.names]
        (airflow_home / "config").mkdir(parents=True, exist_ok=True)
        (airflow_home / "config" / "airflow_local_settings.py").write_text(
            '"""Test deployment (tools.celery_stack, spread=True): alternate the phases between the workers."""\n'
            f"PHASES = {self.PHASES!r}\nQUEUES = {queues!r}\n\n\n"
            "def task_policy(task):\n"
            "    phase = task.task_id.rsplit('.', 1)[-1]\n"
            "    if phase in PHASES:\n"
            "        task.queue = QUEUES[PHASES.index(phase) % len(QUEUES)]\n")

    def settings(self) -> dict[str, str]:
        """Environment of every component: the executor, broker, result backend and default queue."""
        return {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT / "plugins"), str(PROJECT_ROOT),
                                                         os.environ.get("PYTHONPATH")])),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://postgres@127.0.0.1:5432/{self.db_name}",
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX": self.prefix,
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.concurrency),
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
            "AIRFLOW__CELERY__OPERATION_TIMEOUT": "10",
            "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "tools.celery_config.CELERY_CONFIG",  # + preloaded imports
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "21600",
        }

    def home(self, name: str) -> Path:
        return self.run_dir / "workers" / name

    def env(self, name: str, base: dict[str, str]) -> dict[str, str]:
        """``base`` plus the worker's own hostname, AIRFLOW_HOME, temp dir and task logs, and the Spark
        stand-in first on its PATH. Nothing here is a path another worker sees."""
        home = self.home(name)
        for sub in ("airflow-home", "tmp", "work", "logs", "bin"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        standin = home / "bin" / "spark-submit"
        standin.write_text(f"#!/bin/sh\nexec {sys.executable} -m tools.s3_standin \"$@\"\n")
        standin.chmod(0o755)
        return {**base, HOSTNAME_ENV: name, "AIRFLOW_HOME": str(home / "airflow-home"),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tools.celery_stack.worker_hostname",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "TMPDIR": str(home / "tmp"),
                "PATH": f"{home / 'bin'}{os.pathsep}{base.get('PATH', '')}",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port())}

    def command(self, name: str) -> list[str]:
        queues = f"{self.queue},{self.own_queue(name)}" if self.spread else self.queue
        return [str(BIN / "airflow"), "celery", "worker", "--celery-hostname", name, "--queues", queues,
                "--concurrency", str(self.concurrency), "--skip-serve-logs", "--without-mingle",
                "--without-gossip"]

    def cleanup(self) -> None:
        """Delete this deployment's keys from the broker's Redis database (its queue, results, bindings)."""
        try:
            import redis
        except ImportError:
            return
        with contextlib.suppress(OSError, redis.RedisError):
            client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB, socket_timeout=5)
            keys = [*client.scan_iter(match=f"{self.prefix}*"), *client.scan_iter(match=f"*{self.queue}*")]
            if keys:
                client.delete(*keys)
