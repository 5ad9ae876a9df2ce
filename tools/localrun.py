"""Run DAG intervals through Airflow on the embedded default: the project's own AIRFLOW_HOME, SQLite
metadata, local Spark (``spark_default`` = ``local[*]``) and local files under ``EO_DATA_ROOT``.

Used by ``make demo``, ``make run-interval`` and the end-to-end tests. Each interval is one
``airflow dags test`` process; its full log is kept under ``EO_DATA_ROOT/logs/<dag>/`` (one file per
run), and a re-run of an interval keeps the earlier Airflow runs (see :func:`run_logical_date`).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

from exactly_once.settings import data_root

PROJECT_ROOT = Path(__file__).resolve().parents[1]

BIN = Path(sys.executable).parent
LOCAL_RETRY_DELAY = 2  # seconds between the retries of a `make run-interval` / `make backfill` task
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


def dags_folder() -> Path:
    """The DAG files the local runner uses: the project's dags/, or ``EO_DAGS_FOLDER`` (the tests' own DAGs)."""
    return Path(os.environ.get("EO_DAGS_FOLDER") or PROJECT_ROOT / "dags")


def airflow_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for Airflow commands: project dags/plugins, quiet logs, local Spark by default."""
    env = dict(os.environ)
    home = env.get("AIRFLOW_HOME") or str(PROJECT_ROOT / ".airflow")
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
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
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")  # Airflow's own, in every run's output
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


@contextlib.contextmanager
def _airflow_settings() -> Iterator[None]:
    """The project's Airflow settings in this process's environment while Airflow is used in-process,
    restored afterwards: a caller's environment (a test's, or later ``airflow`` subprocesses inheriting
    it) never keeps this process's quiet log level or default Spark connection. Quiet (WARNING unless the
    environment says otherwise): this process only reads, and Airflow sets its logging up at its first use
    here, so an INFO line (the DagBag's) would reach the console of ``make run-interval``."""
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in airflow_env().items() if k.startswith(("AIRFLOW", "EO_"))})
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def load_dag(dag_id: str) -> Any:
    """``dag_id`` from the project's dags/ folder, through Airflow's DagBag (SystemExit if it is not there)."""
    with _airflow_settings():
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(dags_folder()))
    dag = bag.dags.get(dag_id)
    if dag is None:
        errors = "; ".join(f"{Path(f).name}: {str(e).strip().splitlines()[-1]}" for f, e in bag.import_errors.items())
        raise SystemExit(f"no DAG {dag_id!r} in {dags_folder()}" + (f" (import errors: {errors})" if errors else ""))
    return dag


def dag_interval(dag_id: str, start: datetime) -> tuple[datetime, datetime]:
    """The data interval of ``dag_id``'s schedule that starts at ``start`` (the DAG is loaded with
    Airflow's DagBag from the project's dags/ folder). SystemExit with the nearest start otherwise."""
    from exactly_once.errors import LayoutError
    from exactly_once.protocol.timetables import interval_starting_at, next_start

    dag = load_dag(dag_id)
    try:
        iv = interval_starting_at(dag.timetable, start)
        nxt = next_start(dag.timetable, start) if iv is None else None
    except LayoutError as exc:
        raise SystemExit(str(exc)) from None
    if iv is None:
        raise SystemExit(f"{start.isoformat()} is not the start of an interval of {dag_id}'s schedule; the next "
                         f"one starts at {nxt.isoformat() if nxt else '(none)'}")
    return iv.start, iv.end


def manual_interval(timetable: Any, run_after: datetime) -> tuple[datetime, datetime]:
    """The interval a manual run at ``run_after`` gets, as the phases resolve it: Airflow's inference, or
    - zero-length where the timetable has an interval ending there (a daylight-saving jump) - that interval
    (``exactly_once.airflow.operators.interval_of``)."""
    import pendulum
    from airflow.serialization.encoders import coerce_to_core_timetable

    from exactly_once.protocol.timetables import interval_ending_at

    iv = coerce_to_core_timetable(timetable).infer_manual_data_interval(run_after=pendulum.instance(run_after))
    if iv.start == iv.end and (found := interval_ending_at(timetable, iv.end)) is not None:
        return found.start, found.end
    return iv.start, iv.end


