"""``make ui`` is a working local Airflow (issue 28): ``python -m tools.ui`` starts the api-server, scheduler,
dag-processor and triggerer on a PostgreSQL metadata DB; Airflow's health endpoint reports all of them, a
DAG triggered through the API runs to success, the console says what started and where to log in (never
the password), and SIGTERM stops every process it started."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from eo_testing import free_port, need
from tools.deployment import MetaDB, marked_pids, postgres_problem

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]

DAG = '''
from datetime import datetime, timezone
from pathlib import Path
from airflow.sdk import DAG, task

with DAG("eo_ui_smoke", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    @task
    def touch():
        Path(__file__).with_name("ran.txt").write_text("ran")

    touch()
'''


def _wait(what: str, cond, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    end = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"tools.ui exited while waiting for {what}:\n{log.read_text()[-4000:]}"
        assert time.time() < end, f"timed out waiting for {what}:\n{log.read_text()[-4000:]}"
        time.sleep(1)


def test_make_ui_runs_every_component_and_a_triggered_dag_runs(tmp_path):
    problem = postgres_problem()
    need(problem is None, problem or "")
    db = MetaDB(f"eo_ui_test_{uuid.uuid4().hex[:8]}")
    dags, home, port = tmp_path / "dags", tmp_path / "home", free_port()
    dags.mkdir()
    (dags / "smoke.py").write_text(DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({"EO_UI_AIRFLOW_HOME": str(home), "EO_UI_DB_URL": db.url, "EO_DATA_ROOT": str(tmp_path / "data"),
                "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"})
    env.pop("AIRFLOW_HOME", None)
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tools.ui", "--port", str(port), "--dags-folder", str(dags)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        _wait("the login line", lambda: "Airflow UI:" in log.read_text(), proc, log)
        printed = log.read_text()
        assert all(c in printed for c in ("api-server", "scheduler", "dag-processor", "triggerer")), printed
        assert "log in as one of admin" in printed and str(home) in printed, printed

        def healthy() -> bool:
            got = client.get("/api/v2/monitor/health").json()
            return all((got.get(c) or {}).get("status") == "healthy"
                       for c in ("metadatabase", "scheduler", "triggerer", "dag_processor"))
        _wait("every component to report healthy", healthy, proc, log)

        password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        assert password not in log.read_text()  # never printed
        token = client.post("/auth/token", json={"username": "admin", "password": password}).json()["access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        _wait("the DAG to be parsed", lambda: client.get("/api/v2/dags/eo_ui_smoke", headers=auth).status_code == 200,
              proc, log)
        assert client.patch("/api/v2/dags/eo_ui_smoke", headers=auth, json={"is_paused": False}).status_code == 200
        made = client.post("/api/v2/dags/eo_ui_smoke/dagRuns", headers=auth, json={"logical_date": None})
        assert made.status_code == 200, made.text
        run = f"/api/v2/dags/eo_ui_smoke/dagRuns/{made.json()['dag_run_id']}"
        _wait("the triggered run to finish", lambda: client.get(run, headers=auth).json()["state"] in
              ("success", "failed"), proc, log)
        assert client.get(run, headers=auth).json()["state"] == "success", (home / "logs").as_posix()
        assert (dags / "ran.txt").read_text() == "ran"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        client.close()
        left = marked_pids(f"EO_UI_AIRFLOW_HOME={home}".encode())  # every process it started inherits it
        db.drop()
    assert code in (0, 143), log.read_text()[-3000:]
    assert not left, f"processes left running: {left}"
