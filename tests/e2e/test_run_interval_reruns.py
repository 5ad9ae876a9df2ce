"""``make run-interval`` of an interval that already ran (``tools.localrun.run_interval``, one ``airflow
dags test`` each): the earlier Airflow run is kept - with its own log file - and its run report still
shows the transaction it began. Both runs fail at a failpoint right after begin: no Spark is needed. The
second goes through the command line, as ``make run-interval`` does, and prints only its own lines."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from exactly_once.airflow.tables import TableRef
from exactly_once.airflow.views import run_page
from exactly_once.ids import Interval
from tools.localrun import PROJECT_ROOT, run_interval

pytestmark = pytest.mark.airflow
DAY = "2026-01-02"


def _query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return list(con.execute(sql, args))


def test_a_rerun_keeps_the_earlier_run_its_log_and_its_report(tmp_path, monkeypatch):
    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path / "data"))
    db = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"  # shared by the session's e2e tests: count ours only
    before = _query(db, "select coalesce(max(id), 0) from dag_run")[0][0] if db.exists() else 0
    env = {"EO_FAILPOINTS": "begin.after=error", "EO_RETRIES": "0", "EO_PV_START": "2026-01-02"}
    first = run_interval("pv_pipeline", DAY, extra_env=env)
    assert not first.ok  # the failpoint
    # the second from a new process (Airflow's logging not set up yet), as `make run-interval` runs it
    cli = subprocess.run([sys.executable, "-m", "tools.dev", "run-interval", "--dag", "pv_pipeline", "--date", DAY],
                         env={**os.environ, **env}, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 1, cli.stderr
    lines = (cli.stdout + cli.stderr).splitlines()
    assert [line for line in lines if not line.startswith(("pv_pipeline", "  full log: "))] == [], lines
    second_log = Path(lines[-1].removeprefix("  full log: "))
    assert "FailpointError: failpoint begin.after fired" in cli.stderr
    runs = [r for (r,) in _query(db, "select run_id from dag_run where dag_id = 'pv_pipeline' and id > ? and "
                                     "substr(data_interval_start, 1, 10) = ? order by id", (before, DAY))]
    assert len(runs) == 2, runs  # the first run was not deleted by the second
    assert first.log_path != second_log
    assert runs[0] in first.log_path.read_text() and runs[0] not in second_log.read_text()
    assert runs[1] in second_log.read_text() and runs[1] not in first.log_path.read_text()

    table = TableRef("pv_pipeline", "app_pv", str(tmp_path / "data" / "warehouse" / "app_pv"))
    for run_id, epoch in zip(runs, (1, 2)):
        page = run_page("pv_pipeline", run_id, [table])
        assert page.interval == Interval.daily(DAY) and not page.untouched and not page.error
        assert [(r.epoch.epoch, r.epoch.run_id) for r in page.reports] == [(epoch, run_id)]
