"""``make backfill DAG=... START=... END=...`` (DESIGN §8, third wave): the intervals of the range in order
through Airflow, exit 0 only if every one is committed (from the transaction log); committed intervals are
skipped on a second backfill; what is published equals the pure-Python reference."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pv_checks import assert_clean, expected_rows, visible_rows

from exactly_once.ids import Interval
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from tools.sample_data import generate

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]


def backfill(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    return subprocess.run([sys.executable, "-m", "tools.backfill", "--dag", "pv_pipeline", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)


def test_backfill_runs_the_range_in_order_and_skips_what_is_committed(data_root):
    generate(str(data_root / "landing"), DAYS)
    first = backfill("--start", DAYS[0], "--end", DAYS[1])
    assert first.returncode == 0, first.stdout + first.stderr
    assert "all 2 intervals committed (2 run, 0 already committed)" in first.stdout, first.stdout
    # pv_pipeline opts in (max_batch): both days in ONE Airflow run whose begin ran them as one batch
    assert "batch of 2 intervals" in first.stdout and first.stdout.count("committed in a batch") == 2, first.stdout
    second = backfill("--start", f"{DAYS[0]}T00:00:00Z", "--end", DAYS[2])
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stdout.count("already committed, skipped") == 2, second.stdout
    assert "all 3 intervals committed (1 run, 2 already committed)" in second.stdout, second.stdout
    assert visible_rows(data_root) == expected_rows(data_root, DAYS)
    assert_clean(data_root, DAYS)
    sink = TwoPhaseCommitSink.open(str(data_root / "warehouse" / "app_pv"))
    runs = {d: sink.committed(Interval.daily(d))[1].records["open"]["meta"]["run"] for d in DAYS}
    assert runs[DAYS[0]]["batch"] == runs[DAYS[1]]["batch"] != runs[DAYS[2]]["batch"], runs  # each its own txn
    assert len({sink.committed(Interval.daily(d))[0].name for d in DAYS}) == 3


def test_backfill_bounds_and_the_intervals_of_a_schedule():
    from airflow.sdk import CronDataIntervalTimetable

    from tools.backfill import intervals_between, parse_bound

    utc = lambda *a: datetime(*a, tzinfo=timezone.utc)  # noqa: E731
    assert parse_bound("2026-01-01") == utc(2026, 1, 1)
    assert parse_bound("2026-01-01T05:00:00+02:00") == utc(2026, 1, 1, 3)
    with pytest.raises(SystemExit, match="START='yesterday' is neither"):
        parse_bound("yesterday")
    hourly = CronDataIntervalTimetable("0 * * * *", timezone="UTC")
    ivs = intervals_between(hourly, utc(2026, 1, 1), utc(2026, 1, 10, 23))
    assert len(ivs) == 240 and ivs[0].start == utc(2026, 1, 1) and ivs[-1].start == utc(2026, 1, 10, 23)
    daily = CronDataIntervalTimetable("0 0 * * *", timezone="UTC")
    assert [iv.start.day for iv in intervals_between(daily, utc(2026, 1, 1), utc(2026, 1, 3))] == [1, 2, 3]


def test_a_stopped_backfill_says_which_later_intervals_a_batch_committed():
    """A failed interval stops the backfill; a batch publishes the later intervals the failure did not cost (a
    stateless pipeline's): the message counts them apart from those not run, and the resume command stays."""
    from tools.backfill import stopped

    day4 = Interval.daily("2026-01-04")
    assert stopped("steps", day4, "2026-01-06", 2, 2) == (
        "  stopped: 0 later intervals not run (2 later ones are committed: a batch published them, or an earlier "
        "run). Fix the cause, then resume with\n    make backfill DAG=steps START=2026-01-04T00:00:00+00:00 "
        "END=2026-01-06")
    assert stopped("steps", day4, "2026-01-06", 2, 0).startswith("  stopped: 2 later intervals not run. Fix")
