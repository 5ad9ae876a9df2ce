"""An exactly-once pipeline in a real Airflow metadata DB, driven the way the scheduler drives it.

:func:`metadata_db` points this process's Airflow ORM at a database and back; :func:`session` is a module's
fresh SQLite metadata DB (one per test module that imports it); :class:`Pipeline` is one DAG
(``exactly_once_group`` of a monthly pipeline) serialized there, with a driver that runs its task instances
in the scheduler's order through the Task SDK's in-process runner (real XCom, outlets and asset events).
Only the write task is a stand-in (the pyarrow job of ``test_interval_runs``: no JVM). Used by
``test_airflow_operations``, ``test_publish_endings``, ``test_teardown_skip`` and the teardown-skip
reproducers; ``test_action_lock_postgres`` and ``test_first_asset_event`` use :func:`postgres_metadata`.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pyarrow.dataset as ds
import pytest

from exactly_once.contracts import COUNTS, JobSpec
from test_interval_runs import config, month, write  # the stand-in write job and its helpers

UTC = timezone.utc


@contextmanager
def metadata_db(url: str) -> Iterator[None]:
    """Point this process's Airflow ORM at the metadata DB ``url`` (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``)
    for the block, then back at the one it used before."""
    from airflow import settings

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", url)
        settings.configure_vars()
        settings.reconfigure_orm()
        try:
            yield
        finally:
            env.undo()  # the variable as it was (unset if it was)
            settings.configure_vars()
            settings.reconfigure_orm()


@contextmanager
def postgres_metadata(dag: Any) -> Iterator[str]:
    """A fresh Airflow metadata DB on PostgreSQL (Airflow's ``initdb``, ~6 s) with ``dag`` serialized in it, this
    process's ORM pointed at it for the block; yields the database's URL. Dropped afterwards."""
    from airflow import settings
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils import db

    from eo_testing import need
    from target_helpers import fresh_database, reachable

    need(reachable(5432), "PostgreSQL is not running on 127.0.0.1:5432")
    databases = fresh_database("postgresql")
    url = next(databases)
    try:
        with metadata_db(url.replace("postgresql://", "postgresql+psycopg2://", 1)):
            try:
                db.initdb()
                s = settings.NonScopedSession()
                DagBundlesManager().sync_bundles_to_db(session=s)
                s.commit()
                update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None,
                                                 set(), session=s)
                s.commit()
                s.close()
                yield url
            finally:
                settings.dispose_orm()
    finally:
        next(databases, None)  # drops the database


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Iterator[Any]:
    """A fresh SQLite metadata DB for the module that uses it (the ORM is pointed at it, then back)."""
    from airflow import settings
    from airflow.utils import db

    with metadata_db(f"sqlite:///{tmp_path_factory.mktemp('airflow-db') / 'airflow.db'}"):
        db.initdb()
        from airflow.dag_processing.bundles.manager import DagBundlesManager

        s = settings.NonScopedSession()  # its own: create_session() in Airflow closes the scoped one
        DagBundlesManager().sync_bundles_to_db(session=s)
        s.commit()
        yield s
        s.close()


class Pipeline:
    """One DAG (``exactly_once_group`` of a monthly pipeline, one retry) in the metadata DB, and a driver
    that runs its task instances the way the scheduler would."""

    def __init__(self, session: Any, root: Path, dag_id: str, *, schedule: Any = None, start_date: Any = None,
                 retries: dict[str, int] | None = None, **cfg: Any) -> None:
        from airflow.dag_processing.collection import update_dag_parsing_results_in_db
        from airflow.models.serialized_dag import SerializedDagModel
        from airflow.sdk import DAG, CronDataIntervalTimetable
        from airflow.serialization.serialized_objects import LazyDeserializedDAG

        from exactly_once.airflow import exactly_once_group

        self.session, self.root, self.dag_id = session, root, dag_id
        self.cfg = config(root, **{"pipeline": dag_id, **cfg})  # the pipeline is the DAG id
        with DAG(dag_id, schedule=schedule or CronDataIntervalTimetable("0 0 1 * *", timezone="UTC"),
                 start_date=start_date or datetime(2013, 1, 1, tzinfo=UTC), catchup=False, max_active_runs=1) as dag:
            # one retry, at once: a final error must fail on its first try, a retryable one is retried
            exactly_once_group(self.cfg, group_id="t", retries=1, retry_delay_seconds=0)
        for task_id, n in (retries or {}).items():  # a task's own retries (``{"t.commit": 0}``)
            dag.task_dict[task_id].retries = n
        self.dag = dag
        update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                                         session=session)
        session.commit()
        self.sdag = session.scalar(SerializedDagModel.latest_item_select_object(dag_id)).dag
        self.sink = self.cfg.sink_handle()
        self.lineage: list[tuple[str, list[str]]] = []  # (task id, output versions) per task run that had any
        self.broken: set[str] = set()   # months whose write job dies (the Spark job failed)
        self.bad_counts: set[str] = set()  # months whose write job reports counts the gate rejects

    # ---------------------------------------------------------------- runs
    def create_run(self, m: int) -> Any:
        from airflow.utils.state import DagRunState
        from airflow.utils.types import DagRunTriggeredByType, DagRunType

        iv = month(m)
        dr = self.sdag.create_dagrun(
            run_id=f"scheduled__{iv.start.isoformat()}", logical_date=iv.start, data_interval=(iv.start, iv.end),
            run_after=iv.end, run_type=DagRunType.SCHEDULED, triggered_by=DagRunTriggeredByType.TIMETABLE,
            state=DagRunState.RUNNING, session=self.session)
        self.session.commit()
        return dr

    def drive(self, dr: Any, *, until: str | None = None) -> dict[str, str | None]:
        """Run the run's schedulable task instances until the run ends (or ``until`` is next to run);
        return the tasks' states. Like ``airflow dags test``: ``update_state`` decides what may run."""
        from airflow.sdk.definitions.dag import _run_task
        from airflow.utils.state import DagRunState, TaskInstanceState

        session = self.session
        dr.dag = self.sdag  # what the scheduler gives the runs it loads
        if dr.state == DagRunState.QUEUED:  # a cleared run: the scheduler starts it
            dr.set_state(DagRunState.RUNNING)
            session.commit()
        while dr.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = dr.update_state(session=session)
            if until is not None and until in {ti.task_id for ti in schedulable}:
                session.rollback()
                break
            for ti in schedulable:
                if ti.state != TaskInstanceState.UP_FOR_RESCHEDULE:
                    ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            for ti in [t for t in dr.get_task_instances(session=session) if t.state == TaskInstanceState.SCHEDULED]:
                if ti.task_id == "t.write" and self._began(dr) is not None:
                    self._stand_in_write(ti, dr)
                else:  # the real task runner; a write without begin's XCom fails rendering its template
                    try:
                        result = _run_task(ti=ti, task=self.dag.task_dict[ti.task_id])
                    except Exception:  # noqa: BLE001 - a failed task is recorded as failed, like dags test
                        continue
                    self._lineage_of(ti.task_id, result)
        return self.states(dr)

    def _lineage_of(self, task_id: str, result: Any) -> None:
        """What the OpenLineage provider would get from the task that ran (its operator's answer): the
        COMPLETE event's, or the FAIL event's for a try that failed (up for retry or not), given the try."""
        ti = getattr(result, "ti", None)
        task = getattr(ti, "task", None)
        if task is None or not hasattr(task, "get_openlineage_facets_on_complete"):
            return
        failed = str(getattr(ti.state, "value", ti.state)) in ("failed", "up_for_retry")
        facets = (task.get_openlineage_facets_on_failure if failed else task.get_openlineage_facets_on_complete)(ti)
        versions = [o.facets["version"].datasetVersion for o in facets.outputs]
        if versions:
            self.lineage.append((task_id, versions))

    def _began(self, dr: Any) -> dict[str, Any] | None:
        from airflow.models.xcom import XComModel

        row = self.session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=self.dag_id, task_ids="t.begin",
                                                      key="return_value")).first()
        return XComModel.deserialize_value(row) if row is not None else None

    def _stand_in_write(self, ti: Any, dr: Any) -> None:
        from airflow.utils.state import TaskInstanceState

        began = self._began(dr)  # as the real write renders it: the newest XCom of begin, maybe a stale one
        key = dr.data_interval_start.strftime("%Y-%m") if dr.data_interval_start else None
        try:
            if key in self.broken:
                raise RuntimeError("the Spark job died")
            write(began["spec"])
            if key in self.bad_counts:  # the job says it wrote rows that are not staged: the gate must fail
                counts = Path(JobSpec.from_json(Path(began["spec"]).read_bytes()).staging_dir) / COUNTS
                doc = json.loads(counts.read_text())
                doc["rows_written"] = {k: v + 5 for k, v in doc["rows_written"].items()}
                counts.write_text(json.dumps(doc))
        except (RuntimeError, OSError):  # the job failed (a stale spec is gone): the task fails
            ti.set_state(TaskInstanceState.FAILED, session=self.session)
        else:
            ti.set_state(TaskInstanceState.SUCCESS, session=self.session)
        self.session.commit()

    def states(self, dr: Any) -> dict[str, str | None]:
        self.session.expire_all()
        return {ti.task_id.split(".", 1)[1]: getattr(ti.state, "value", ti.state)
                for ti in dr.get_task_instances(session=self.session)}

    def tries(self, dr: Any, task: str) -> int:
        [ti] = [t for t in dr.get_task_instances(session=self.session) if t.task_id == f"t.{task}"]
        return ti.try_number

    def note(self, dr: Any) -> str | None:
        """The run's note, as the plugin's listener wrote it when the run ended."""
        self.session.refresh(dr)
        return dr.note

    def run_state(self, dr: Any) -> str:
        self.session.refresh(dr)
        return str(getattr(dr.state, "value", dr.state))

    # ---------------------------------------------------------------- data
    def rows(self) -> list[dict[str, Any]]:
        return ds.dataset(self.cfg.table_url, format="parquet", partitioning="hive").to_table().to_pylist()

    def live(self, m: int = 1) -> str | None:
        return self.sink.live_version(f"month=2013-{m:02d}")

    def epochs(self, m: int = 1) -> dict[int, str]:
        return {e: st.state.value for e, st in self.sink.status(month(m)).items()}

    def staged(self) -> list[str]:
        staging = Path(self.sink.staging_dir(self.sink.ref(month(1), 1))).parent
        return sorted(p.name for p in staging.iterdir()) if staging.exists() else []
