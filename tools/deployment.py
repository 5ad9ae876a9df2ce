"""A throw-away Airflow deployment on this machine, driven by the real scheduler.

:class:`Deployment` creates a fresh PostgreSQL metadata DB (``eo_<purpose>_<id>`` on 127.0.0.1:5432, dropped
at the end), an AIRFLOW_HOME under its run dir, and runs ``airflow api-server``, ``scheduler``
(LocalExecutor, workers forked from a preloaded forkserver: :func:`tools.localrun.scheduler_env`)
``dag-processor`` and ``triggerer`` as separate process groups. ``backfill`` creates a backfill with
``airflow backfill create``, the way a user does. ``stop`` ends every process it started - including
orphans, found by the deployment's marker in their environment - and drops the database.

``executor="celery"`` runs the CeleryExecutor instead, the way a fleet does: Redis as the broker,
PostgreSQL (the same fresh DB) as the result backend, and ``workers`` ``airflow celery worker`` processes,
each with its own hostname and its own private temp, working, log and reports directories
(:mod:`tools.celery_stack`). ``storage="s3"`` puts ``EO_DATA_ROOT`` on a loopback S3 server (moto) with the
credentials in the ``eo_s3`` connection: with both, the workers share nothing but S3, the metadata DB and
the broker.

Used by the chaos run (:mod:`tools.chaos`: kills task processes while a backfill runs) and by the
scheduler backfill benchmark (``bench/backfill.py``).
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from datetime import timezone
from pathlib import Path
from typing import Any, Callable
from unittest import mock

from tools.celery_stack import CeleryWorkers, S3Server
from tools.localrun import BIN, airflow_env, scheduler_env

PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
FINAL = ("success", "failed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def processes() -> dict[int, tuple[int, str]]:
    """``{pid: (ppid, cmdline)}`` of every process we can read, from /proc (no psutil needed)."""
    out = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        out[int(d)] = (ppid, cmd)
    return out


def descendants(roots: list[int], procs: dict[int, tuple[int, str]]) -> list[int]:
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        kids = [p for p, (pp, _) in procs.items() if pp == pid]
        found += kids
        todo += kids
    return found


def _environ(pid: int) -> bytes:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()
    return b""


def marked_pids(marker: bytes, procs: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """Processes whose environment carries ``marker`` (``EO_DEPLOYMENT_ID=<id>``): a deployment's orphans."""
    return {p for p in (procs if procs is not None else processes()) if marker in _environ(p)}


def send_signal(pid: int, sig: int, group: bool = False) -> None:
    """``kill`` that ignores processes which are gone already (or not ours)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, sig)


class Stack:
    """The Airflow components, each its own process group; ``stop`` ends them all (SIGTERM, then SIGKILL)."""

    def __init__(self, run_dir: Path, env: dict[str, str], marker: bytes, log: Callable[[str], None]):
        self.run_dir, self.env, self.marker, self.log = run_dir, env, marker, log
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.run_dir / "logs" / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(args, env=env or self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = proc
        self.log(f"started {name} (pid {proc.pid})")
        return proc

    def pids(self) -> list[int]:
        """Every live process of this run: the components' trees plus orphans carrying our marker."""
        procs = processes()
        roots = [p.pid for p in self.procs.values() if p.poll() is None]
        tree = set(roots) | set(descendants(roots, procs))
        return sorted(tree | marked_pids(self.marker, procs))

    def stop(self, grace: float = 20.0) -> None:
        everyone = self.pids()
        for p in self.procs.values():
            if p.poll() is None:
                send_signal(p.pid, signal.SIGTERM, group=True)
        end = time.time() + grace
        while time.time() < end and any(p.poll() is None for p in self.procs.values()):
            time.sleep(0.3)
        for pid in set(everyone) | set(self.pids()):  # what ignored SIGTERM, and orphans
            send_signal(pid, signal.SIGKILL, group=True)
            send_signal(pid, signal.SIGKILL)
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)


