"""The write task: spark-submit by default, a Spark Connect client when configuration says so.

:class:`WriteOperator` is a ``SparkSubmitOperator`` (same arguments, same ``spark_default`` connection).
At run time it picks the path, with no DAG change:

* ``EO_SPARK_REMOTE=sc://host:port`` in the task's environment, or a Spark connection of type
  ``spark_connect`` (or whose host is an ``sc://`` URL): the job module (``application``) is imported
  in the task process and its ``compute(ctx)`` runs as a Spark Connect client of that server, in a new
  session per attempt (id derived from the transaction attempt's staging dir and begin id and the try
  number), every query tagged with the transaction (:func:`exactly_once.job.connect.job_tag`), the session
  stopped at the end. A server that dies mid-write fails the attempt with the retryable
  ``SparkConnectLostError`` after ``EO_SPARK_CONNECT_RETRY_SECONDS``. Before it starts, the
  queries of earlier attempts of the same transaction still running on the server (a client killed
  mid-write) are interrupted, so nothing but this attempt writes into the staging dir;
* otherwise ``spark-submit`` as before (``local[*]`` or a cluster master). With no Airflow connection of the
  group's ``spark_conn_id`` (``spark_default``) at all, the task submits to ``local[*]`` and logs so
  (:func:`default_local`): the Spark provider alone would submit to ``yarn``. Unless the master is
  ``local``, the library rides along on ``--py-files`` (:mod:`exactly_once.job.shipping`): the driver and
  the executors need neither Airflow nor the package installed. The driver's and executors' Python is
  the task environment's ``PYSPARK_DRIVER_PYTHON`` / ``PYSPARK_PYTHON`` (default: the task's own
  interpreter); in cluster deploy mode the cluster's (``spark.pyspark.python`` in the Spark conf), never
  the Airflow worker's path. A standalone master with cluster deploy mode is refused (ConfigError):
  Spark runs Python drivers on a standalone cluster in client mode only. The job reads its spec and writes
  its counts with the storage connection's options, handed over in spark-submit's environment, never on
  its command line (:func:`job_env`; in cluster deploy mode the driver uses the cluster's credentials).

Either way the task keeps its transaction's heartbeat fresh while the job runs
(:mod:`exactly_once.protocol.liveness`): ``recover``/``gc`` never take over a write that is still alive.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ..contracts import JobSpec
from ..errors import ConfigError, ExactlyOnceError
from ..ids import TxnRef
from ..protocol.liveness import write_heartbeat
from ..protocol.pipeline import IntervalRun
from ..job.options import options_env
from ..job.shipping import library_zip, needs_shipping
from ..storage import redact, storage_for
from .connections import storage_options
from .heap import young_heap

log = logging.getLogger(__name__)
REMOTE_ENV = "EO_SPARK_REMOTE"
PYTHON_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def spark_remote(conn_id: str | None) -> str | None:
    """The Spark Connect URL the write phase should use, or None for spark-submit: ``EO_SPARK_REMOTE``
    first, else the connection ``conn_id`` when it is a Spark Connect one (``sc://host:port``)."""
    env = os.environ.get(REMOTE_ENV, "").strip()
    if env:
        if not env.startswith("sc://"):
            raise ConfigError(f"{REMOTE_ENV} must be a Spark Connect URL like sc://127.0.0.1:15002, "
                              f"not {redact(env)}")
        return env
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - no such connection: spark-submit's own default (local)
        return None
    host = conn.host or ""
    if host.startswith("sc://"):
        return host
    if conn.conn_type == "spark_connect":
        return f"sc://{host or '127.0.0.1'}:{conn.port or 15002}"
    return None


LOCAL_MASTER = "local[*]"


def default_local(conn_id: str) -> bool:
    """When Airflow has no connection ``conn_id``, define it for this task process as ``local[*]`` (through
    ``AIRFLOW_CONN_<ID>``, Airflow's own environment lookup) and log so - the Spark provider alone would
    fall back to ``--master yarn``. Returns whether it did. A connection that exists is never touched."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(conn_id)
        return False
    except AirflowNotFoundException:
        pass
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({"conn_type": "spark", "host": LOCAL_MASTER})
    log.warning("no Airflow connection %r: spark-submit runs the job on %s in this worker (the Spark provider "
                "would submit to yarn); define the connection for a cluster (README, Deploying)", conn_id,
                LOCAL_MASTER)
    return True


def load_compute(application: str, function: str = "compute") -> Callable[..., Any]:
    """The ``compute(ctx)`` (or another ``function``: ``compute_batch(batch)``) of the job script
    ``application`` (imported from its file, once per process)."""
    path = Path(application).resolve()
    name = f"eo_job_{path.stem}_{abs(hash(str(path))):x}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot import the write job {application}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    compute = getattr(module, function, None)
    if not callable(compute):
        raise ConfigError(f"{application} has no {function}() function: the Spark Connect path calls it "
                          "(see docs/JOB_API.md)" + ("; or set the pipeline's max_batch=1" if function != "compute" else ""))
    return compute


@contextmanager
def _session(remote: str, tag: str, attempt: int, scope: str) -> Iterator[Any]:
    """A new Spark Connect session of ``remote`` tagged ``tag``/``attempt``, after interrupting the queries
    of ``tag``'s earlier attempts; a lost server surfaces as SparkConnectLostError; stopped at the end."""
    from ..job.connect import connect_mode, connect_session, interrupt_writes, lost_as_error, stop_session

    interrupt_writes(remote, tag, range(1, attempt), scope=scope)
    # young_heap: stop_session's full collection walks only what the session made
    with young_heap(), connect_mode(), lost_as_error(remote):
        spark = connect_session(remote, tag, attempt, scope=scope)
        try:
            yield spark
        finally:
            stop_session(spark)


def run_connect(application: str, spec_url: str, remote: str, *, attempt: int = 1,
                args: tuple[str, ...] = (), storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the job ``application`` for the spec at ``spec_url`` as a Spark Connect client of ``remote``:
    interrupt earlier attempts' queries, then one new tagged session, stopped at the end. The spec, the
    inputs' checks and the counts are read and written with ``storage_options`` (the storage connection's)."""
    from ..job import execute

    options = dict(storage_options or {})
    store, key = storage_for(spec_url, **options)
    spec = JobSpec.from_json(store.read_bytes(key))
    compute = load_compute(application)
    t0 = time.perf_counter()
    with _session(remote, spec.txn, attempt, spec.session_scope) as spark:
        counts = execute(compute, spark, spec, args, storage_options=options)
    log.info("wrote %s over Spark Connect %s in %.1f s", spec.txn, redact(remote), time.perf_counter() - t0)
    return {"txn": spec.txn, "counts": counts.to_dict(), "spark": "connect"}


def run_connect_batch(application: str, batch_url: str, remote: str, *, attempt: int = 1,
                      args: tuple[str, ...] = (), storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`run_connect` for a batch (``compute_batch`` over the batch spec at ``batch_url``): one
    session tagged with the batch, earlier attempts' queries of the same batch interrupted first."""
    from ..contracts import BatchSpec
    from ..job import execute_batch

    options = dict(storage_options or {})
    store, key = storage_for(batch_url, **options)
    batch = BatchSpec.from_json(store.read_bytes(key))
    one = len(batch.entries) == 1  # a batch of one runs the job's own compute (execute_batch)
    compute_batch = None if one else load_compute(application, "compute_batch")
    compute = load_compute(application) if one else None
    t0 = time.perf_counter()
    with _session(remote, batch.batch_id, attempt, batch.scratch_dir) as spark:
        counts = execute_batch(compute_batch, spark, batch, args, compute=compute, storage_options=options)
    log.info("wrote batch %s (%d intervals) over Spark Connect %s in %.1f s", batch.batch_id, len(counts),
             redact(remote), time.perf_counter() - t0)
    return {"batch": batch.batch_id, "intervals": len(counts), "spark": "connect"}


def write_batch(settings: dict[str, Any], batch_url: str, attempt: int) -> None:
    """A batch's write job on the group's Spark settings (``application``, ``conn_id``, ``conf``,
    ``env_vars``, ``name``, ``application_args``): a Spark Connect client when configuration says so
    (:func:`spark_remote`), else ``spark-submit <application> --batch <url> <application_args...>``."""
    remote = spark_remote(settings["conn_id"])
    args = tuple(settings.get("application_args") or ())
    if remote is not None:
        run_connect_batch(settings["application"], batch_url, remote, attempt=attempt, args=args,
                          storage_options=storage_options(settings.get("storage_conn_id")))
        return
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    default_local(settings["conn_id"])
    options = storage_options(settings.get("storage_conn_id"))
    hook = SparkSubmitHook(conf=dict(settings.get("conf") or {}), conn_id=settings["conn_id"],
                           name=settings.get("name") or "exactly-once-batch", env_vars=dict(settings.get("env_vars") or {}),
                           application_args=["--batch", batch_url, *args])
    with job_env(options):  # the job reads its batch spec and writes its counts with the connection's options
        hook.submit(settings["application"])


@contextmanager
def job_env(options: dict[str, Any]) -> Iterator[None]:
    """Hand the storage connection's ``options`` to the ``spark-submit`` started inside: in this process's
    environment, which the Spark provider passes to spark-submit as it is (never into its command line or
    ``--conf``, which the provider logs - as it would with ``env_vars`` on YARN or Kubernetes); the driver
    inherits it in client mode (:mod:`exactly_once.job.options`). Restored after."""
    entry = options_env(options)
    before = {k: os.environ.get(k) for k in entry}
    os.environ.update(entry)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def interrupt_batch_writes(settings: dict[str, Any], batch_id: str, scratch_url: str, attempts: int) -> list[str]:
    """Over Spark Connect, interrupt the queries of write attempts 1..``attempts`` of batch ``batch_id``
    (:func:`run_connect_batch`'s session scope: the batch's scratch dir); nothing to do for spark-submit."""
    from ..job.connect import interrupt_writes

    remote = spark_remote(settings["conn_id"])
    if remote is None:
        return []
    return interrupt_writes(remote, batch_id, range(1, attempts + 1), scope=scratch_url)


def interrupt_dead_writes(run: IntervalRun, txn: TxnRef, remote: str, attempts: int) -> list[str]:
    """The abort's side of :func:`run_connect`: interrupt write attempts 1..``attempts`` of ``txn`` still
    running on ``remote``. No spec means begin never handed the transaction on: no write ran."""
    from ..job.connect import interrupt_writes

    try:
        spec = run.job_spec(txn)
    except (ExactlyOnceError, OSError) as exc:
        log.info("no job spec for %s (%s): no write attempt to interrupt", txn.name, exc)
        return []
    return interrupt_writes(remote, txn.name, range(1, attempts + 1), scope=spec.session_scope)


class WriteOperator(SparkSubmitOperator):
    """The group's write task: spark-submit, or a Spark Connect client (module docstring). The job reads
    its spec and writes its counts with the options of ``storage_conn_id`` - the pipeline's
    ``PipelineConfig.storage_conn_id``, as every other task of the group uses it (never the worker's
    ``EO_STORAGE_CONN_ID``, which may be unset or name another pipeline's connection)."""

    def __init__(self, *, storage_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id

    def execute(self, context: Any) -> Any:
        args = list(self.application_args or [])
        options = storage_options(self.storage_conn_id)
        with young_heap(), write_heartbeat(args, options):  # the job is alive
            return self._run(args, context, options)

    def _run(self, args: list[str], context: Any, options: dict[str, Any]) -> dict[str, Any]:
        """Run the job; returns what ran (its XCom): ``spark`` ("submit" or "connect") and ``attempt``,
        the task's try - commit reads it (:meth:`~exactly_once.airflow.operators.CommitOperator.teardown_idle`)."""
        remote, attempt = spark_remote(self._conn_id), int(context["ti"].try_number or 1)
        if remote is None:
            self._prepare_submit()
            with job_env(options):  # the job reads its spec and writes its counts with these (job_env)
                super().execute(context)
            return {"spark": "submit", "attempt": attempt}
        if len(args) < 2 or args[0] != "--spec":
            raise ConfigError(f"the write task's arguments must start with --spec <url>, got {args[:1]}")
        return {**run_connect(self.application, args[1], remote, attempt=attempt, args=tuple(args[2:]),
                              storage_options=options),
                "attempt": attempt}

    def _prepare_submit(self) -> None:
        """Fit the spark-submit to where its driver runs (module docstring): the connection as the
        Spark provider resolves it (``local[*]`` when there is none: :func:`default_local`), the Python
        variables, and the library on ``--py-files``."""
        default_local(self._conn_id)
        resolved = self._get_hook()._connection  # the provider's own reading of the connection
        master, deploy = str(resolved.get("master") or ""), resolved.get("deploy_mode")
        if master.startswith("spark://") and deploy == "cluster":
            raise ConfigError(f"the Spark connection {self._conn_id} asks for cluster deploy mode on the "
                              f"standalone master {master}: Spark runs Python applications there in client "
                              "mode only. Set its deploy-mode to client (the driver runs in this task; "
                              "docs/DEPLOYING.md) or use YARN or Kubernetes for cluster mode")
        self.env_vars = submit_env(self.env_vars, cluster=deploy == "cluster")
        if needs_shipping(master, deploy):
            shipped = str(library_zip())
            self.py_files = ",".join([shipped, *[p for p in (self.py_files or "").split(",") if p]])
        self._hook = None  # built again by execute, with the above


def submit_env(env_vars: dict[str, Any] | None, *, cluster: bool) -> dict[str, Any]:
    """spark-submit's environment: the Python variables as this task's environment sets them (else
    its own interpreter); none in cluster deploy mode, where the driver's host is not this one."""
    env = {k: v for k, v in (env_vars or {}).items() if k not in PYTHON_ENV}
    if not cluster:
        env.update({k: os.environ.get(k) or sys.executable for k in PYTHON_ENV})
    return env
