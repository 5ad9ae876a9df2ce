"""flights_hourly through Airflow (``airflow dags test``) for one hour, by its start: the DAG file, the
group, spark-submit of the job, the suite - the wiring end to end. The data checks over a day of hours,
the re-run and the crash-retry are in tests/integration/test_flights_pipeline.py (no Airflow there)."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow.dataset as ds
import pytest

from tools.flights_sample import flights, write_landing
from tools.localrun import run_interval

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


def test_one_hour_by_its_start_through_airflow(data_root):
    write_landing(str(data_root / "landing"), start="2013-01-01", days=1)
    res = run_interval("flights_hourly", start=datetime(2013, 1, 1, 11, tzinfo=timezone.utc))
    assert res.ok, "\n".join(res.log_path.read_text().splitlines()[-40:])
    table = ds.dataset(str(data_root / "warehouse" / "departures"), format="parquet", partitioning="hive")
    got = {(r["dt"], r["hour"], r["origin"], r["carrier"]): r["flights"] for r in table.to_table().to_pylist()}
    hour = flights()[lambda f: f["time_hour"] == "2013-01-01T11:00:00Z"]
    want = {("2013-01-01", 11, o, c): len(g) for (o, c), g in hour.groupby(["origin", "carrier"])}
    assert got == want and sum(want.values()) > 10