@contextlib.contextmanager
def interval_lock(dag_id: str, label: str) -> Iterator[None]:
    """Hold ``EO_DATA_ROOT/logs/<dag>/<label>.lock`` while one interval runs: a second ``run-interval`` of
    the same interval at the same time is refused at once, saying who holds it (two ``airflow dags test``
    of one interval would otherwise collide in the metadata DB with an opaque IntegrityError)."""
    path = Path(data_root()) / "logs" / dag_id / f"{label}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise SystemExit(f"{dag_id} {label}: this interval is already being run by {holder}; wait for that "
                             "run to finish (or stop it), then run it again") from None
        f.truncate(0)
        f.write(f"pid {os.getpid()} since {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


def attempt_log(dag_id: str, label: str) -> Path:
    """A new log file for this run of the interval: ``logs/<dag>/<label>.<UTC time>.log`` (one per run)."""
    folder = Path(data_root()) / "logs" / dag_id
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = folder / f"{label}.{stamp}.log", 1
    while path.exists():
        n += 1
        path = folder / f"{label}.{stamp}-{n}.log"
    return path


def run_logical_date(dag_id: str, start: datetime, end: datetime) -> datetime:
    """The logical date of a new manual run of ``[start, end)`` that keeps the DAG's earlier runs.

    A manual run at logical date T covers the last complete interval before T, so ``end`` is the natural
    one - but ``airflow dags test`` deletes an existing run of its logical date. A re-run of the interval
    takes ``end`` plus the next free microsecond, provided the DAG's timetable gives it the same interval
    (a cron schedule does); otherwise the earlier run is replaced, as ``airflow dags test`` does.
    """
    taken = taken_logical_dates(dag_id, end, end + timedelta(seconds=1))
    if end not in taken:
        return end
    candidate = max(taken) + timedelta(microseconds=1)
    if manual_interval(load_dag(dag_id).timetable, candidate) == (start, end):
        return candidate
    print(f"note: {dag_id}'s schedule gives logical date {candidate.isoformat()} another interval; this run "
          f"replaces the earlier run of [{start.isoformat()}, {end.isoformat()}) in Airflow", file=sys.stderr)
    return end


def undated(dag_id: str, start: datetime, end: datetime) -> str:
    """Why ``airflow dags test`` cannot run ``[start, end)`` of ``dag_id`` (its run is dated ``end``: a
    manual run covers the last complete interval before its date), or "". A date outside the start/end dates
    of the tasks an exactly-once group needs (``airflow.run_dates``) gets no task: the run would "succeed"
    having done nothing - the last interval of a DAG that ended, above all."""
    from airflow.serialization.serialized_objects import DagSerialization

    from exactly_once.airflow.run_dates import RunDates, backfill_date
    from exactly_once.ids import Interval

    dag = DagSerialization.from_dict(DagSerialization.to_dict(load_dag(dag_id)))
    dates = RunDates.of_dag(dag)
    if dates.admits(end):
        return ""
    bound = f"{'before' if dates.earliest and dates.earliest > end else 'after'} {dates.bound(end)}"
    at = backfill_date(dag, Interval(start, end))
    dates_of = f"--from-date {at.isoformat()} --to-date {at.isoformat()}" if at else \
        "--from-date A --to-date A (A: the date a backfill selects this interval's run by)"
    return (f"{dag_id}: `airflow dags test` (make run-interval, make backfill) dates the run of [{start.isoformat()}, "
            f"{end.isoformat()}) at {end.isoformat()} - a manual run covers the last complete interval before its "
            f"date - {bound}: Airflow would create no task, and the run would do nothing. Run it in your Airflow "
            f"instead as a backfill, whose runs get every task (Airflow 3.2+): `airflow backfill create --dag-id "
            f"{dag_id} {dates_of} --reprocess-behavior completed`; to reprocess it once it ran, `eo reprocess "
            f"<table-url> --interval {start.isoformat()}` dates its run within those dates")


def taken_logical_dates(dag_id: str, lo: datetime, hi: datetime) -> set[datetime]:
    """Logical dates in ``[lo, hi)`` of ``dag_id``'s runs in the project's metadata DB."""
    with _airflow_settings():
        return _taken_logical_dates(dag_id, lo, hi)


def _taken_logical_dates(dag_id: str, lo: datetime, hi: datetime) -> set[datetime]:
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dates = session.scalars(select(DagRun.logical_date).where(
            DagRun.dag_id == dag_id, DagRun.logical_date >= lo, DagRun.logical_date < hi)).all()
    return {d if d.tzinfo else d.replace(tzinfo=timezone.utc) for d in dates if d is not None}


def run_interval(dag_id: str, day: str | None = None, *, start: datetime | None = None,
                 end: datetime | None = None, reprocess: bool = False, allow_shrinking: bool = False,
                 extra_env: dict[str, str] | None = None, timeout: float | None = 1800,
                 conf: dict[str, Any] | None = None) -> IntervalResult:
    """One DAG run via ``airflow dags test``: the daily interval starting at ``day``, or the interval
    ``[start, end)`` (``end`` found from the DAG's timetable when not given), with ``conf`` added to the
    run's conf. Refused (SystemExit) while another run of the interval is under way; each run gets its
    own log and keeps earlier runs."""
    if day is not None:
        start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
        end = start + timedelta(days=1)
    if start is None:
        raise ValueError("run_interval needs day or start")
    if end is None:
        start, end = dag_interval(dag_id, start)
    # `airflow dags test` runs one interval: a stateful begin must fail at once, not wait for a predecessor.
    # Retries stay (the restart strategy), 2 s apart unless EO_RETRY_DELAY_SECONDS says otherwise: at the
    # DAG's 30 s with exponential backoff a broken job kept the console silent for six minutes.
    quick = {} if os.environ.get("EO_RETRY_DELAY_SECONDS") else {"EO_RETRY_DELAY_SECONDS": str(LOCAL_RETRY_DELAY)}
    env = airflow_env({"EO_PREDECESSOR_TIMEOUT_SECONDS": "0", **quick, **(extra_env or {})})
    label = day or start.strftime("%Y%m%dT%H%M%SZ")
    refusal = undated(dag_id, start, end)
    if refusal:
        raise SystemExit(refusal)
    with interval_lock(dag_id, label):
        ensure_db(env)
        log = attempt_log(dag_id, label)
        # a manual run at logical date T gets the last complete interval before T: the one ending at T
        args = ["dags", "test", dag_id, run_logical_date(dag_id, start, end).isoformat()]
        run_conf = {**({"reprocess": True} if reprocess else {}),
                    **({"allow_shrinking": True} if reprocess and allow_shrinking else {}), **(conf or {})}
        if run_conf:
            args += ["-c", json.dumps(run_conf)]
        t0 = time.perf_counter()
        code = airflow(args, env=env, log_path=log, timeout=timeout)
    return IntervalResult(dag_id, label, code, time.perf_counter() - t0, log)


_LOG_PREFIX = re.compile(r"^\S+\s+\[\w+\s*\]\s+")  # "<timestamp> [info     ] "
_LOG_SUFFIX = re.compile(r"\s+\[[\w.]+\](?:\s+\w+=\S+)*\s*$")  # " [logger] loc=... key=value"
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::\s.*)?$")
# where one try's output starts (``airflow dags test``), or the try before it ended
_TRY_EDGES = ("::group::Pre Execute", "[DAG TEST] starting", "Cannot execute:", "Last spark-submit output:")
_SECRET = re.compile(r"(?i)(\b[\w.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key)[\w.-]*\s*[=:]\s*)"
                     r"(['\"]?)[^\s'\"]+\2")
