"""The chaos run under the real Airflow scheduler (the CLI is :mod:`tools.chaos`).

A throw-away :class:`~tools.deployment.Deployment` - a fresh PostgreSQL metadata DB, api-server,
scheduler (LocalExecutor) and dag-processor as separate processes, AIRFLOW_HOME and EO_DATA_ROOT under the
run dir - backfills ``pv_pipeline`` over N days of sample data (``airflow backfill create``,
``--max-active-runs 1``: the pipeline is stateful). Meanwhile a seeded killer ``kill -9``s task processes
at random moments: the LocalExecutor worker supervising a task, the task runner, the Spark driver JVM or
the job's Python driver. When every backfill run is final, everything is stopped, ``recover`` runs and the
invariants are checked on the data (:func:`check_table`, plus an optional ``verify(data_root, days, rows)``
callback, ``rows`` being what a reader of the target sees by day: the tests pass the pure-Python reference).
``target`` (``--target files|delta|postgres``, :mod:`tools.chaos_targets`) picks what pv is published into.
``batch`` (``--batch``) lets the backfill take pv_pipeline's batched path (the first run's ``begin`` hosts
one batch of every day: the kills then land in that batch); otherwise ``EO_PV_MAX_BATCH=1``.
The JSON report (``<run dir>/chaos-report.json``) has
the seed, the kills, the task retries (``try_number`` in the metadata DB), run states, intervals committed,
violations and the wall time. ``race_day`` also starts a second attempt of that interval (``airflow dags
test``, own SQLite home, same data root) while the scheduler's write task of that day runs: exactly one of
the two may publish.

``spark="connect"`` runs the write phase as a client of one Spark Connect server that the run starts
(``EO_SPARK_REMOTE``), as a backfill would in production. ``infra=True`` lets the killer also take down
the infrastructure, the way a crashed machine or OOM killer would, then bring it back as a supervisor
(systemd, compose ``restart: always``) would: ``scheduler`` kills the scheduler *and every process it
started* (its LocalExecutor workers and their tasks die with its container) and restarts it after a seeded
pause; ``spark_connect`` kills the Spark Connect server JVM and restarts it on the same port. Airflow's own
machinery must then finish the backfill: the restarted scheduler resets the dead scheduler's queued tasks
(``orphaned_tasks_check_interval``) and fails the running ones whose heartbeat stopped
(``task_instance_heartbeat_timeout``), and their retries run again; a write that lost its server fails with
the retryable ``SparkConnectLostError`` and is retried.
"""
from __future__ import annotations

import hashlib
import json
import random
import signal
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from tools import spark_connect as sc
from tools.deployment import FINAL, PG, Deployment, descendants, free_port, processes, send_signal
from exactly_once.ids import Interval
from tools.localrun import BIN, logical_date_for
from tools.sample_data import generate
from tools.chaos_targets import ChaosTarget, chaos_target
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from exactly_once.records.txlog import State

FILES = chaos_target("files")
INFRA = ("scheduler", "spark_connect")  # the kinds infra=True adds (spark_connect only with spark="connect")
# Airflow settings that make a dead scheduler's tasks come back quickly (defaults: 30 s and 300 s)
ORPHAN_SETTINGS = {"AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
                   "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15"}
__all__ = ["PG", "ChaosRun", "check_table", "classify"]
Verify = Callable[[Path, list[str], dict[str, list[dict[str, Any]]]], list[str]]


def classify(cmd: str) -> str | None:
    """The kind of a task process by its command line (Airflow's process titles), else None."""
    if cmd.startswith("airflow worker -- LocalExecutor"):
        return None if "<idle>" in cmd else "supervisor"  # an idle worker may hold the queue's lock
    if cmd.startswith("airflow worker -- "):
        return "task_runner"
    if "org.apache.spark.deploy.SparkSubmit" in cmd:
        return "spark_jvm"
    if "pv_counts.py" in cmd and "java" not in cmd.split(" ", 1)[0]:
        return "spark_python"
    return None


