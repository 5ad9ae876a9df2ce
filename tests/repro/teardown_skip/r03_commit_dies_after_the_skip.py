"""r03: the commit task dies after its skip reached Airflow (abort SKIPPED) and before its success was
recorded (the worker is killed between the two calls); Airflow retries commit. Expected to hold: the
retry finds e1 published, announces it (the first try's event never left) and skips again; the run ends
success with exactly one asset event and nothing left. Also: all of commit's tries then fail -> what is left?"""
import os

from _harness import disable_skip_if_control, new_pipeline, staging_left, verdict
from airflow.sdk.execution_time import task_runner

real = task_runner._handle_current_task_success
died = {"n": 0}
KILL_TRIES = int(os.environ.get("KILL_TRIES", "1"))  # 2: every try of commit (retries=1) dies so


def dying(context, ti):
    if ti.task_id == "t.commit" and died["n"] < KILL_TRIES:
        died["n"] += 1
        raise RuntimeError("worker killed after the skip-downstream call, before the success call")
    return real(context, ti)


task_runner._handle_current_task_success = dying
disable_skip_if_control()

pipe = new_pipeline(f"r03_{KILL_TRIES}")
dr = pipe.create_run(1)
states = pipe.drive(dr)
from sqlalchemy import select
from airflow.models.asset import AssetEvent, AssetModel
pipe.session.expire_all()
events = [e.extra.get("version") for e in pipe.session.scalars(
    select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
    .where(AssetModel.uri == f"file://{pipe.cfg.table_url}"))]
print("states:", states, "| run:", pipe.run_state(dr), "| commit tries:", pipe.tries(dr, "commit"))
print("epochs:", pipe.epochs(), "| live:", pipe.live(), "| staged:", staging_left(pipe))
print("asset events:", events, "| note:", pipe.note(dr))
ok = pipe.epochs() == {1: "COMMITTED"} and staging_left(pipe) == [] and len(events) == 1
if KILL_TRIES >= 2 and not events:  # the same without the skip (CONTROL=1): docs/lineage's known limit
    print("PRE-EXISTING (not the skip's): every commit try died after publishing - no asset event; the "
          "teardown, had it run, finds nothing unpublished either (run with CONTROL=1 to compare)")
else:
    verdict(not ok, f"{len(events)} asset event(s) for the publish, run {pipe.run_state(dr)}")
