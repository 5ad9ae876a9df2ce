"""Issue 46 end to end on a local-time schedule: ``make backfill`` (``tools.backfill``, ``airflow dags test``
through Airflow) of a Berlin daily DAG across the spring change - the interval that ends at the jump
(whose manual run Airflow infers as zero-length), the 23 h day and a 24 h day - publishes every local day
exactly as the reference computes it. The DAG is ``tests/e2e/dags/berlin_pv.py`` (``EO_DAGS_FOLDER``):
pv_pipeline's job, suite and data on ``0 2 * * *`` in Europe/Berlin, partitioned by the local date."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from pv_checks import expected_rows, visible_rows

from exactly_once.protocol.transaction import TwoPhaseCommitSink
from tools.sample_data import generate

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
DAYS = ["2026-03-28", "2026-03-29", "2026-03-30"]  # local dates: 24 h (ends at the jump), 23 h, 24 h


def test_make_backfill_of_a_berlin_daily_dag_across_the_spring_change(data_root):
    generate(str(data_root / "landing"), DAYS, events_per_day=200)
    env = {**os.environ, "EO_DAGS_FOLDER": str(ROOT / "tests" / "e2e" / "dags"),
           "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    run = subprocess.run([sys.executable, "-m", "tools.backfill", "--dag", "berlin_pv", "--start", DAYS[0],
                          "--end", DAYS[-1]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all 3 intervals committed (3 run, 0 already committed)" in run.stdout, run.stdout
    assert visible_rows(data_root) == expected_rows(data_root, DAYS)
    sink = TwoPhaseCommitSink.open(str(data_root / "warehouse" / "app_pv"))
    ivs = sorted(sink.log.intervals(), key=lambda iv: iv.start)
    assert [iv.end - iv.start for iv in ivs] == [timedelta(hours=24), timedelta(hours=23), timedelta(hours=24)]
    assert all(sink.committed(iv) for iv in ivs)
