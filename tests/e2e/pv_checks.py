"""What the end-to-end tests assert: the published table equals an independent pure-Python computation."""
from __future__ import annotations

import glob
import os
from pathlib import Path

import pyarrow.dataset as ds

from reference_pv import compute

from exactly_once.ids import Interval
from exactly_once.transaction import TwoPhaseCommitSink
from exactly_once.txlog import State


def landing_files(root: Path, day: str) -> list[str]:
    return sorted(glob.glob(str(root / "landing" / "app_logs" / f"dt={day}" / "**" / "*.jsonl"), recursive=True))


def expected_rows(root: Path, days: list[str]) -> dict[str, set[tuple]]:
    """Per day, the rows the reference computes, chaining state day by day."""
    state: dict[str, int] = {}
    out = {}
    for day in days:
        rows, state, _ = compute(landing_files(root, day), state)
        out[day] = {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows}
    return out


def visible_rows(root: Path) -> dict[str, set[tuple]]:
    """What a plain reader sees: pyarrow's hive dataset over the table (skips _ and . names)."""
    table = root / "warehouse" / "app_pv"
    if not table.exists():
        return {}
    t = ds.dataset(str(table), format="parquet", partitioning="hive").to_table()
    out: dict[str, set[tuple]] = {}
    rows = t.to_pylist()
    for r in rows:
        out.setdefault(str(r["dt"]), set()).add((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]))
    assert len(rows) == sum(len(v) for v in out.values()), "duplicate rows visible"
    return out


def sink(root: Path) -> TwoPhaseCommitSink:
    return TwoPhaseCommitSink.at(str(root / "warehouse" / "app_pv"), pipeline="pv_pipeline", sink="app_pv")


def assert_clean(root: Path, days: list[str]) -> None:
    """No staging leftovers; every day has exactly one live, published, committed version."""
    s = sink(root)
    staging = root / "warehouse" / "_exactly_once" / "app_pv" / "_staging"
    assert not (staging.exists() and os.listdir(staging)), f"staging leftovers: {os.listdir(staging)}"
    for day in days:
        statuses = s.status(Interval.daily(day))
        committed = [e for e, st in statuses.items() if st.state is State.COMMITTED]
        assert committed, f"{day} not committed"
        assert all(st.state in (State.COMMITTED, State.ABORTED) for st in statuses.values()), statuses
        assert all(statuses[e].published for e in committed)
        live = s.live_version(f"dt={day}")
        assert live == s.ref(Interval.daily(day), committed[-1]).name
