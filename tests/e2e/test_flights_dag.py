"""flights_hourly through Airflow (``airflow dags test``) for one hour, by its start: the DAG file, the
group, spark-submit of the job, the suite - the wiring end to end. The data checks over a day of hours,
the re-run and the crash-retry are in tests/integration/test_flights_pipeline.py (no Airflow there)."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import pyarrow.dataset as ds
import pytest

from exactly_once.ids import Interval
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from tools.flights_sample import flights, write_landing
from tools.localrun import PROJECT_ROOT, run_interval

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


def test_one_hour_by_its_start_through_airflow_and_again(data_root):
    write_landing(str(data_root / "landing"), start="2013-01-01", days=1)
    res = run_interval("flights_hourly", start=datetime(2013, 1, 1, 11, tzinfo=timezone.utc))
    assert res.ok, "\n".join(res.log_path.read_text().splitlines()[-40:])
    table = ds.dataset(str(data_root / "warehouse" / "departures"), format="parquet", partitioning="hive")
    got = {(r["dt"], r["hour"], r["origin"], r["carrier"]): r["flights"] for r in table.to_table().to_pylist()}
    hour = flights()[lambda f: f["time_hour"] == "2013-01-01T11:00:00Z"]
    want = {("2013-01-01", 11, o, c): len(g) for (o, c), g in hour.groupby(["origin", "carrier"])}
    assert got == want and sum(want.values()) > 10
    # the same hour again, as `make run-interval DAG=flights_hourly START=...` runs it (a new process): it
    # crashed in the local runner before Airflow started (a plain datetime handed to the cron timetable)
    again = subprocess.run([sys.executable, "-m", "tools.dev", "run-interval", "--dag", "flights_hourly", "--start",
                            "2013-01-01T11:00:00Z"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    table = ds.dataset(str(data_root / "warehouse" / "departures"), format="parquet", partitioning="hive")
    assert {(r["dt"], r["hour"], r["origin"], r["carrier"]): r["flights"] for r in table.to_table().to_pylist()} == want
    sink = TwoPhaseCommitSink.open(str(data_root / "warehouse" / "departures"))
    hour = Interval(datetime(2013, 1, 1, 11, tzinfo=timezone.utc), datetime(2013, 1, 1, 12, tzinfo=timezone.utc))
    assert sink.log.intervals() == [hour] and sink.committed(hour)[0].epoch == 2  # a new version of that hour
