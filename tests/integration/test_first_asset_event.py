"""A fresh table's first asset events, announced by many tasks at once, on Airflow's own routes and a PostgreSQL
metadata DB: every task succeeds and every event is recorded (exactly_once.airflow.first_event).

Airflow creates the table's Asset and the alias-asset association with the first event through the alias; two
requests carrying a first event at once make the second fail (``UniqueViolation``: the API server sets that task
to failed and drops its event - a batched backfill of a fresh table at ``--max-active-runs`` 365 lost 2 of 365).
Here each of N commits, and a rollback of the same table through its own alias (``exactly_once:rollback``),
announces through the library's seam (``endings.add_events``, at the end of its try: its turn, then the event), and its success goes
through the execution API's own handler (``ti_update_state``). What the turn asks Airflow is answered by the
execution API's own handlers too (``get_task_instance_states``; the Task SDK's alias query, sent to
``get_asset_event_by_asset_alias`` in place of the supervisor's HTTP call).

The race is forced, not hoped for: the first request to register an asset change is held at its entry until a
second request arrives there (or 3 s pass). Without the turn a second one arrives, both create the asset, and
one task fails; with it the others wait until the first one's success is recorded, and then go together.
"""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from airflow_helpers import postgres_metadata

pytestmark = pytest.mark.airflow

