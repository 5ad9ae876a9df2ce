"""Shared harness for the batch_wait reproducers: a real BeginOperator (in a real DAG, exactly_once_group)
resumed as Airflow's task runner resumes a deferred task, a trigger run as the triggerer runs it, and
the table world of tests/repro/batch (pv_pipeline, day 1 committed, days 2-4 landed). No JVM, no scheduler."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
os.environ.setdefault("EO_BATCH_WAIT_POLL_SECONDS", "0.05")  # the triggers these scripts run look often
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT), str(ROOT / "tests" / "repro" / "batch")]

from _world import DAYS, world, sink_of, visible_rows, oracle, leftovers, epochs  # noqa: E402,F401
from batch_helpers import batch_task, first_event, stage_batch_write  # noqa: E402,F401

from airflow.sdk import DAG  # noqa: E402
from airflow.sdk.execution_time.context import OutletEventAccessors  # noqa: E402
from airflow.timetables.interval import CronDataIntervalTimetable  # noqa: E402

from exactly_once.airflow import batching  # noqa: E402
from exactly_once.airflow.compat import DownstreamTasksSkipped, TaskDeferred  # noqa: E402
from exactly_once.airflow.notes import NOTE_KEY  # noqa: E402
from exactly_once.airflow.taskgroup import exactly_once_group  # noqa: E402
from exactly_once.ids import Interval  # noqa: E402
from exactly_once.protocol.batch import claim_intervals, mark_done  # noqa: E402,F401

WRITES: list[str] = []




def build(setup, max_batch: int = 4, **extra: Any):
    cfg = dataclasses.replace(setup.config(), max_batch=max_batch, **extra)
    with DAG("pv_pipeline", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
             start_date=Interval.daily("2026-01-01").start) as dag:
        exactly_once_group(cfg)
    op = dag.get_task(f"{cfg.sink}.begin")
    op.write_batch = lambda url, attempt: (WRITES.append(url), stage_batch_write(url, setup.options()))[0]
    return op


def context(day: str, active: set[str] | frozenset = frozenset(DAYS), *, try_number: int = 1, conf=None,
            run_type: str = "backfill", run_id: str | None = None) -> dict[str, Any]:
    iv = Interval.daily(day)
    pushed: dict[str, Any] = {}
    ti = SimpleNamespace(run_id=run_id or f"backfill__{day}", try_number=try_number, dag_id="pv_pipeline",
                         task_id="app_pv.begin", max_tries=3,
                         xcom_push=lambda key, value: pushed.__setitem__(key, value),
                         xcom_pull=lambda **k: None,
                         get_dr_count=lambda dag_id, logical_dates, states: sum(
                             d.date().isoformat() in active for d in logical_dates))
    dr = SimpleNamespace(run_id=ti.run_id, conf=conf or {}, clear_number=0, logical_date=iv.start,
                         run_type=run_type, triggering_user_name=None)
    return {"ti": ti, "dag_run": dr, "outlet_events": OutletEventAccessors(), "pushed": pushed,
            "data_interval_start": iv.start, "data_interval_end": iv.end}


def events(c: dict[str, Any]) -> list[dict[str, Any]]:
    """The asset events the task would send on success (its alias outlet's events)."""
    out = []
    for key, acc in c["outlet_events"]._dict.items():
        for ev in acc.asset_alias_events:
            out.append(ev.extra)
    return out


def run_task(op, c: dict[str, Any], *, next_method: str | None = None, next_kwargs: dict | None = None) -> str:
    """One execution of begin as the task runner does it: execute, or resume_execution after a deferral."""
    try:
        if next_method is None:
            op.execute(c)
        else:
            op.resume_execution(next_method=next_method, next_kwargs=next_kwargs, context=c)
    except DownstreamTasksSkipped:
        return "finished: " + str(c["pushed"].get(NOTE_KEY))
    except TaskDeferred as d:
        c["deferred"] = d
        return "deferred"
    return "went on alone"


def rebuilt(trigger: Any) -> Any:
    """The trigger as the triggerer re-creates it from its serialized kwargs (stored in Airflow's DB)."""
    import importlib
    path, kwargs = trigger.serialize()
    mod, _, name = path.rpartition(".")
    return getattr(importlib.import_module(mod), name)(**kwargs)
