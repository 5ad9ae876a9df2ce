"""pv_to_db (dags/pv_to_db.py): pv_pipeline's app_pv rows published into PostgreSQL and MariaDB through
the database target - the DAG file's own config, IntervalRun driven phase by phase as the DAG's tasks
run it, the pv job in the shared Spark session. The table ends up with exactly the committed rows, equal
to the reference; a re-run and a reprocess replace a day's rows, never double them."""
from __future__ import annotations

import dataclasses
import glob
from datetime import date
from pathlib import Path

import pytest

import reference_pv as ref
from eo_testing import load_module, need
from exactly_once.ids import Interval, TxnRef
from exactly_once.protocol.pipeline import IntervalRun
from target_helpers import Db, fresh_database, reachable
from tools.sample_data import generate

ROOT = Path(__file__).resolve().parents[2]
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]
pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def job():
    return load_module("pv_counts_job", ROOT / "spark_jobs" / "pv_counts.py")


@pytest.fixture(params=["postgresql", "mysql"])
def db_url(request):
    need(reachable(5432 if request.param == "postgresql" else 3306), f"{request.param} on 127.0.0.1")
    gen = fresh_database(request.param)
    yield next(gen)
    next(gen, None)


@pytest.fixture
def cfg(db_url, tmp_path):
    """The DAG file's own PipelineConfig; only the data root and the database URL move."""
    dag = load_module("pv_to_db_dag", ROOT / "dags" / "pv_to_db.py").PV_TO_DB
    generate(str(tmp_path / "data" / "landing"), DAYS, events_per_day=400, malformed_rate=0.02)
    return dataclasses.replace(dag, root=str(tmp_path / "data"), reports=str(tmp_path / "reports"),
                               start=date.fromisoformat(DAYS[0]),
                               target=dataclasses.replace(dag.target, url=db_url))


def run_day(cfg, job, spark, day: str, reprocess: bool = False) -> str:
    run = IntervalRun(cfg, Interval.daily(day), storage_options={})
    began = run.begin(refresh_sources=reprocess, run={"run_id": f"test__{day}"})
    txn = TxnRef.from_dict(began["txn"])
    try:
        job.run(spark, began["spec"])
        run.pre_commit(txn)
        run.validate(txn)
        run.commit(txn)
    finally:
        final = run.abort(txn)
    return final


def expected(root: Path) -> dict[str, list[tuple]]:
    state: dict[str, int] = {}
    out = {}
    for day in DAYS:
        files = sorted(glob.glob(str(root / "landing" / "app_logs" / f"dt={day}" / "**" / "*.jsonl"), recursive=True))
        rows, state, _ = ref.compute(files, state)
        out[day] = sorted((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)
    return out


def in_db(db: Db) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for dt, app, pv, uv, cum in db.rows("app_pv", "dt, app_id, pv, uv, cumulative_pv", "1, 2"):
        out.setdefault(str(dt), []).append((app, int(pv), int(uv), int(cum)))
    return out


def test_days_land_in_the_database_exactly_once(cfg, job, spark, db_url, tmp_path):
    for day in DAYS:
        assert run_day(cfg, job, spark, day) == "COMMITTED"
    db = Db(db_url)
    try:
        want = expected(tmp_path / "data")
        assert all(want.values()) and in_db(db) == want
        assert run_day(cfg, job, spark, DAYS[2]) == "COMMITTED"  # a plain re-run: same rows, not doubled
        assert in_db(db) == want
        marker = db.run(f"SELECT epoch FROM {db.q('_eo_commits')} WHERE interval_token = %s",
                        (Interval.daily(DAYS[2]).token,))
        assert marker == [(2,)], marker
        assert not list((tmp_path / "data" / "warehouse").glob("app_pv_db/*")), "no files published"
    finally:
        db.close()
