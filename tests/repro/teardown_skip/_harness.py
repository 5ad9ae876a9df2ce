"""Shared harness of the teardown-skip reproducers (commit 9843cca).

It reuses tests/airflow_helpers.py's ``Pipeline`` (the driver of test_airflow_operations): the exactly-once
group of a monthly pipeline in a fresh SQLite metadata DB, its task instances run through the Task SDK's in-process runner
(real XCom, real DownstreamTasksSkipped -> skip-downstream API, real asset events). Only the write task is a
stand-in (the pyarrow job), and - unlike the test module's stand-in - it pushes the XCom the real
WriteOperator returns (``{"spark": "submit", "attempt": <try_number>}``), so commit's teardown_idle sees
what it sees in production.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "tests" / "integration"), str(ROOT)]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="eo-repro-home-"))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
_DB = Path(tempfile.mkdtemp(prefix="eo-repro-db-")) / "airflow.db"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_DB}"

import exactly_once  # noqa: E402

assert str(exactly_once.__file__).startswith(str(ROOT)), exactly_once.__file__

from airflow_helpers import Pipeline as _Pipeline  # noqa: E402
from test_interval_runs import land, month  # noqa: E402,F401

_SESSION = None


def session() -> Any:
    global _SESSION
    if _SESSION is None:
        from airflow import settings
        from airflow.utils import db

        settings.configure_vars()
        settings.reconfigure_orm()
        db.initdb()
        from airflow.dag_processing.bundles.manager import DagBundlesManager

        s = settings.NonScopedSession()
        DagBundlesManager().sync_bundles_to_db(session=s)
        s.commit()
        _SESSION = s
    return _SESSION


class Pipeline(_Pipeline):
    """``Pipeline`` whose stand-in write returns the real write's XCom; ``order`` picks which scheduled
    task instance runs first when several are runnable at once (the scheduler may run them in any order)."""

    first: tuple[str, ...] = ()

    def _stand_in_write(self, ti: Any, dr: Any) -> None:
        from airflow.models.xcom import XComModel
        from airflow.utils.state import TaskInstanceState

        # what the real task does at its start: the server tells it to clear its XComs of the earlier try
        XComModel.clear(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index,
                        session=self.session)
        self.session.commit()
        super()._stand_in_write(ti, dr)
        self.session.expire_all()
        if ti.state == TaskInstanceState.SUCCESS or self.states(dr)["write"] == "success":
            XComModel.set(key="return_value", value={"spark": "submit", "attempt": ti.try_number},
                          dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index,
                          serialize=False, session=self.session)  # as the execution API stores the SDK's push
            self.session.commit()

    def run_one(self, dr: Any, task: str) -> str | None:
        """Schedule and run one runnable task instance now (the scheduler picked it first)."""
        from airflow.sdk.definitions.dag import _run_task
        from airflow.utils.state import TaskInstanceState

        s = self.session
        dr.dag = self.sdag
        s.expire_all()
        schedulable, _ = dr.update_state(session=s)
        [ti] = [t for t in schedulable if t.task_id == f"t.{task}"]
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        s.commit()
        if task == "write":
            self._stand_in_write(ti, dr)
        else:
            try:
                _run_task(ti=ti, task=self.dag.task_dict[ti.task_id])
            except Exception:  # noqa: BLE001
                pass
        return self.states(dr)[task]

    def write_xcom(self, dr: Any) -> Any:
        from airflow.models.xcom import XComModel

        self.session.expire_all()
        row = self.session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=self.dag_id, task_ids="t.write",
                                                      key="return_value")).first()
        return XComModel.deserialize_value(row) if row is not None else None


def new_pipeline(name: str, **cfg: Any) -> Pipeline:
    root = Path(tempfile.mkdtemp(prefix=f"eo-repro-{name}-"))
    land(root, "2013-01", "a.csv", [1, 2])
    land(root, "2013-02", "a.csv", [10])
    return Pipeline(session(), root, name, **cfg)


def staging_left(pipe: Pipeline) -> list[str]:
    """Every file under the table's staging area (any attempt)."""
    staging = Path(pipe.sink.staging_dir(pipe.sink.ref(month(1), 1))).parent
    return sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()) if staging.exists() else []


def verdict(broken: bool, what: str) -> None:
    print(("BROKEN: " if broken else "OK: ") + what)


def disable_skip_if_control() -> bool:
    """CONTROL=1 in the environment: commit never skips the teardown (the behaviour before 9843cca)."""
    control = bool(os.environ.get("CONTROL"))
    if control:
        from exactly_once.airflow import operators

        operators.CommitOperator.teardown_idle = lambda self, context: []
    return control


def clear_while_commit_runs(name: str, task_ids: list[str], **clear_kw: Any) -> dict[str, Any]:
    """A run up to its commit; while the commit task runs (after reading its attempt, before deciding),
    a user clears ``task_ids`` (as the UI does: Airflow adds their setups and teardowns); then the run
    goes on to its end. Returns what is left."""
    from airflow import settings

    from exactly_once.protocol.pipeline import IntervalRun

    control = disable_skip_if_control()
    pipe = new_pipeline(name + ("_control" if control else ""))
    dr = pipe.create_run(1)
    pipe.drive(dr, until="t.commit")
    print("before commit:", pipe.states(dr), "| write XCom:", pipe.write_xcom(dr))
    real_commit = IntervalRun.commit

    def commit_while_the_user_clears(self: Any, txn: Any) -> Any:
        ui = settings.NonScopedSession()  # the API server's own session
        print(f"  [commit running] Clear of {task_ids} {clear_kw or ''} resets:", sorted(ti.task_id for ti in pipe.sdag.clear(
            task_ids=task_ids, run_id=dr.run_id, session=ui, dry_run=True, **clear_kw)))
        pipe.sdag.clear(task_ids=task_ids, run_id=dr.run_id, session=ui, **clear_kw)
        ui.commit()
        ui.close()
        return real_commit(self, txn)

    IntervalRun.commit = commit_while_the_user_clears
    try:
        print("commit ->", pipe.run_one(dr, "commit"), "| abort now:", pipe.states(dr)["abort"])
    finally:
        IntervalRun.commit = real_commit
    states = pipe.drive(dr)
    left = staging_left(pipe)
    out = {"states": states, "run": pipe.run_state(dr), "epochs": pipe.epochs(), "live": pipe.live(),
           "rows": pipe.rows(), "staged": left, "note": pipe.note(dr), "write_tries": pipe.tries(dr, "write")}
    for k, v in out.items():
        print(f"{k}: {v}")
    return out
