"""Roll a table's interval back to an earlier committed version (or recover a table now), from Airflow.

The table page's actions trigger it with the right params; by hand, trigger it with params (Trigger DAG w/ config): the table's URL (``eo history <url>`` lists its
versions), the interval's start (ISO-8601) and the version to make live again (``e2``). The rollback is
a new, fenced epoch of the interval that republishes that version's files; later intervals of a
stateful pipeline computed on the replaced state are listed as stale in the task's result.
``action=recover`` brings every transaction of the table to a final state instead (``eo recover``).

Only a table a DAG declares, and only if the user who triggers the run may edit that DAG: anything else
fails at once with the reason (under ``[core] multi_team`` it always refuses: use ``eo rollback``). A run
rolls back once: a retry or a clear of a run that committed its rollback does nothing and says so.
"""
from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import DAG, Param

from exactly_once import settings
from exactly_once.airflow.taskgroup import retry_args
from exactly_once.airflow.rollback import RollbackOperator

with DAG(
    dag_id="eo_rollback",
    description="Make an earlier committed version of one interval live again (exactly-once)",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["exactly-once", "maintenance"],
    params={"table_url": Param("", type="string", description="e.g. s3://bucket/warehouse/app_pv"),
            "interval_start": Param("", type="string", description="e.g. 2026-01-03T00:00:00Z"),
            "to_version": Param("", type="string", description="e.g. e2 (rollback only)"),
            "action": Param("rollback", type="string", enum=["rollback", "recover"])},
    doc_md=__doc__,
):
    RollbackOperator(task_id="rollback", table_url="{{ params.table_url }}",
                     interval_start="{{ params.interval_start }}", to_version="{{ params.to_version }}",
                     action="{{ params.action }}",
                     storage_conn_id=settings.storage_conn_id(), **retry_args())  # a retry is safe: a run rolls back once
