"""Helpers of the announcement reviews (``test_publish_endings_review``, ``test_publish_endings_actions``): a
decided publish whose commit died (:func:`decide_unpublished`), and :func:`ops_run` - ``RollbackOperator`` in a
user's operations DAG run by Airflow's task runner, try by try."""
from __future__ import annotations

from typing import Any


def decide_unpublished(pipe: Any, monkeypatch: Any, m: int, n: int, *, from_page: bool = False) -> Any:
    """Month ``m`` reprocessed by a run whose commit decided COMMITTED and died before publishing, its
    teardown lost with the worker (the run marked failed): returns the decided (txn, status)."""
    from airflow.utils.state import DagRunState

    from test_interval_runs import month

    if from_page:
        from test_publish_endings_actions import from_the_page

        status, run = from_the_page(pipe, monkeypatch, "reprocess", {"interval": month(m).token})
        assert status == 200 and run is not None
    else:
        run = pipe.manual(m, {"reprocess": True}, n)
    monkeypatch.setenv("EO_FAILPOINTS", "commit.before_publish=error")
    pipe.drive(run, until="t.abort")
    monkeypatch.delenv("EO_FAILPOINTS")
    run.set_state(DagRunState.FAILED)
    pipe.session.commit()
    decided = pipe.sink.committed(month(m))
    assert decided is not None and not decided[1].published, decided
    return decided


def show(pipe: Any, label: str) -> None:
    from test_publish_endings import announced

    events, lineage = announced(pipe)
    print(f"\n[{label}] asset events: {[(e['version'], e['interval']['start'][:10]) for e in pipe.events()]}")
    print(f"[{label}] lineage outputs: {pipe.lineage}")


def ops_run(pipe: Any, monkeypatch: Any, n: int, op_kwargs: dict[str, Any] | None = None,
            retries: int = 0, patch: Any = None, **params: str) -> dict[str, Any]:
    """RollbackOperator in a user's ops DAG, given the table's URL,
    run by Airflow's task runner as admin), extended: the operator's own kwargs (``op_kwargs``), retries (each
    try run like the scheduler would), ``patch(try_number)`` called before each try, and the DAG run ended
    (``update_state``: the plugin's note listener runs). Returns the run, its note, the task's tries' states,
    lineage versions per try, and the task's eo_note XCom."""
    from datetime import datetime, timedelta, timezone

    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    from exactly_once.airflow import rollback
    from exactly_once.airflow.tables import TableRef

    cfg = pipe.cfg
    monkeypatch.setattr(rollback, "owning_table", lambda url, user: TableRef(cfg.pipeline, cfg.sink, url, cfg))
    dag_id = f"ops_{pipe.dag_id}"[:60]
    with DAG(dag_id, schedule=None, start_date=datetime(2013, 1, 1, tzinfo=timezone.utc)) as dag:
        rollback.RollbackOperator(task_id="act", table_url=cfg.table_url, retries=retries,
                                  retry_delay=timedelta(seconds=0), **(op_kwargs or {}),
                                  **params)
    update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                                     session=pipe.session)
    pipe.session.commit()
    sdag = pipe.session.scalar(SerializedDagModel.latest_item_select_object(dag_id)).dag
    dr = sdag.create_dagrun(run_id=f"manual__{n}", logical_date=None, data_interval=None,
                            run_after=datetime.now(timezone.utc), run_type=DagRunType.MANUAL,
                            triggered_by=DagRunTriggeredByType.UI, triggering_user_name="admin",
                            state=DagRunState.RUNNING, session=pipe.session)
    pipe.session.commit()
    dr.dag = sdag
    tries: list[tuple[str, list[str]]] = []
    while dr.state == DagRunState.RUNNING:
        pipe.session.expire_all()
        schedulable, _ = dr.update_state(session=pipe.session)
        if not schedulable:
            break
        [ti] = schedulable
        ti.try_number, ti.state = ti.try_number + 1, TaskInstanceState.SCHEDULED
        pipe.session.commit()
        if patch is not None:
            patch(ti.try_number)
        try:
            result = _run_task(ti=ti, task=dag.task_dict["act"])
        except Exception:  # noqa: BLE001 - recorded as failed
            result = None
        done = getattr(result, "ti", None)
        state = str(getattr(getattr(done, "state", None), "value", getattr(done, "state", None)))
        task = getattr(done, "task", None)
        versions: list[str] = []
        if task is not None:
            failed = state in ("failed", "up_for_retry")
            facets = (task.get_openlineage_facets_on_failure if failed else
                      task.get_openlineage_facets_on_complete)(done)
            versions = [o.facets["version"].datasetVersion for o in facets.outputs]
        tries.append((state, versions))
    pipe.session.expire_all()
    pipe.session.refresh(dr)
    rows = pipe.session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id, task_ids="act",
                                                   key="eo_note")).all()
    xnote = XComModel.deserialize_value(rows[0]) if rows else None
    return {"run": dr, "state": str(getattr(dr.state, "value", dr.state)), "note": dr.note, "tries": tries,
            "eo_note": xnote}