class MetaDB:
    """A fresh PostgreSQL database for Airflow's metadata (psycopg2, trust auth as ``postgres``)."""

    def __init__(self, name: str):
        self.name, self._conn = name, None
        self.url = f"postgresql+psycopg2://{PG['user']}@{PG['host']}:{PG['port']}/{name}"

    def _connect(self, dbname: str) -> Any:
        import psycopg2

        conn = psycopg2.connect(dbname=dbname, connect_timeout=5, **PG)
        conn.autocommit = True
        return conn

    def admin(self, sql: str) -> None:
        with contextlib.closing(self._connect("postgres")) as conn:
            conn.cursor().execute(sql.format(db=self.name))

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect(self.name)
        with self._conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self.admin('DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def postgres_problem() -> str | None:
    """Why the PostgreSQL server a deployment needs cannot be used, or None when it can."""
    try:
        import psycopg2

        psycopg2.connect(dbname="postgres", connect_timeout=3, **PG).close()
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable here
        return f"PostgreSQL is not reachable on {PG['host']}:{PG['port']} as {PG['user']}: {exc}"
    return None


class Deployment:
    """api-server + scheduler (LocalExecutor) + dag-processor + triggerer on a fresh PostgreSQL DB, under ``run_dir``;
    with ``executor="celery"`` the CeleryExecutor and ``workers`` Celery workers (``spread=True``: the
    phases of each interval alternate between them, :mod:`tools.celery_stack`), with ``storage="s3"`` the
    data root and the reports on a loopback S3 server (module docstring).

    ``settings`` are extra environment variables for every component (``EO_*`` pipeline settings,
    ``AIRFLOW__CORE__DAGS_FOLDER`` for another DAGs folder); the caller's own ``AIRFLOW__*`` and ``EO_*``
    variables are not inherited. Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, run_dir: Path, *, purpose: str, settings: dict[str, str] | None = None,
                 parallelism: int = 2, log: Callable[[str], None] | None = None, executor: str = "local",
                 storage: str = "local", workers: int = 2, spread: bool = False):
        if executor not in ("local", "celery") or storage not in ("local", "s3"):
            raise ValueError(f"executor must be local|celery and storage local|s3, not {executor!r}, {storage!r}")
        self.run_dir, self.id = Path(run_dir), uuid.uuid4().hex[:10]
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.db = MetaDB(f"eo_{purpose}_{self.id}")
        self.api_port = free_port()
        self.log = log or (lambda m: print(m, flush=True))
        self.s3 = S3Server(self.run_dir, f"eo-{self.id}") if storage == "s3" else None
        self.celery = (CeleryWorkers(self.run_dir, self.id, self.db.name, workers, spread=spread)
                       if executor == "celery" else None)
        self.env = self._env(settings or {}, parallelism)
        self.marker = f"EO_DEPLOYMENT_ID={self.id}".encode()
        self.stack = Stack(self.run_dir, self.env, self.marker, self.log)
        self.worker_env: dict[str, dict[str, str]] = {}  # each Celery worker's environment, as last started

    def _env(self, settings: dict[str, str], parallelism: int) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "EO_", "AWS_"))}
        executor = self.celery.settings() if self.celery else {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                                                               **scheduler_env()}
        storage = {"EO_DATA_ROOT": str(self.run_dir / "data")}
        if self.s3 is not None:
            storage = {"EO_DATA_ROOT": f"s3://{self.s3.bucket}/eo", "EO_REPORTS_DIR": f"s3://{self.s3.bucket}/reports",
                       "EO_STORAGE_CONN_ID": "eo_s3",
                       "AIRFLOW_CONN_EO_S3": self.s3.connection(), **self.s3.env()}
        with mock.patch.dict(os.environ, base, clear=True):  # no stray settings of the caller's
            return airflow_env({
                "AIRFLOW_HOME": str(self.run_dir / "airflow-home"), **storage,
                "EO_DEPLOYMENT_ID": self.id, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db.url,
                "AIRFLOW__CORE__PARALLELISM": str(parallelism), **executor,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
                "AIRFLOW__API__PORT": str(self.api_port), "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.api_port}", "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex, "AIRFLOW__API__SECRET_KEY": uuid.uuid4().hex,
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),  # others may run a scheduler
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),  # ... and a triggerer
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "45",  # a killed supervisor's task
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "15",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",  # parse once: CPU is scarce
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "300", "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                **settings,
            })

    @property
    def data_root(self) -> Path:
        """The local data root (``storage="local"``); see :attr:`data_url` for either kind."""
        if self.s3 is not None:
            raise ValueError(f"the data root is on S3 ({self.data_url}), not a local path")
        return Path(self.env["EO_DATA_ROOT"])

    @property
    def data_url(self) -> str:
        return self.env["EO_DATA_ROOT"]

    def airflow(self, name: str, args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> None:
        """Run one ``airflow`` CLI command to completion (log: ``logs/<name>.log``); raise if it fails."""
        with open(self.run_dir / "logs" / f"{name}.log", "ab") as f:
            code = subprocess.run([str(BIN / "airflow"), *args], env=env or self.env, stdout=f,
                                  stderr=subprocess.STDOUT, timeout=timeout).returncode
        if code != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed (exit {code}); see {self.run_dir}/logs/{name}.log")

    def wait(self, what: str, cond: Callable[[], bool], timeout: float) -> None:
        end = time.time() + timeout
        while not cond():
            if time.time() > end:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {self.run_dir}/logs")
            self.check_alive()
            time.sleep(1)

    def check_alive(self) -> None:
        """Raise if a component (api-server, scheduler, dag-processor, triggerer, a worker) has exited."""
        if dead := [n for n, p in self.stack.procs.items() if p.poll() is not None and n in self.components]:
            raise RuntimeError(f"component(s) {dead} exited; see {self.run_dir}/logs")

    @property
    def components(self) -> tuple[str, ...]:
        return ("api-server", "scheduler", "dag-processor", "triggerer", *(self.celery.names if self.celery else ()))

    def start_worker(self, name: str) -> subprocess.Popen:
        """Start (or restart) the Celery worker ``name`` in its private working directory."""
        assert self.celery is not None
        env = self.worker_env[name] = self.celery.env(name, self.env)
        with open(self.run_dir / "logs" / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(self.celery.command(name), env=env, cwd=self.celery.home(name) / "work",
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.stack.procs[name] = proc
        self.log(f"started {name} (pid {proc.pid})")
        return proc

    def start(self, dag_ids: list[str]) -> Deployment:
        """Create the DB, migrate it, start the components and wait until ``dag_ids`` are parsed."""
        self.db.admin('CREATE DATABASE "{db}"')
        if self.s3 is not None:
            self.s3.start()
        self.airflow("db-migrate", ["db", "migrate"])
        py = str(BIN / "airflow")
        if self.celery is not None:
            self.celery.write_policy(Path(self.env["AIRFLOW_HOME"]))
            for name in self.celery.names:
                self.start_worker(name)
        self.stack.start("api-server", [py, "api-server", "-H", "127.0.0.1", "-p", str(self.api_port), "-w", "1"])
        self.stack.start("scheduler", [py, "scheduler"])
        self.stack.start("dag-processor", [py, "dag-processor"])
        self.stack.start("triggerer", [py, "triggerer"])  # a backfill's runs wait for a batch there
        self.wait("the api-server", lambda: port_open(self.api_port), 300)
        for dag_id in dag_ids:
            self.wait(f"{dag_id} to be parsed", lambda d=dag_id: bool(self.db.query(
                "select 1 from serialized_dag where dag_id = %s", (d,))), 300)
        return self

    def backfill(self, dag_id: str, first_day: str, last_day: str, max_active_runs: int = 1) -> None:
        """``airflow backfill create`` of [first_day, last_day] in order (``max_active_runs`` of them at
        once), then unpause the DAG.

        Backfill first, unpause after: with catchup=False the scheduler would otherwise create a run for
        the latest interval; that logical date would then already be taken when the backfill asks for it.
        The deployment's DAGs end at ``last_day`` (``EO_PV_END``, which the pv DAGs read): a backfill ending
        yesterday that runs past midnight UTC would otherwise get a scheduled run of the day that just ended.
        """
        if self.env.get("EO_PV_END") != last_day:
            raise ValueError(f"start the deployment with EO_PV_END={last_day} (the backfill's last day), not "
                             f"{self.env.get('EO_PV_END')!r}: past midnight UTC the scheduler would run a day "
                             "the backfill lacks")
        self.airflow(f"backfill-{dag_id}", ["backfill", "create", "--dag-id", dag_id, "--from-date", first_day,
                                            "--to-date", last_day, "--max-active-runs", str(max_active_runs),
                                            "--reprocess-behavior", "none"])
        self.airflow(f"unpause-{dag_id}", ["dags", "unpause", dag_id])
        self.log(f"backfill of {dag_id} {first_day} .. {last_day} created, {dag_id} unpaused")

    def runs(self, dag_id: str) -> dict[str, str]:
        """``{interval start day: state}`` of the DAG's backfill runs."""
        return {start.astimezone(timezone.utc).date().isoformat(): state for start, state in self.db.query(
            "select data_interval_start, state from dag_run where dag_id = %s and run_type = 'backfill'",
            (dag_id,))}

    def stop_components(self) -> None:
        """Stop every process of the deployment, orphans included; the database and the S3 server stay
        for reading. The broker's keys of this deployment are deleted."""
        self.stack.stop()
        if self.celery is not None:
            self.celery.cleanup()
        self.log("all components stopped")

    def stop(self) -> None:
        """Stop every process of the deployment and the S3 server, and drop its database (idempotent)."""
        try:
            self.stop_components()
        finally:
            if self.s3 is not None:
                self.s3.stop()
            self.db.drop()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
