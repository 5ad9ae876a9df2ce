"""Run DAG intervals through Airflow on the embedded default: the project's own AIRFLOW_HOME, SQLite
metadata, local Spark (``spark_default`` = ``local[*]``) and local files under ``EO_DATA_ROOT``.

Used by ``make demo``, ``make run-interval`` and the end-to-end tests. Each interval is one
``airflow dags test`` process; its full log is kept under ``EO_DATA_ROOT/logs/``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from exactly_once.settings import data_root

PROJECT_ROOT = Path(__file__).resolve().parents[1]

BIN = Path(sys.executable).parent
# What every task process of the pipeline imports. A scheduler running the LocalExecutor can fork its
# workers from a server that imported them once (Airflow 3.3+), so a task starts with them loaded instead
# of paying the imports again (Great Expectations alone: ~5 s per validate task; docs/DEPLOYING.md).
SCHEDULER_PRELOAD = ("airflow.sdk.execution_time.task_runner",
                     "airflow.providers.apache.spark.operators.spark_submit",
                     "exactly_once.airflow.taskgroup", "great_expectations", "pyarrow.parquet")


def scheduler_env() -> dict[str, str]:
    """Settings for a scheduler with the LocalExecutor: workers forked from a preloaded forkserver.

    A module that fails to import there is skipped silently by ``multiprocessing`` (the tasks then import
    it themselves): correctness never depends on the preload, only task start-up time does.
    """
    return {"AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
            "AIRFLOW__SCHEDULER__MP_FORKSERVER_PRELOAD": ",".join(SCHEDULER_PRELOAD)}


def airflow_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for Airflow commands: project dags/plugins, quiet logs, local Spark by default."""
    env = dict(os.environ)
    home = env.get("AIRFLOW_HOME") or str(PROJECT_ROOT / ".airflow")
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        "EO_DATA_ROOT": data_root(),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # spark-submit of the pinned pyspark
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT / "plugins"), env.get("PYTHONPATH")])),
        "GX_ANALYTICS_ENABLED": "false",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    env.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    env.update(extra or {})
    return env


def airflow(args: list[str], *, env: dict[str, str] | None = None, log_path: Path | None = None,
            timeout: float | None = None) -> int:
    """Run ``airflow <args>``; output goes to ``log_path`` (or is inherited). Returns the exit code."""
    cmd = [str(BIN / "airflow"), *args]
    if log_path is None:
        return subprocess.run(cmd, env=env or airflow_env(), timeout=timeout).returncode
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.run(cmd, env=env or airflow_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout).returncode


def ensure_db(env: dict[str, str] | None = None) -> None:
    """Create / migrate the metadata DB once (SQLite file in the project's AIRFLOW_HOME by default)."""
    env = env or airflow_env()
    marker = Path(env["AIRFLOW_HOME"]) / ".eo-db-migrated"
    if marker.exists():
        return
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    log = Path(data_root()) / "logs" / "airflow-db-migrate.log"
    if airflow(["db", "migrate"], env=env, log_path=log) != 0:
        raise SystemExit(f"airflow db migrate failed; see {log}")
    marker.touch()


@dataclass
class IntervalResult:
    dag_id: str
    day: str
    exit_code: int
    seconds: float
    log_path: Path

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def logical_date_for(day: str) -> str:
    """The logical date whose manual run covers ``[day, day+1)``.

    With a data-interval timetable Airflow gives a manual run at logical date T the last complete
    interval before T, so the interval that starts at ``day`` belongs to logical date ``day + 1``.
    """
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat() + "T00:00:00+00:00"


def dag_interval(dag_id: str, start: datetime) -> tuple[datetime, datetime]:
    """The data interval of ``dag_id``'s schedule that starts at ``start`` (the DAG is loaded with
    Airflow's DagBag from the project's dags/ folder). SystemExit with the nearest start otherwise."""
    os.environ.update({k: v for k, v in airflow_env().items() if k.startswith(("AIRFLOW", "EO_"))})
    from airflow.dag_processing.dagbag import DagBag

    from exactly_once.errors import LayoutError
    from exactly_once.layout import timetable_intervals

    bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags"))
    dag = bag.dags.get(dag_id)
    if dag is None:
        raise SystemExit(f"no DAG {dag_id!r} in {PROJECT_ROOT / 'dags'} (import errors: {list(bag.import_errors)})")
    try:
        iv = timetable_intervals(dag.timetable, start, count=1)[0]
    except LayoutError as exc:
        raise SystemExit(str(exc)) from None
    if iv.start != start:
        raise SystemExit(f"{start.isoformat()} is not the start of an interval of {dag_id}'s schedule; the next "
                         f"one starts at {iv.start.isoformat()}")
    return iv.start, iv.end


def run_interval(dag_id: str, day: str | None = None, *, start: datetime | None = None,
                 end: datetime | None = None, reprocess: bool = False, allow_shrinking: bool = False,
                 extra_env: dict[str, str] | None = None, timeout: float | None = 1800) -> IntervalResult:
    """One DAG run via ``airflow dags test``: the daily interval starting at ``day``, or the interval
    ``[start, end)`` (``end`` found from the DAG's timetable when not given)."""
    if day is not None:
        start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
        end = start + timedelta(days=1)
    if start is None:
        raise ValueError("run_interval needs day or start")
    if end is None:
        start, end = dag_interval(dag_id, start)
    # `airflow dags test` runs one interval: a stateful begin must fail at once, not wait for a predecessor
    env = airflow_env({"EO_PREDECESSOR_TIMEOUT_SECONDS": "0", **(extra_env or {})})
    ensure_db(env)
    label = day or start.strftime("%Y%m%dT%H%M%SZ")
    log = Path(data_root()) / "logs" / dag_id / f"{label}.log"
    # a manual run at logical date T gets the last complete interval before T: the one ending at T
    args = ["dags", "test", dag_id, end.isoformat()]
    if reprocess:
        args += ["-c", json.dumps({"reprocess": True, **({"allow_shrinking": True} if allow_shrinking else {})})]
    t0 = time.perf_counter()
    code = airflow(args, env=env, log_path=log, timeout=timeout)
    return IntervalResult(dag_id, label, code, time.perf_counter() - t0, log)


def failure_reason(log_path: Path) -> str:
    """The most telling line of a failed run's log (our errors are one line by design)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "no log"
    keys = ("ValidationFailedError", "OrderingError", "FencedError", "Error:", "error:", "Exception")
    for line in reversed(lines):
        if any(k in line for k in keys) and "Traceback" not in line:
            return line.strip()[:400]
    return (lines[-1] if lines else "").strip()[:400]
