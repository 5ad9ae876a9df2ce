"""What the table page's action tests share (tests/integration/table_actions: one ``airflow api-server`` for the
package, its conftest's ``ui``): the users and the table, requests as a user, the confirmation form's token, the
DAG runs an action triggered, ending queued runs as a scheduler would, and running a triggered run's ``begin``
in-process as a worker would."""
from __future__ import annotations

import re
from types import SimpleNamespace

import httpx
import pytest

PIPELINE, SINK, D1, D2 = "pv_pipeline", "app_pv", "2026-01-01", "2026-01-02"
END = "2026-01-08"  # the DAG's end_date (EO_PV_END): the start of its last interval
USERS = {"admin": ("admin", "admin-pw-actions"), "viewer": ("viewer", "viewer-pw-actions"),
         "editor": ("user", "editor-pw-actions")}                      # not an admin, may edit DAGs
TABLE = f"/eo/dags/{PIPELINE}/tables/{SINK}"


def as_user(ui, user: str, **extra) -> dict:
    return {"Authorization": f"Bearer {ui['tokens'][user]}", **extra}


def dag_runs(ui, dag_id: str) -> list[dict]:
    got = ui["client"].get(f"/api/v2/dags/{dag_id}/dagRuns", headers=as_user(ui, "admin"))
    assert got.status_code == 200, got.text
    return got.json()["dag_runs"]


def task_ids(ui, dag_id: str, run_id: str) -> list[str]:
    """The tasks Airflow created for the run (none for a run dated outside the DAG's start/end dates)."""
    got = ui["client"].get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", headers=as_user(ui, "admin"))
    assert got.status_code == 200, got.text
    return sorted(ti["task_id"] for ti in got.json()["task_instances"])


def token_in(page: str) -> str:
    found = re.search(r'name="token" value="([0-9a-f]+)"', page)
    assert found, re.sub(r"<[^>]+>", " ", page.split("<body>")[-1])[:2000]   # a refusal: say why
    return found.group(1)


def post_as(ui, user: str, action: str, form: dict, origin: str | None = "self") -> httpx.Response:
    headers = as_user(ui, user)
    if origin:
        headers["Origin"] = ui["url"] if origin == "self" else origin
    return ui["client"].post(f"{TABLE}/actions/{action}", headers=headers, data=form)


def settle(ui, state: str = "success") -> None:
    """End every queued run, as the scheduler would (there is none here; Airflow's REST API cannot end a run
    whose tasks were never scheduled): an action on an interval with a pending run is refused, and the
    tests that follow act on the same intervals."""
    import sqlite3

    with sqlite3.connect(ui["base"] / "airflow-home" / "airflow.db") as db:
        db.execute("update dag_run set state = ? where state in ('queued', 'running')", (state,))


def set_run_note(ui, run_id: str, text: str) -> None:
    """The run's note, as the plugin's listener leaves it when the run ends (from its tasks' ``eo_note``)."""
    import sqlite3

    with sqlite3.connect(ui["base"] / "airflow-home" / "airflow.db") as db:
        [(pk,)] = db.execute("select id from dag_run where run_id = ?", (run_id,)).fetchall()
        db.execute("insert into dag_run_note (dag_run_id, content, created_at, updated_at) values "
                   "(?, ?, datetime('now'), datetime('now'))", (pk, text))


def run_task(ui, dag_id: str, run_id: str):
    """Run the begin task of the table's group in-process for the DAG run ``run_id`` of the pipeline's DAG,
    with the run's conf, data interval and triggering user as Airflow recorded them (what a worker gets).
    Returns (the task's return value, the tasks it skipped, its XComs, the asset events it added)."""
    return run_begin(ui["client"].get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", headers=as_user(ui, "admin")).json())


def run_begin(run: dict, config=None, team: str | None = None):
    """Run the begin task of ``config``'s group (default: the table's) in a DAG built like the pipeline's, for
    ``run`` (a DAG run as the REST API shows it), expecting it to carry out an action and skip the rest."""
    from collections import defaultdict
    from datetime import datetime, timezone

    from airflow.sdk import DAG, CronDataIntervalTimetable

    from exactly_once.airflow import exactly_once_group
    from exactly_once.airflow.compat import DownstreamTasksSkipped
    from exactly_once.airflow.tables import find_table

    config = config or find_table(PIPELINE, SINK).config
    with DAG(run["dag_id"], schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        exactly_once_group(config)
    begin = dag.get_task(f"{config.sink}.begin")
    xcoms, events = {}, defaultdict(list)
    ti = SimpleNamespace(run_id=run["dag_run_id"], try_number=1, dag_id=run["dag_id"], task_id=begin.task_id,
                         xcom_push=lambda key, value: xcoms.__setitem__(key, value), xcom_pull=lambda **k: None)
    dag_run = SimpleNamespace(run_id=run["dag_run_id"], dag_id=run["dag_id"], conf=run["conf"],
                              triggering_user_name=run["triggering_user_name"], team_name=team)
    context = {"ti": ti, "dag_run": dag_run, "dag": dag,
               "data_interval_start": datetime.fromisoformat(run["data_interval_start"].replace("Z", "+00:00")),
               "data_interval_end": datetime.fromisoformat(run["data_interval_end"].replace("Z", "+00:00")),
               "outlet_events": defaultdict(lambda: SimpleNamespace(add=lambda a, extra: events[a.uri].append(extra)))}
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        begin.execute(context)
    return xcoms["return_value"], sorted(skipped.value.tasks), xcoms, dict(events)
