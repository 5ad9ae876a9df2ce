"""Chaos on a fleet: ``python -m tools.chaos --executor celery --days 100 --kills 40``.

A :class:`~tools.chaos_run.ChaosRun` on the CeleryExecutor deployment of :mod:`tools.celery_stack`: two
``airflow celery worker`` processes that share no local disk, the data root on a loopback S3 server
(moto), the metadata DB and broker as the only other shared state. pv_pipeline backfills N days whose
landing data the run uploads to S3 (the reference reads the run's local copy, which no worker sees).
The write task's ``spark-submit`` is :mod:`tools.s3_standin` (pip's PySpark has no s3a jars): with
``write="oracle"`` (the default here: no JVM) the tests' pure-Python stand-in, with ``write="spark"`` the
real job on a private local mirror, uploaded.

A seeded killer ``kill -9``s, at random moments, one of:

* ``worker`` - a whole worker (the Celery main process, its pool, the task supervisor, the task and its
  children: a machine or container dying), restarted after a seeded pause as a supervisor would;
* ``pool`` - the Celery pool process supervising a running task (Celery starts a new one);
* ``task_runner`` - the task process (Airflow's ``airflow worker -- <ti>``);
* ``write`` - the write task's stand-in (the Spark driver's place);
* ``scheduler`` - the scheduler, restarted after a pause (it adopts the Celery tasks still running);
* ``mid_publish`` - the worker running a commit *in the middle of its publish*, deterministically: every
  worker runs with ``EO_FAILPOINTS=commit.mid_publish=hang:once`` and the failpoint state on S3; the run
  arms the failpoint (deletes its marker), waits for a commit to stop there (the marker appears), kills
  that commit's worker whole, restarts it, and disarms (the marker stays) until the next such kill.

Afterwards every component is stopped, ``recover`` runs, then ``gc`` (min age 0): the checks of
:func:`tools.chaos_run.check_table` run on S3, plus "nothing left": no staging, no aborted transaction's
files, every partition holding exactly its live manifest's files.
"""
from __future__ import annotations

import signal
import time
from typing import Any

import sys
from pathlib import Path

from exactly_once.ops.maintenance import gc
from exactly_once.storage import storage_for
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from tools.chaos_run import ChaosRun
from tools.deployment import Deployment, descendants, processes, send_signal

FLEET_KINDS = ("worker", "pool", "task_runner", "write", "scheduler", "mid_publish")
FAILPOINT = "commit.mid_publish"


def fleet_kind(cmd: str) -> str | None:
    """The kind of a process below a Celery worker, by its title."""
    if "ForkPoolWorker" in cmd:
        return "pool"
    if cmd.startswith("airflow worker -- "):
        return "task_runner"
    if "tools.s3_standin" in cmd:
        return "write"
    return None


