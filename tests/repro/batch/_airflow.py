"""Shared harness: a fake Airflow operator/context around batching.before_begin (no scheduler, no JVM)."""
from __future__ import annotations
import dataclasses, sys
from types import SimpleNamespace
from typing import Any
_ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]
sys.path[:0] = [str(_ROOT / "plugins"), str(_ROOT / "tests"), str(_ROOT), str(_ROOT / "tests" / "repro" / "batch")]
from _world import DAYS, world, sink_of, visible_rows, oracle, leftovers, epochs  # noqa: E402,F401
from batch_helpers import stage_batch_write  # noqa: E402
from exactly_once.airflow import batching  # noqa: E402
from exactly_once.airflow.compat import AirflowRescheduleException, DownstreamTasksSkipped, TaskDeferred  # noqa: E402
from exactly_once.airflow.notes import NOTE_KEY  # noqa: E402
from exactly_once.ids import Interval  # noqa: E402
from airflow.timetables.interval import CronDataIntervalTimetable  # noqa: E402

WRITES: list[str] = []


from exactly_once.airflow.lineage import PublishLineage  # noqa: E402


class FakeBegin(PublishLineage):
    """What before_begin/host/candidates/finish_at_once use of a BeginOperator."""
    task_id, dag_id, outlets, retries = "app_pv.begin", "pv_pipeline", [], 2

    def __init__(self, setup, cfg):
        self.setup, self.config = setup, cfg
        self.dag = SimpleNamespace(timetable=CronDataIntervalTimetable("@daily", timezone="UTC"))

    def write_batch(self, url: str, attempt: int) -> None:
        WRITES.append(url)
        stage_batch_write(url, self.setup.options())

    def defer(self, *, trigger: Any, method_name: str, timeout: Any = None) -> None:
        self.deferred = trigger  # what a waiting run's begin hands Airflow's triggerer
        raise TaskDeferred(trigger=trigger, method_name=method_name, timeout=timeout)

    def get_flat_relatives(self, upstream: bool = False):
        return []


def config(setup, max_batch=4):
    return dataclasses.replace(setup.config(), max_batch=max_batch)


def ctx(day: str, active: set[str], *, try_number=1, conf=None, run_type="backfill") -> dict[str, Any]:
    pushed: dict[str, Any] = {}
    iv = Interval.daily(day)
    ti = SimpleNamespace(run_id=f"backfill__{day}", try_number=try_number, dag_id="pv_pipeline",
                         task_id="app_pv.begin", xcom_push=lambda key, value: pushed.__setitem__(key, value),
                         get_dr_count=lambda dag_id, logical_dates, states: sum(
                             d.date().isoformat() in active for d in logical_dates))
    dr = SimpleNamespace(run_id=ti.run_id, conf=conf or {}, clear_number=0, logical_date=iv.start,
                         run_type=run_type)
    return {"ti": ti, "dag_run": dr, "outlet_events": {}, "pushed": pushed,
            "data_interval_start": iv.start, "data_interval_end": iv.end}


def begin(op, setup, cfg, day, c, reprocess=False) -> str:
    try:
        batching.before_begin(op, setup.run(day, config=cfg), c, reprocess=reprocess)
    except DownstreamTasksSkipped:
        return "finished: " + c["pushed"][NOTE_KEY]
    except (AirflowRescheduleException, TaskDeferred):
        return "waits"
    return "went on alone"


def old_before_begin(operator, run, context, *, reprocess):
    """batching.before_begin as it was before 8b09adf (with the signatures of now) (wait while a live batch holds the interval first)."""
    B = batching
    own, sink = run.interval, run.sink
    held = B.holder(sink, own)
    if held is not None and B.batch_live(sink, held[1]["batch"], B.stale_seconds()) and \
            held[1]["batch"] != B.batch_id(context, own):
        raise AirflowRescheduleException(None)
    if found := B.published(run, held, reprocess):
        B.finish_at_once(operator, run, context, found)
    if held is not None and held[1]["batch"] != B.batch_id(context, own) and B.failed_in(run, held[1]["batch"]):
        return
    B.host(operator, run, context, B.candidates(operator, run, context), reprocess=reprocess)
    if found := B.published(run, B.holder(sink, own), reprocess):
        B.finish_at_once(operator, run, context, found)


import os as _os
if _os.environ.get("OLD"):
    batching.before_begin = old_before_begin
