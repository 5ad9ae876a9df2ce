"""What the batched-backfill tests of the Airflow side (``test_batch_runs``, ``test_batch_runs_s3``) share: the
days of a stateful pv_pipeline whose day 1 is committed, and :class:`Begin` - what ``begin`` uses of a
BeginOperator, run with the context Airflow would hand it, counting the batch write jobs it starts."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from airflow.timetables.interval import CronDataIntervalTimetable

from batch_helpers import stage_batch_write
from fault_helpers import Setup

from exactly_once.airflow import batching, endings
from exactly_once.airflow.compat import AirflowRescheduleException, DownstreamTasksSkipped, TaskDeferred
from exactly_once.airflow.lineage import PublishLineage
from exactly_once.airflow.notes import NOTE_KEY
from exactly_once.ids import Interval

D1, DAYS = "2026-01-01", ["2026-01-02", "2026-01-03", "2026-01-04"]
IVS = [Interval.daily(d) for d in DAYS]


class Begin(PublishLineage):
    """What before_begin, host, candidates and finish_at_once use of a BeginOperator; counts write jobs."""

    task_id, dag_id, outlets, retries = "app_pv.begin", "pv_pipeline", [], 2

    def __init__(self, setup: Setup, **config: Any) -> None:
        self.setup, self.config, self.writes = setup, dataclasses.replace(setup.config(), max_batch=4, **config), 0
        self.dag = SimpleNamespace(timetable=CronDataIntervalTimetable("@daily", timezone="UTC"))

    def write_batch(self, url: str, attempt: int) -> None:
        self.writes += 1
        stage_batch_write(url, self.setup.options())

    def defer(self, *, trigger: Any, method_name: str, timeout: Any = None) -> None:
        self.deferred, self.deferral_timeout = trigger, timeout  # what a waiting run's begin hands Airflow
        raise TaskDeferred(trigger=trigger, method_name=method_name, timeout=timeout)

    def get_flat_relatives(self, upstream: bool = False) -> list[Any]:
        return []

    def run(self, day: str, active: set[str] = frozenset(DAYS), *, try_number: int = 1, reprocess: bool = False,
            conf: dict[str, Any] | None = None, run_type: str = "backfill", by: str | None = None,
            clears: int = 0) -> str:
        """One try of ``day``'s begin (its backfill's runs of ``active`` queued or running): what it did."""
        pushed: dict[str, Any] = {}
        ti = SimpleNamespace(run_id=f"{run_type}__{day}", try_number=try_number, dag_id=self.dag_id,
                             task_id=self.task_id, xcom_push=lambda key, value: pushed.__setitem__(key, value),
                             get_dr_count=lambda dag_id, logical_dates, states: sum(
                                 d.date().isoformat() in active for d in logical_dates))
        ctx = {"ti": ti, "outlet_events": {}, "data_interval_start": Interval.daily(day).start,
               "data_interval_end": Interval.daily(day).end, "dag_run": SimpleNamespace(
            run_id=ti.run_id, conf=conf or {}, clear_number=clears, logical_date=Interval.daily(day).start,
            run_type=run_type, triggering_user_name=by)}
        endings.start_try(self, ctx)  # as BeginOperator.execute does: a try reports only its own endings
        if batching.mode(self, ctx) is None:  # as BeginOperator.call asks first
            return "went on alone"
        try:
            batching.before_begin(self, self.setup.run(day, config=self.config), ctx, reprocess=reprocess)
        except DownstreamTasksSkipped:
            return f"finished: {pushed[NOTE_KEY]}"
        except (AirflowRescheduleException, TaskDeferred):
            return "waits"
        return "went on alone"
