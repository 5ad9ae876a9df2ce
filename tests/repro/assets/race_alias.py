"""Two (or N) commit tasks announce a fresh table's first publishes at the same moment, through Airflow's own
execution-API route (ti_update_state -> register_asset_changes_in_db) on a PostgreSQL metadata DB (session 24's
review; NOT FIXED: the library announces through an AssetAlias, and Airflow inserts the alias's asset and the
alias-asset association on the alias's first event - the second request fails with UniqueViolation, Airflow sets
its task to failed and drops its event). Measured on Airflow 3.3.2: 30 at once, 16 events, 14 tasks failed; 2 in
barrier mode, 1 failed. A fix must leave every request its event.

usage: .venv/bin/python tests/repro/assets/race_alias.py {barrier|free} [N]
  free: N threads, no instrumentation (free 30: 16 events, 14 failed tasks on this machine). barrier: every
  request waits at the alias-asset association before inserting it - written for the reverted variant in which
  parsing created the asset (commit's inlet); without it the requests fail on the asset first and never meet
  there (both fail, BrokenBarrierError)."""
import os, sys, tempfile, threading, uuid
from datetime import datetime, timedelta, timezone

MODE = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2
WHICH = "repo"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [f"{REPO}/plugins", f"{REPO}/tests", f"{REPO}/tests/integration"]
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="eo-race-home-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = f"{REPO}/dags"
import psycopg2
DB = f"eo_race_{uuid.uuid4().hex[:8]}"
admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres"); admin.autocommit = True
admin.cursor().execute(f'CREATE DATABASE "{DB}"')
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{DB}"
try:
    import logging; logging.disable(logging.WARNING)
    from airflow import settings
    from airflow.utils import db
    db.initdb()
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.dagbag import DBDagBag
    from airflow.assets.manager import AssetManager
    from airflow.sdk import DAG, Asset, AssetAlias, CronDataIntervalTimetable
    from airflow.sdk.execution_time.context import OutletEventAccessors
    from airflow.sdk.execution_time.task_runner import _build_asset_profiles, _serialize_outlet_events
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.api_fastapi.execution_api.routes.task_instances import ti_update_state
    from airflow.api_fastapi.execution_api.datamodels.taskinstance import TISuccessStatePayload
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from sqlalchemy import text
    import exactly_once
    from exactly_once.airflow import exactly_once_group
    from exactly_once.airflow.notes import asset_uri
    from test_interval_runs import config
    assert exactly_once.__file__.startswith(f"{REPO}/plugins/"), exactly_once.__file__

    s = settings.NonScopedSession()
    DagBundlesManager().sync_bundles_to_db(session=s); s.commit()
    from pathlib import Path; cfg = config(Path(tempfile.mkdtemp(prefix="eo-race-")), pipeline="race", partitions="dt={start:%Y-%m-%d}")
    with DAG("race", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
        exactly_once_group(cfg, group_id="t")
    update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=s)
    s.commit()
    q = lambda sql: s.execute(text(sql)).all()
    print(f"[{WHICH}] after parsing: asset={q('select name, uri from asset')} alias={q('select name from asset_alias')}"
          f" alias_asset={q('select * from asset_alias_asset')}")
    sdag = s.scalar(SerializedDagModel.latest_item_select_object("race")).dag
    commit = dag.task_dict["t.commit"]
    tis = []
    for d in range(N):  # N daily runs of a fresh table; each commit published its day and announces it
        start = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=d)
        dr = sdag.create_dagrun(run_id=f"r{d}", logical_date=start, data_interval=(start, start + timedelta(days=1)),
                                run_after=start, run_type=DagRunType.SCHEDULED,
                                triggered_by=DagRunTriggeredByType.TIMETABLE, state=DagRunState.RUNNING, session=s)
        ti = dr.get_task_instance("t.commit", session=s); ti.state = TaskInstanceState.RUNNING
        tis.append(ti.id)
    s.commit()

    def payload(day):  # what the Task SDK sends for commit's success (endings._asset_event's add)
        acc = OutletEventAccessors()
        alias = next(o for o in commit.outlets if isinstance(o, AssetAlias))
        acc[alias].add(Asset(uri=asset_uri(cfg)), extra={"version": f"day{day}.e000001"})
        return TISuccessStatePayload(state="success", end_date=datetime.now(timezone.utc),
                                     task_outlets=list(_build_asset_profiles(commit.outlets)),
                                     outlet_events=list(_serialize_outlet_events(acc)))

    if MODE == "barrier":
        gate = threading.Barrier(N, timeout=20)
        orig = AssetManager._add_asset_alias_association.__func__
        def waiting(cls, *a, **kw):  # every request has loaded the asset and its aliases: now they go on
            gate.wait(); return orig(cls, *a, **kw)
        AssetManager._add_asset_alias_association = classmethod(waiting)
        orig_create = None

    errors = []
    go = threading.Barrier(N)
    def announce(i):
        ss = settings.NonScopedSession()
        try:
            p = payload(i); go.wait()
            ti_update_state(task_instance_id=tis[i], ti_patch_payload=p, session=ss, dag_bag=DBDagBag())
            ss.commit()
        except Exception as e:  # noqa
            errors.append(f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"); ss.rollback()
        finally:
            ss.close()
    threads = [threading.Thread(target=announce, args=(i,)) for i in range(N)]
    [t.start() for t in threads]; [t.join() for t in threads]
    s.expire_all()
    print(f"[{WHICH}/{MODE}] {N} commits announced: commit states="
          f"{sorted(r[0] for r in q('select state from task_instance where task_id=' + chr(39) + 't.commit' + chr(39)))}")
    print(f"  asset rows={q('select id, name from asset')} asset_event rows={q('select count(*) from asset_event')[0][0]}"
          f" alias_asset={q('select * from asset_alias_asset')} thread errors={errors}")
    s.close(); settings.dispose_orm()
finally:
    admin.cursor().execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
