"""pv_to_db through Airflow (``airflow dags test``, what ``make run-interval DAG=pv_to_db DATE=...`` runs)
on MariaDB: the DAG file, the group, spark-submit of the pv job, the gate and the database target's
publish, end to end, with the database named only by ``EO_DB_URL``. The data checks over several days,
re-runs and both databases are in tests/integration/test_pv_to_db.py."""
from __future__ import annotations

import pytest

from eo_testing import need
from target_helpers import Db, fresh_database, reachable
from tools.localrun import run_interval
from tools.sample_data import generate

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


def test_one_day_into_mariadb_through_airflow(data_root, monkeypatch):
    need(reachable(3306), "MariaDB on 127.0.0.1:3306")
    gen = fresh_database("mysql")
    url = next(gen)
    try:
        generate(str(data_root / "landing"), ["2026-01-01"], events_per_day=300)
        monkeypatch.setenv("EO_DB_URL", url)
        res = run_interval("pv_to_db", "2026-01-01", extra_env={"EO_DB_URL": url})
        assert res.ok, "\n".join(res.log_path.read_text().splitlines()[-40:])
        db = Db(url)
        rows = db.rows("app_pv", "dt, app_id, pv, uv, cumulative_pv", "2")
        db.close()
        assert rows and all(str(r[0]) == "2026-01-01" and r[2] >= r[3] >= 1 and r[4] == r[2] for r in rows)
    finally:
        next(gen, None)
