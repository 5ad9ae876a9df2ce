"""pv_pipeline with ``EO_PV_TABLE_FORMAT=delta`` through Airflow (``airflow dags test``), with real Spark:
one DAG run publishes ``app_pv`` as a Delta table at the usual location, and a Delta reader sees exactly
what the pure-Python reference computes (issue 18). One run only: the protocol over Delta is covered by
tests/conformance/test_delta_target.py."""
from __future__ import annotations

import pytest

from pv_checks import expected_rows

from exactly_once.ids import Interval
from exactly_once.targets.delta import DeltaTarget
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from tools.localrun import run_interval
from tools.sample_data import generate

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
DAY = "2026-01-01"


def test_one_day_published_as_a_delta_table(data_root, monkeypatch):
    pytest.importorskip("deltalake")
    generate(str(data_root / "landing"), [DAY], events_per_day=300)
    monkeypatch.setenv("EO_PV_TABLE_FORMAT", "delta")
    res = run_interval("pv_pipeline", DAY, extra_env={"EO_PV_TABLE_FORMAT": "delta"})
    assert res.ok, "\n".join(res.log_path.read_text().splitlines()[-40:])
    sink = TwoPhaseCommitSink.open(str(data_root / "warehouse" / "app_pv"))  # finds the bound format
    assert isinstance(sink.target, DeltaTarget)
    dt = sink.target.snapshot()
    assert dt.version() == 1 and dt.transaction_version(sink.target.txn_application(Interval.daily(DAY))) == 1
    rows = dt.to_pyarrow_table().to_pylist()
    got = {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows if r["dt"] == DAY}
    assert len(rows) == len(got) and got == expected_rows(data_root, [DAY])[DAY]
    assert sorted(p.name for p in (data_root / "warehouse" / "app_pv").iterdir()) == sorted([
        "_delta_log", "_eo_owner.json",  # the owner's claim of the table (hidden from readers and VACUUM)
        "_eo_clock",  # the storage-clock probe of the commit timestamps (also hidden)
        sink.ref(Interval.daily(DAY), 1).name])  # the committed version's files, nothing else
    assert not (data_root / "warehouse" / "_exactly_once" / "app_pv" / "_staging").exists()