class FleetChaosRun(ChaosRun):
    """The chaos run on two Celery workers with all state on S3 (module docstring)."""

    def __init__(self, *, write: str = "oracle", mid_publish_every: int = 10, workers: int = 2, **kw: Any):
        kw.setdefault("infra", True)
        super().__init__(**kw)
        if write not in ("oracle", "spark"):
            raise ValueError(f"write must be 'oracle' or 'spark', not {write!r}")
        self.write, self.workers, self.mid_publish_every = write, workers, mid_publish_every
        self.armed_at: int | None = None  # finished runs when mid_publish was armed; None = disarmed
        self.last_mid_publish: int | None = None  # finished runs at the last mid-publish kill
        self.orphans: list[tuple[int, str]] = []  # (pid, cmdline) left running by a kill below the worker

    # ------------------------------------------------------------------ deployment and data
    def _deployment(self, settings: dict[str, str]) -> Deployment:
        deploy = Deployment(self.out, purpose="chaos_fleet", settings=settings, log=self.log, executor="celery",
                            storage="s3", workers=self.workers)
        assert deploy.s3 is not None
        self.failpoints = f"s3://{deploy.s3.bucket}/_chaos/failpoints"  # outside the data root
        deploy.env.update({"EO_STANDIN_COMPUTE": self.write, "EO_FAILPOINTS": f"{FAILPOINT}=hang:once",
                           "EO_FAILPOINTS_STATE": self.failpoints})
        return deploy

    def data_root(self) -> tuple[str, dict[str, Any]]:
        assert self.deploy.s3 is not None
        return self.deploy.data_url, self.deploy.s3.options()

    def oracle_root(self):  # type: ignore[override]
        return self.out / "oracle"

    def _setup(self) -> None:
        self.deploy.start([self.target.dag_id])  # starts the S3 server: land after it
        self._land()
        root, options = self.data_root()
        store, landing = storage_for(f"{root}/landing", **options)
        local = self.oracle_root() / "landing"
        for path in sorted(local.rglob("*.jsonl")):
            store.write_atomic(store.join(landing, path.relative_to(local).as_posix()), path.read_bytes())
        self._marker(create=True)  # disarmed until the killer arms it
        self.log(f"landing data for {self.days[0]} .. {self.days[-1]} uploaded to {root}/landing")
        self.deploy.backfill(self.target.dag_id, self.days[0], self.days[-1], max_active_runs=self.backfill_runs)

    def _marker(self, create: bool | None = None) -> bool:
        """Whether the mid-publish failpoint's marker exists (it has fired, or is disarmed); create/delete it."""
        assert self.deploy.s3 is not None
        store, root = storage_for(self.failpoints, **self.deploy.s3.options())
        path = store.join(root, FAILPOINT)
        if create is True:
            store.write_atomic(path, b"disarmed by the chaos run\n")
        elif create is False:
            store.remove_tree(path)
        getattr(store, "fs", None) and store.fs.invalidate_cache()  # type: ignore[attr-defined]
        return store.exists(path)

    # ------------------------------------------------------------------ kills
    def _tick(self) -> None:
        self._mid_publish()

    def _kill_one(self) -> bool:
        running = self._running()
        if not running:
            return False
        kinds = [k for k in FLEET_KINDS if k != "mid_publish"]
        if self.plan:
            kind = self.plan[len(self.kills)]
            if kind == "mid_publish":
                return self._arm()
        else:
            kind = self.rng.choice(kinds + ["mid_publish"] * (self.armed_at is None))
            if kind == "mid_publish":
                return self._arm()
        if kind == "scheduler":
            return self._kill_infra("scheduler", [(t, r) for t, r, _ in running])
        if kind == "worker":
            task, run, host = self.rng.choice(sorted(running))
            return self._kill_worker(host, "worker", [(t, r) for t, r, h in running if h == host])
        found = []
        for name in self.deploy.celery.names:  # type: ignore[union-attr]
            root = self.deploy.stack.procs[name]
            procs = processes()
            found += [(pid, name) for pid in descendants([root.pid], procs) if fleet_kind(procs[pid][1]) == kind]
        busy = {h for _, _, h in running}
        found = [(pid, host) for pid, host in found if host in busy]
        if kind == "pool":  # only a pool process that supervises a task right now
            procs = processes()
            found = [(pid, h) for pid, h in found if any(pp == pid for pp, _ in procs.values())]
        if not found:
            return False
        pid, host = self.rng.choice(sorted(found))
        on = [(t, r) for t, r, h in running if h == host]
        procs = processes()  # a killed pool's task runs on as an orphan (a zombie try): ended at the end
        self.orphans += [(p, procs[p][1]) for p in descendants([pid], procs)]
        send_signal(pid, signal.SIGKILL)
        self.kills.append({"at": round(time.time() - self.t0, 1), "kind": kind, "pid": pid, "worker": host,
                           "running": [list(x) for x in on]})
        self.log(f"kill -9 {pid} ({kind}) on {host}, running {on}")
        return True

    def _running(self) -> list[tuple[str, str, str]]:
        """(task, run, worker) of the running task instances whose task was hit fewer than twice."""
        rows = self.deploy.db.query("select task_id, run_id, hostname from task_instance where dag_id = %s and "
                                    "state = 'running' and hostname <> ''", (self.target.dag_id,))
        return [(t, r, h) for t, r, h in rows if self._hits((t, r)) < 2]

    def _arm(self) -> bool:
        """Arm the mid-publish failpoint (delete its marker); the kill follows when a commit stops there."""
        finished = self._finished()
        if self.armed_at is not None or (self.last_mid_publish is not None
                                         and finished - self.last_mid_publish < self.mid_publish_every):
            return False
        self._marker(create=False)
        self.armed_at = finished
        self.log("armed commit.mid_publish=hang: the next commit stops mid-publish")
        return False  # the kill itself is made by _mid_publish

    def _finished(self) -> int:
        return sum(s in ("success", "failed") for s in self.runs.values())

    def _mid_publish(self) -> bool:
        """When an armed commit has stopped mid-publish: kill its worker whole, restart it, disarm."""
        if self.armed_at is None or not self._marker():
            return False
        rows = self.deploy.db.query("select task_id, run_id, hostname from task_instance where dag_id = %s and "
                                    "task_id like %s and state = 'running' and hostname <> ''",
                                    (self.target.dag_id, "%.commit"))
        if not rows:
            return False  # the commit is marked running a moment after it started: next tick
        task, run, host = rows[0]
        self.armed_at = None  # the marker stays: disarmed
        self.last_mid_publish = self._finished()
        return self._kill_worker(host, "mid_publish", [(task, run)])

    def _kill_worker(self, name: str, kind: str, running: list[tuple[str, str]]) -> bool:
        """``kill -9`` a worker and every process below it; restart it after a seeded pause."""
        root = self.deploy.stack.procs[name]
        victims = [root.pid, *descendants([root.pid], processes())]
        for pid in victims:
            send_signal(pid, signal.SIGKILL)
        root.wait(30)
        pause = round(self.rng.uniform(*self.restart_pause), 1)
        self.kills.append({"at": round(time.time() - self.t0, 1), "kind": kind, "pid": root.pid, "worker": name,
                           "processes": len(victims), "running": [list(t) for t in running], "restart_after": pause})
        self.log(f"kill -9 worker {name} ({kind}: {len(victims)} processes; running {running}); restart in {pause} s")
        time.sleep(pause)
        self.deploy.start_worker(name)
        return True

    # ------------------------------------------------------------------ afterwards
    def _report(self, runs: dict[str, str], error: str | None) -> dict[str, Any]:
        """The base report, after ending what a kill orphaned (re-parented, so the deployment's stop did
        not see it; checked by its command line, so a recycled pid is left alone)."""
        procs = processes()
        ended = [pid for pid, cmd in self.orphans if procs.get(pid, (0, ""))[1] == cmd]
        for pid in ended:
            send_signal(pid, signal.SIGKILL)
        return {**super()._report(runs, error), "orphans_ended": len(ended)}

    def _after_recover(self, sink: TwoPhaseCommitSink) -> dict[str, Any]:
        """gc with no grace, then: nothing staged, no aborted transaction's data, nothing unowned."""
        removed = gc(sink, min_age=0)
        st, bad = sink.storage, []
        staging = st.join(sink.home, "_staging")
        if st.exists(staging) and st.walk_files(staging):
            bad.append(f"after gc, staging holds {[e.rel for e in st.walk_files(staging)][:10]}")
        return {"gc": removed if isinstance(removed, (dict, list, int)) else str(removed), "violations": bad}


def reference_verify(oracle_root: Path, days: list[str], rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What the exact reader sees vs the tests' independent pure-Python computation over the run's local
    copy of the landing data (``tests/reference_pv.py``; ``--reference`` of ``python -m tools.chaos``)."""
    tests = Path(__file__).resolve().parents[1] / "tests"
    sys.path[:0] = [p for p in (str(tests), str(tests / "e2e")) if p not in sys.path]
    from pv_checks import expected_rows  # noqa: PLC0415 - the tests' oracle, on demand

    expected = expected_rows(oracle_root, days)
    seen = {d: {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rs} for d, rs in rows.items()}
    bad = [f"{d}: duplicate rows" for d, rs in rows.items() if len(rs) != len(seen[d])]
    return bad + [f"{d}: visible {sorted(seen.get(d, ()))} != reference {sorted(expected[d])}"
                  for d in days if seen.get(d, set()) != expected[d]]
