"""The backfill bench's check of a run without a naive DAG (the 365-interval run): the published table
against the test oracle, over the same landing files, the state carried from day to day."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

import reference_pv as ref
from bench.backfill_metrics import reference_equal
from tools.sample_data import generate

DAYS = ["2026-03-01", "2026-03-02", "2026-03-03"]


def _publish(data, rows_by_day):
    for day, rows in rows_by_day.items():
        part = data / "warehouse" / "app_pv" / f"dt={day}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), part / "part-0.parquet")


def _oracle(landing):
    state, out = {}, {}
    for day in DAYS:
        files = sorted(str(p) for p in (landing / "app_logs" / f"dt={day}").rglob("*.jsonl"))
        out[day], state, _ = ref.compute(files, state)
    return out


def test_reference_equal_accepts_the_oracles_rows_and_refuses_any_difference(tmp_path):
    landing = tmp_path / "landing"
    generate(str(landing), DAYS, events_per_day=200)
    good = _oracle(landing)
    assert all(good.values())
    _publish(tmp_path / "ok", good)
    equal, rows = reference_equal(tmp_path / "ok", landing, DAYS)
    assert equal and rows == sum(len(r) for r in good.values())

    # one count off, a day missing, a day's state not carried (cumulative restarted): each is caught
    off = {d: [dict(r) for r in rs] for d, rs in good.items()}
    off[DAYS[1]][0]["pv"] += 1
    missing = {d: rs for d, rs in good.items() if d != DAYS[2]}
    restarted = dict(good, **{DAYS[2]: ref.compute(sorted(
        str(p) for p in (landing / "app_logs" / f"dt={DAYS[2]}").rglob("*.jsonl")), {})[0]})
    for name, table in (("off", off), ("missing", missing), ("restarted", restarted)):
        _publish(tmp_path / name, table)
        assert reference_equal(tmp_path / name, landing, DAYS)[0] is False, name