def check_table(data_root: Path | str, days: list[str], target: ChaosTarget = FILES, db_name: str = "",
                storage_options: dict[str, Any] | None = None,
                ) -> tuple[list[str], dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The spark-free self-check of what the target publishes (see the module docstring); also returns the
    rows a reader of the target sees, by day, for an outside ``verify``. ``data_root`` may be an ``s3://``
    URL (``storage_options`` = the harness's credentials)."""
    sink = target.open_sink(data_root, db_name, storage_options)
    st = sink.storage
    staging_root = st.join(sink.home, "_staging")
    staging = sorted(st.list_names(staging_root)) if st.exists(staging_root) else []
    bad = [f"staging leftovers: {staging}"] if staging else []
    rows_by_day = target.rows(data_root, db_name, storage_options)
    extra = sorted(set(rows_by_day) - set(days))
    bad += [f"unexpected visible partitions {extra}"] if extra else []
    cum, chain_ok, committed_days, epochs = {}, True, 0, {}
    for day in days:
        iv = Interval.daily(day)
        sts = sink.status(iv)  # after recover: every epoch must be final
        epochs[day] = {e: s.state.value for e, s in sts.items()}
        done = [e for e, s in sts.items() if s.state is State.COMMITTED]
        left = [e for e, s in sts.items() if s.state in (State.OPEN, State.PRE_COMMITTED)]
        bad += [f"{day}: epochs {left} still OPEN/PRE_COMMITTED after recover"] if left else []
        bad += [f"{day}: committed {len(done)} times (epochs {done})"] if len(done) > 1 else []
        bad += [f"{day}: e{e} committed but not published" for e in done if not sts[e].published]
        bad += [f"{day}: e{e} aborted but its staging {sink.staging_dir(sink.ref(iv, e))} is left"
                for e, s in sts.items() if s.state is State.ABORTED and st.exists(sink.staging_dir(sink.ref(iv, e)))]
        if not done:
            bad, chain_ok = bad + [f"{day}: not committed"], False
            continue
        committed_days += 1
        name, manifest = sink.ref(iv, done[-1]).name, sts[done[-1]].manifest
        if not sink.is_live(sts[done[-1]]):
            bad.append(f"{day}: the newest committed {name} is not live in the {target.kind} target")
        files = {f"{name}--{f.name}": f for f in (manifest.partitions.get(f"dt={day}", ()) if manifest else ())}
        if target.kind == "files":
            bad += _files_checks(sink, day, files)
        rows, expected = rows_by_day.get(day, []), sum(f.rows or 0 for f in files.values())
        bad += [f"{day}: {len(rows)} rows visible, manifest says {expected}"] if len(rows) != expected else []
        bad += [f"{day}: duplicate app_id rows"] if len({r["app_id"] for r in rows}) != len(rows) else []
        for r in sorted(rows, key=lambda r: r["app_id"]):  # cumulative_pv = previous cumulative_pv (or 0) + pv
            prev = cum.get(r["app_id"], 0)
            if not 1 <= r["uv"] <= r["pv"] or (chain_ok and r["cumulative_pv"] != prev + r["pv"]):
                bad.append(f"{day}: row {r} is implausible or does not chain (previous cumulative_pv {prev})")
            cum[r["app_id"]] = r["cumulative_pv"]
    return bad, {"committed_days": committed_days, "epochs": epochs,
                 "rows": {d: len(rows_by_day.get(d, [])) for d in days}}, rows_by_day


def _files_checks(sink: TwoPhaseCommitSink, day: str, files: dict[str, Any]) -> list[str]:
    """A files table: exactly the manifest's files are visible in the partition, byte for byte (on S3: once
    gc removed superseded versions, which stay for the grace period)."""
    st, part = sink.storage, sink.storage.join(sink.table, f"dt={day}")
    seen = sorted(n for n in st.list_names(part) if not n.startswith(("_", "."))) if st.exists(part) else []
    bad = [f"{day}: visible files {seen} differ from the manifest's"] if seen != sorted(files) else []
    return bad + [f"{day}: {n} does not match its manifest checksum" for n, f in files.items() if n in seen
                  and hashlib.sha256(st.read_bytes(st.join(part, n))).hexdigest() != f.sha256]


class ChaosRun:
    """One seeded, time-bounded chaos run; :meth:`run` returns (and writes) the report."""

    def __init__(self, *, days: int = 3, kills: int = 3, seed: int = 7, deadline: float = 600,
                 out: str | Path | None = None, events_per_day: int = 300, min_gap: float = 20.0,
                 retries: int = 6, race_day: int | None = None, verify: Verify | None = None,
                 backfill_runs: int = 1, log: Callable[[str], None] | None = None, spark: str = "submit",
                 infra: bool = False, restart_pause: tuple[float, float] = (3.0, 15.0),
                 plan: list[str] | None = None, target: str = "files", batch: bool = False):
        self.target = chaos_target(target)
        if spark not in ("submit", "connect"):
            raise ValueError(f"spark must be 'submit' or 'connect', not {spark!r}")
        self.kills_budget, self.seed, self.deadline = kills, seed, deadline
        self.out = Path(out) if out else Path(tempfile.mkdtemp(prefix="eo-chaos-"))
        self.events_per_day, self.min_gap, self.retries = events_per_day, min_gap, retries
        self.race_day, self.verify, self.backfill_runs = race_day, verify, backfill_runs
        self.rng, self.t0 = random.Random(seed), time.time()
        self._log = log or (lambda m: print(m, flush=True))
        today = datetime.now(timezone.utc).date()  # the last day is yesterday, the DAG's end (EO_PV_END)
        self.days = [(today - timedelta(days=days - i)).isoformat() for i in range(days)]
        self.kills: list[dict[str, Any]] = []
        self.race: dict[str, Any] | None = None  # set when the second attempt (race_day) starts
        self.spark, self.restart_pause = spark, restart_pause
        self.infra = tuple(k for k in INFRA if infra and (k != "spark_connect" or spark == "connect"))
        self.server: sc.Server | None = None
        self.plan = list(plan or [])  # the kinds of the kills, in order (tests); else a seeded choice
        self.batch = batch  # the backfill takes pv_pipeline's batched path (one write job for every day)
        if self.plan:
            self.kills_budget = len(self.plan)

    def log(self, msg: str) -> None:
        self._log(f"[chaos {time.time() - self.t0:7.1f}s] {msg}")

    def run(self) -> dict[str, Any]:
        settings = {"EO_PV_START": self.days[0], "EO_PV_END": self.days[-1], "EO_RETRIES": str(self.retries), "EO_RETRY_DELAY_SECONDS": "2",
                    "EO_PREDECESSOR_POKE_SECONDS": "10", "EO_BATCH_POKE_SECONDS": "5",
                    "EO_PV_MAX_BATCH": "366" if self.batch else "1", **ORPHAN_SETTINGS}
        if self.spark == "connect":
            self.server = sc.Server(free_port(), self.out / "spark-connect", "local[2]")
            settings.update({"EO_SPARK_REMOTE": self.server.url, "EO_SPARK_CONNECT_RETRY_SECONDS": "30"})
        self.deploy = self._deployment(settings)
        self.deploy.env.update(self.target.settings(self.deploy.db.name))  # e.g. postgres: rows in its own DB
        error, self.runs = None, {}
        try:
            try:
                if self.server is not None:
                    sc.start(self.server)
                    self.log(f"Spark Connect server {self.server.url} (pid {self.server.pid()})")
                self._setup()
                self._drive()
            except Exception as exc:  # noqa: BLE001 - reported; the components are stopped either way
                error = f"{type(exc).__name__}: {exc}"
                self.log(f"ERROR {error}")
            finally:
                self.deploy.stop_components()
                if self.server is not None:
                    sc.stop(self.server)
            report = self._report(self.runs, error)
        finally:
            if self.deploy.s3 is not None:  # a fleet's S3 server: read by the report, stopped after it
                self.deploy.s3.stop()
            self.deploy.db.drop()
        (self.out / "chaos-report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
        self.log(f"report: {self.out / 'chaos-report.json'}")
        return report

    def _deployment(self, settings: dict[str, str]) -> Deployment:
        return Deployment(self.out, purpose="chaos", settings=settings, log=self.log)

    # where the pipeline's data is (a path or URL, with the harness's storage options), and the local root
    # whose landing/ the reference reads; a fleet run (tools.chaos_fleet) keeps them apart
    def data_root(self) -> tuple[Path | str, dict[str, Any] | None]:
        return self.out / "data", None

    def oracle_root(self) -> Path:
        return self.out / "data"

    def _land(self) -> None:
        generate(str(self.oracle_root() / "landing"), self.days, seed=self.seed, events_per_day=self.events_per_day)

    def _after_recover(self, sink: TwoPhaseCommitSink) -> dict[str, Any]:
        """More for the report after ``recover`` and before the checks (``violations``: more of them)."""
        return {}

    def _setup(self) -> None:
        self._land()
        self.log(f"landing data for {self.days[0]} .. {self.days[-1]}; metadata DB {self.deploy.db.name}")
        if self.race_day is not None:  # the second attempt: its own Airflow (SQLite), the same data
            # Without EO_PV_END: `dags test` of the last day is a manual run at logical date day + 1, after the
            # DAG's end_date, and Airflow creates no task for it (stop 60's CI). Its own Airflow schedules nothing.
            self.zombie_env = {k: v for k, v in self.deploy.env.items() if k not in (
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "EO_PV_END")
                               and not k.startswith(("AIRFLOW__CORE__EXECUT", "AIRFLOW__API"))}
            self.zombie_env.update({"AIRFLOW_HOME": str(self.out / "zombie-home"), "EO_RETRIES": "0"})
            self.deploy.airflow("zombie-db-migrate", ["db", "migrate"], env=self.zombie_env)
        self.deploy.start([self.target.dag_id])
        self.deploy.backfill(self.target.dag_id, self.days[0], self.days[-1], max_active_runs=self.backfill_runs)

    def _drive(self) -> None:
        end = self.t0 + self.deadline
        next_kill = time.time() + self.min_gap * (0.5 + self.rng.random())
        while time.time() < end:
            runs = self.deploy.runs(self.target.dag_id)
            if runs != self.runs:
                self.log("runs: " + ", ".join(f"{d}={s}" for d, s in sorted(runs.items())))
                self.runs = runs
            zombie = self.deploy.stack.procs.get("zombie")
            if (len(runs) == len(self.days) and all(s in FINAL for s in runs.values())
                    and (zombie is None or zombie.poll() is not None)):
                return
            self.deploy.check_alive()
            self._tick()
            if self.race_day is not None and self.race is None:
                self._maybe_start_race()
            # kill i waits for i*N/K runs to finish; not in a batch, whose runs all finish when it does
            spread = 0 if self.batch else len(self.kills) * len(self.days) // max(self.kills_budget, 1)
            if (len(self.kills) < self.kills_budget and time.time() >= next_kill
                    and sum(s in FINAL for s in runs.values()) >= spread and self._kill_one()):
                next_kill = time.time() + self.min_gap * (1 + self.rng.random())
            time.sleep(1)
        raise TimeoutError(f"deadline of {self.deadline:.0f}s reached; runs: {self.runs}")

    def _tick(self) -> None:
        """Called once a second while the backfill runs (a fleet run kills at failpoints here)."""

    def _task_of(self, pid: int, procs: dict[int, tuple[int, str]]) -> dict[str, Any]:
        """The task instance a process works for: its own title or its nearest ancestor's."""
        while pid in procs:
            ppid, cmd = procs[pid]
            if classify(cmd) in ("supervisor", "task_runner"):
                for task_id, run_id, tries, state in self.deploy.db.query(
                        "select task_id, run_id, try_number, state from task_instance where id::text = %s",
                        (cmd.rsplit(" ", 1)[-1],)):
                    return {"task_id": task_id, "run_id": run_id, "try": tries, "state": state}
            pid = ppid
        return {}

    def _kill_one(self) -> bool:
        """``kill -9`` one task process of the scheduler's (seeded choice of kind, then of process), or with
        ``infra`` the scheduler or the Spark Connect server (the server only while a write runs)."""
        procs, found = processes(), {}
        for pid in descendants([self.deploy.stack.procs["scheduler"].pid], procs):
            kind = classify(procs[pid][1])
            task = self._task_of(pid, procs) if kind else {}
            # only running tasks (a worker killed while its task is queued stalls it for task_queued_timeout),
            # at most twice per task of a run (its retries must not run out)
            key = (task.get("task_id"), task.get("run_id"))
            if kind and task.get("state") == "running" and self._hits(key) < 2:
                found.setdefault(kind, []).append((pid, task))
        if not found:
            return False  # nothing (eligible) running right now: try again at the next tick
        running = self._running_tasks()
        if all(self._hits(t) < 2 for t in running):  # an infra kill hits every running task
            writing = any(t == self.target.write_task for t, _ in running)
            found.update({k: [] for k in self.infra if k != "spark_connect" or writing})
        if self.plan:  # the next planned kind, once something of that kind can be killed
            kind = self.plan[len(self.kills)]
            if kind not in found or (kind not in INFRA and not found[kind]):
                return False
        else:
            kind = self.rng.choice(sorted(found))
        if kind in INFRA:
            return self._kill_infra(kind, running)
        pid, task = self.rng.choice(sorted(found[kind], key=lambda c: c[0]))
        send_signal(pid, signal.SIGKILL)
        self.kills.append({"at": round(time.time() - self.t0, 1), "kind": kind, "pid": pid, **task})
        self.log(f"kill -9 {pid} ({kind}) of {task.get('task_id')} {task.get('run_id')} try {task.get('try')}")
        return True

    def _hits(self, key: tuple[Any, Any]) -> int:
        """How often the task of a run was hit so far (directly, or running under an infra kill)."""
        return sum((k.get("task_id"), k.get("run_id")) == key or list(key) in k.get("running", [])
                   for k in self.kills)

    def _running_tasks(self) -> list[tuple[str, str]]:
        return [(t, r) for t, r in self.deploy.db.query(
            "select task_id, run_id from task_instance where dag_id = %s and state = 'running'", (self.target.dag_id,))]

    def _kill_infra(self, kind: str, running: list[tuple[str, str]]) -> bool:
        """``kill -9`` the scheduler (with every process it started) or the Spark Connect server, wait a
        seeded pause, and start it again as a supervisor would."""
        pause = round(self.rng.uniform(*self.restart_pause), 1)
        if kind == "scheduler":
            root = self.deploy.stack.procs["scheduler"]
            victims = [root.pid, *descendants([root.pid], processes())]
            for pid in victims:  # the container dies: its LocalExecutor workers and their tasks with it
                send_signal(pid, signal.SIGKILL)
            root.wait(30)
        else:
            assert self.server is not None
            victims = [p for p in [self.server.pid()] if p is not None]
            for pid in victims:
                send_signal(pid, signal.SIGKILL, group=True)
            end = time.time() + 30
            while sc.accepts(self.server.port) and time.time() < end:
                time.sleep(0.2)
        self.kills.append({"at": round(time.time() - self.t0, 1), "kind": kind, "pid": victims[0] if victims else None,
                           "processes": len(victims), "running": [list(t) for t in running], "restart_after": pause})
        self.log(f"kill -9 {kind} ({len(victims)} processes; running tasks {running}); restart in {pause} s")
        time.sleep(pause)
        if kind == "scheduler":
            self.deploy.stack.start("scheduler", [str(BIN / "airflow"), "scheduler"])
        else:
            sc.start(self.server)  # type: ignore[arg-type]
        self.log(f"{kind} restarted")
        return True

    def _maybe_start_race(self) -> None:
        day = self.days[self.race_day]
        if self.deploy.db.query("select 1 from task_instance ti join dag_run dr using (dag_id, run_id) where ti.dag_id = %s "
                         "and ti.task_id = %s and ti.state = 'running' and dr.data_interval_start = %s::timestamptz",
                         (self.target.dag_id, self.target.write_task, f"{day}T00:00:00+00:00")):
            self.deploy.stack.start("zombie", [str(BIN / "airflow"), "dags", "test", self.target.dag_id,
                                               logical_date_for(day)], env=self.zombie_env)
            self.race = {"day": day, "started_at": round(time.time() - self.t0, 1)}

    def _report(self, runs: dict[str, str], error: str | None) -> dict[str, Any]:
        data_root, options = self.data_root()
        sink = self.target.open_sink(data_root, self.deploy.db.name, options)
        # What Airflow's retries and teardowns left to do. After an unfinished run (every process is stopped
        # now) an OPEN epoch has no owner any more: take it over, as `recover` does with a stale timeout.
        recovered = sink.recover(stale_after=0 if error else None) if sink.storage.exists(sink.home) else []
        extra = self._after_recover(sink)
        violations, summary, rows = check_table(data_root, self.days, self.target, self.deploy.db.name, options)
        violations += extra.pop("violations", [])
        try:
            violations += self.verify(self.oracle_root(), self.days, rows) if self.verify else []
        except Exception as exc:  # noqa: BLE001 - a failing check is a violation, not a crash
            violations.append(f"verify: {type(exc).__name__}: {exc}")
        tis = self.deploy.db.query("select task_id, run_id, try_number, state from task_instance where dag_id = %s",
                                   (self.target.dag_id,))
        retries = {t: sum(n - 1 for task, _, n, _ in tis if task == t and n > 1) for t, _, n, _ in tis if n > 1}
        if self.race is not None:
            zombie = self.deploy.stack.procs.get("zombie")
            sts = sink.status(Interval.daily(self.race["day"]))
            self.race.update({"exit_code": zombie.returncode if zombie else None, "epochs": {
                e: {"state": st.state.value, "run_id": st.records.get("open", {}).get("meta", {}).get(
                    "run", {}).get("run_id"), "began": st.started_at} for e, st in sts.items()}})
        by_kind = {kind: sum(k["kind"] == kind for k in self.kills) for kind in {k["kind"] for k in self.kills}}
        return {
            "seed": self.seed, "target": self.target.kind, "days": self.days, "run_dir": str(self.out), "error": error,
            "kills": self.kills, "kills_made": len(self.kills), "kills_by_kind": by_kind,
            "task_retries": sum(retries.values()), "task_retries_by_task": retries,
            "task_instances": len(tis), "dag_runs": runs, "dag_runs_succeeded": list(runs.values()).count("success"),
            "intervals_committed": summary["committed_days"], "epochs": summary["epochs"],
            "rows": summary["rows"], "recover_actions": recovered, "race": self.race,
            "violations": violations + ([f"run did not finish: {error}"] if error else []),
            "violation_count": len(violations) + (1 if error else 0), "wall_seconds": round(time.time() - self.t0, 1),
            **extra,
        }
