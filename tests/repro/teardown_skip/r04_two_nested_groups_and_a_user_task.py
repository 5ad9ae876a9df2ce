"""r04: two exactly-once groups nested in an outer TaskGroup (``outer.a`` >> ``outer.b``) and a user task after
the outer group (``outer >> notify``). Each commit must skip only its own teardown; ``notify`` must run;
the DAG run must end success with both tables' notes and one asset event per table; nothing staged.
(Expected to hold: teardown_idle takes the AbortOperators among commit's direct downstream tasks.)"""
from datetime import datetime, timezone
from pathlib import Path
import tempfile

from _harness import land, month, session, verdict
from test_interval_runs import config, write

from airflow.dag_processing.collection import update_dag_parsing_results_in_db
from airflow.models.serialized_dag import SerializedDagModel
from airflow.models.xcom import XComModel
from airflow.sdk import DAG, CronDataIntervalTimetable, TaskGroup
from airflow.sdk.bases.operator import BaseOperator
from airflow.sdk.definitions.dag import _run_task
from airflow.serialization.serialized_objects import LazyDeserializedDAG
from airflow.utils.state import DagRunState, TaskInstanceState
from airflow.utils.types import DagRunTriggeredByType, DagRunType

from exactly_once.airflow import exactly_once_group

UTC = timezone.utc


class Notify(BaseOperator):
    def execute(self, context):
        return "notified"


s = session()
root = Path(tempfile.mkdtemp(prefix="eo-repro-r04-"))
land(root, "2013-01", "a.csv", [1, 2])
cfgs = {g: config(root, pipeline="r04", sink=g) for g in ("a", "b")}
with DAG("r04", schedule=CronDataIntervalTimetable("0 0 1 * *", timezone="UTC"),
         start_date=datetime(2013, 1, 1, tzinfo=UTC), catchup=False) as dag:
    with TaskGroup("outer") as outer:
        ga = exactly_once_group(cfgs["a"], group_id="a", retries=1, retry_delay_seconds=0)
        gb = exactly_once_group(cfgs["b"], group_id="b", retries=1, retry_delay_seconds=0)
        ga >> gb
    notify = Notify(task_id="notify")
    outer >> notify
print("commit a downstream:", sorted(dag.task_dict["outer.a.commit"].downstream_task_ids))
print("notify upstream:", sorted(notify.upstream_task_ids))
update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=s)
s.commit()
sdag = s.scalar(SerializedDagModel.latest_item_select_object("r04")).dag
iv = month(1)
dr = sdag.create_dagrun(run_id="scheduled__r04", logical_date=iv.start, data_interval=(iv.start, iv.end),
                        run_after=iv.end, run_type=DagRunType.SCHEDULED, triggered_by=DagRunTriggeredByType.TIMETABLE,
                        state=DagRunState.RUNNING, session=s)
s.commit()
dr.dag = sdag
while dr.state == DagRunState.RUNNING:
    s.expire_all()
    schedulable, _ = dr.update_state(session=s)
    for ti in schedulable:
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
    s.commit()
    for ti in [t for t in dr.get_task_instances(session=s) if t.state == TaskInstanceState.SCHEDULED]:
        if ti.task_id.endswith(".write"):
            group = ti.task_id.rsplit(".", 1)[0]
            row = s.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids="r04", task_ids=f"{group}.begin",
                                               key="return_value")).first()
            write(XComModel.deserialize_value(row)["spec"])
            ti.set_state(TaskInstanceState.SUCCESS, session=s)
            XComModel.set(key="return_value", value={"spark": "submit", "attempt": ti.try_number}, dag_id="r04",
                          task_id=ti.task_id, run_id=dr.run_id, map_index=-1, serialize=False, session=s)
            s.commit()
        else:
            try:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id])
            except Exception:  # noqa: BLE001
                pass
s.expire_all()
states = {ti.task_id: getattr(ti.state, "value", ti.state) for ti in dr.get_task_instances(session=s)}
s.refresh(dr)
print("states:", states)
print("run:", dr.state, "| note:", dr.note)
live = {g: cfgs[g].sink_handle().live_version("month=2013-01") for g in cfgs}
staged = [str(p) for g in cfgs for p in (Path(cfgs[g].table_url).parent / "_staging").rglob("*") if p.is_file()] \
    if any((Path(cfgs[g].table_url).parent / "_staging").exists() for g in cfgs) else []
print("live:", live)
ok = (states["outer.a.abort"] == "skipped" and states["outer.b.abort"] == "skipped" and states["notify"] == "success"
      and str(getattr(dr.state, "value", dr.state)) == "success" and all(live.values()))
verdict(not ok, "each commit skipped only its own teardown, the user task ran, the run succeeded" if ok
        else "see states above")