DAG_ID, N = "first_event", 6
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def meta(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A fresh Airflow metadata DB on PostgreSQL, the pipeline's DAG serialized in it, N daily runs whose
    commit tasks are running."""
    from airflow import settings
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, AssetAlias, CronDataIntervalTimetable
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    from exactly_once.airflow import exactly_once_group
    from exactly_once.airflow.rollback import ROLLBACK_ALIAS
    from test_interval_runs import config

    cfg = config(tmp_path_factory.mktemp("first"), pipeline=DAG_ID, partitions="dt={start:%Y-%m-%d}")
    with DAG(DAG_ID, schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=START, catchup=False) as dag:
        exactly_once_group(cfg, group_id="t")
        EmptyOperator(task_id="ops.rollback", outlets=[AssetAlias(ROLLBACK_ALIAS)])
    with postgres_metadata(dag):
        s = settings.NonScopedSession()
        sdag = s.scalar(SerializedDagModel.latest_item_select_object(DAG_ID)).dag
        tis = []
        for d in range(N):
            start = START + timedelta(days=d)
            dr = sdag.create_dagrun(run_id=f"r{d}", logical_date=start, data_interval=(start, start + timedelta(days=1)),
                                    run_after=start, run_type=DagRunType.BACKFILL_JOB,
                                    triggered_by=DagRunTriggeredByType.BACKFILL, state=DagRunState.RUNNING, session=s)
            for task_id in ("t.commit", "ops.rollback")[:1 if d else 2]:
                ti = dr.get_task_instance(task_id, session=s)
                ti.state = TaskInstanceState.RUNNING
                tis.append((ti.id, dr.run_id, task_id, start))
        s.commit()
        s.close()
        yield {"config": cfg, "dag": dag, "tis": tis, "session": settings.NonScopedSession}


class RunningTask:
    """The running task instance as the Task SDK gives it to the operator, its one question (the states of
    task instances) answered by the execution API's own handler."""

    def __init__(self, run_id: str, task_id: str, make_session: Any) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index = DAG_ID, run_id, task_id, -1
        self.make_session = make_session

    def get_task_states(self, **query: Any) -> dict[str, Any]:
        from airflow.api_fastapi.execution_api.routes.task_instances import get_task_instance_states
        from airflow.models.dagbag import DBDagBag

        s = self.make_session()
        try:
            return get_task_instance_states(session=s, dag_bag=DBDagBag(), **query).task_states
        finally:
            s.close()


class Supervisor:
    """The Task SDK's channel to its supervisor, for the one message the turn sends through it (the alias's
    events), answered by the execution API's own handler - what the supervisor's HTTP call reaches."""

    def __init__(self, make_session: Any) -> None:
        self.make_session = make_session

    def send(self, msg: Any) -> Any:
        from airflow.api_fastapi.execution_api.routes.asset_events import get_asset_event_by_asset_alias
        from airflow.sdk.api.datamodels._generated import AssetEventsResponse
        from airflow.sdk.execution_time.comms import AssetEventsResult, GetAssetEventByAssetAlias

        assert isinstance(msg, GetAssetEventByAssetAlias), msg
        s = self.make_session()
        try:
            found = get_asset_event_by_asset_alias(name=msg.alias_name, session=s, after=msg.after, before=msg.before,
                                                   ascending=msg.ascending, limit=msg.limit)
            return AssetEventsResult.from_asset_events_response(
                AssetEventsResponse.model_validate(found.model_dump(mode="json")))
        finally:
            s.close()


def test_a_fresh_tables_first_events_announced_at_once_are_all_recorded_and_every_task_succeeds(meta, monkeypatch):
    from airflow.api_fastapi.execution_api.datamodels.taskinstance import TISuccessStatePayload
    from airflow.api_fastapi.execution_api.routes.task_instances import ti_update_state
    from airflow.assets.manager import AssetManager
    from airflow.models.dagbag import DBDagBag
    from airflow.sdk.execution_time.context import OutletEventAccessors
    from airflow.sdk.execution_time.task_runner import _build_asset_profiles, _serialize_outlet_events
    from sqlalchemy import text

    from exactly_once.airflow import endings
    from exactly_once.ids import Interval

    monkeypatch.setenv("EO_FIRST_EVENT_POLL_SECONDS", "0.05")
    from airflow.sdk.execution_time import task_runner

    cfg, dag, make_session = meta["config"], meta["dag"], meta["session"]
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Supervisor(make_session), raising=False)
    sink, commit = cfg.sink_handle(), dag.task_dict["t.commit"]
    entered, arrived, lock = [], threading.Event(), threading.Lock()
    real = AssetManager.register_asset_change.__func__

    def held(cls, *a, **kw):  # the forced interleaving (module docstring)
        with lock:
            entered.append(1)
            first = len(entered) == 1
        if first:
            arrived.wait(timeout=3)
        else:
            arrived.set()
        return real(cls, *a, **kw)

    monkeypatch.setattr(AssetManager, "register_asset_change", classmethod(held))
    errors: list[str] = []
    go = threading.Barrier(len(meta["tis"]))

    def task(ti_id: Any, run_id: str, task_id: str, start: datetime) -> None:
        s = make_session()
        try:
            ti, acc = RunningTask(run_id, task_id, make_session), OutletEventAccessors()
            outlets = dag.task_dict[task_id].outlets  # the rollback: the table's asset through its own alias
            operator = SimpleNamespace(outlets=outlets, asset_uri=commit.asset_uri)
            interval = Interval(start, start + timedelta(days=1))
            context = {"ti": ti, "outlet_events": acc, "data_interval_start": interval.start,
                       "data_interval_end": interval.end}
            go.wait()
            operator._eo_events = [(SimpleNamespace(sink=sink, interval=interval),  # what ended() left for the end
                                    {"version": f"{interval.token}.e000001", "rows": 1, "files": 1, "partitions": {}})]
            endings.add_events(operator, context)  # at the end of a try that succeeds (finish_try)
            payload = TISuccessStatePayload(state="success", end_date=datetime.now(timezone.utc),
                                            task_outlets=list(_build_asset_profiles(outlets)),
                                            outlet_events=list(_serialize_outlet_events(acc)))
            ti_update_state(task_instance_id=ti_id, ti_patch_payload=payload, session=s, dag_bag=DBDagBag())
            s.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{run_id}: {type(exc).__name__}: {exc}")
            s.rollback()
        finally:
            s.close()

    threads = [threading.Thread(target=task, args=t) for t in meta["tis"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    s = make_session()
    try:
        q = lambda sql: s.execute(text(sql)).all()  # noqa: E731
        states = sorted(r[0] for r in q("select state from task_instance where state is not null"))
        events = q("select a.uri, e.extra from asset_event e join asset a on a.id = e.asset_id")
        assert errors == [] and states == ["success"] * (N + 1), (errors, states)
        assert len(q("select id from asset")) == 1 and len(q("select * from asset_alias_asset")) == 2
        days = sorted(f"{Interval(st, st + timedelta(days=1)).token}.e000001" for _, _, _, st in meta["tis"])
        assert sorted(e[1]["version"] for e in events) == days  # the rollback's event is of the first day too
        assert {e[0] for e in events} == {commit.asset_uri}
    finally:
        s.close()