_USERINFO = re.compile(r"(://)[^/\s@:]+:[^/\s@]+@")


def failure_reason(log_path: Path) -> str:
    """The most telling line of a failed run's log (our errors are one line by design), secrets masked.
    When the task failed because its Spark job did ("Cannot execute: spark-submit ..."), the last exception
    line that job printed in that same try - what to fix - else the task's own line (an exit code)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "no log"
    keys = ("ValidationFailedError", "OrderingError", "FencedError", "Error:", "error:", "Exception")
    reason = (lines[-1] if lines else "").strip()
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if any(k in line for k in keys) and "Traceback" not in line:
            reason = line.strip()
            if "Cannot execute:" in line and (job := _job_error(lines, i)):
                reason = f"the Spark job failed: {job}"
            break
    return mask(reason)[:400]


def _job_error(lines: list[str], failed_at: int) -> str | None:
    """The last exception line (``NameError: ...``) the job printed in the try that failed at line
    ``failed_at``: in the hook's tail after it ("Last spark-submit output:"), else in that try's output."""
    tail = []
    for line in lines[failed_at + 1:]:
        if any(edge in line for edge in _TRY_EDGES[:3]):
            break
        tail.append(line)
    for line in reversed(tail):
        if _RAISED.match(line.strip()):
            return line.strip()
    own_failure = False  # the try's "Task failed with exception" line: the job's output is above it
    for line in reversed(lines[:failed_at]):
        if any(edge in line for edge in _TRY_EDGES) or ("Task failed with exception" in line and own_failure):
            return None
        own_failure = own_failure or "Task failed with exception" in line
        if "SparkSubmitHook" not in line:
            continue  # only what the job printed, as the hook logged it
        text = _LOG_SUFFIX.sub("", _LOG_PREFIX.sub("", line.strip()))
        if _RAISED.match(text):
            return text
    return None


def mask(text: str) -> str:
    """``text`` with the values of password/secret/token/key settings and URL passwords replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", _SECRET.sub(lambda m: f"{m.group(1)}***", text))
