"""One asset event per publish when a run waited for a batch in the triggerer or a range batched days that have
runs of their own (issue 26; adversarial reviews 34 and 35, reproducers in tests/repro/batch_wait/ and
tests/repro/range_resume/): each reproducer drives a real BeginOperator in a real DAG, resumed
as Airflow's task runner resumes a deferred task, with Airflow's own outlet-event accessors counting the events,
and prints ``OK`` or ``BREAK: ...``. They run here as the user would run them, one process each."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from exactly_once.airflow import batching
from exactly_once.ids import Interval

REPRO = Path(__file__).resolve().parents[1] / "repro"
pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("script", [
    # the trigger fired at the batch's commit DECISION; the resumed begin finished that publish itself
    # (announce_finished) and then announced it again (finish_at_once): two events for one version
    "batch_wait/r01_two_asset_events_when_resumed_between_decision_and_publish.py",
    # a range run's host announced a day whose own backfill run (waiting on the range's batch) announced it too
    "batch_wait/r02_range_host_and_waiting_backfill_run_both_announce_a_day.py",
    # (review 35) a range resumed over failed days fenced a day's single run that was writing, published the day
    # and left its announcement to that run - which failed: the range now stops before a day with a run of its own
    "range_resume/r01_range_fences_a_running_single_run_unannounced.py",
])
def test_a_publish_is_announced_once_whoever_waited_for_it(script):
    out = subprocess.run([sys.executable, str(REPRO / script)], capture_output=True, text=True, timeout=240)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("OK", "BREAK"))]
    assert out.returncode == 0 and lines == ["OK"], out.stdout[-3000:] + out.stderr[-3000:]


def test_a_batch_host_announces_every_day_but_those_with_runs_of_their_own_and_all_when_airflow_cannot_say():
    """The host asks Airflow which of its days have a queued or running DAG run of their own (those announce
    themselves); one question for the usual range with none, and every day is announced when Airflow cannot
    answer (a lost event is worse than a second one - and the announcement claim keeps it to one)."""
    days = [Interval.daily(d) for d in ("2026-01-02", "2026-01-03", "2026-01-04")]
    asked: list[list] = []

    def count(dag_id, logical_dates, states):
        asked.append(list(logical_dates))
        assert states == ["queued", "running"]
        return sum(d == days[1].start for d in logical_dates)

    op = SimpleNamespace(dag_id="pv")
    assert batching.with_own_runs(op, {"ti": SimpleNamespace(get_dr_count=count)}, days) == [days[1]]
    assert asked[0] == [iv.start for iv in days] and len(asked) == 4
    asked.clear()
    assert batching.with_own_runs(op, {"ti": SimpleNamespace(get_dr_count=lambda **k: 0)}, days) == []

    def broken(**k):
        raise RuntimeError("no such API")

    assert batching.with_own_runs(op, {"ti": SimpleNamespace(get_dr_count=broken)}, days) == []


def test_a_range_stops_before_a_day_with_a_run_of_its_own():
    """The range's candidates: all of them when no later day has a queued or running DAG run of its own (one
    question to Airflow), else those before the first such day; only its own day when Airflow cannot say."""
    days = [Interval.daily(d) for d in ("2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05")]
    asked: list[list] = []

    def count(active):
        def get_dr_count(dag_id, logical_dates, states):
            asked.append(list(logical_dates))
            return sum(d in active for d in logical_dates)
        return {"ti": SimpleNamespace(get_dr_count=get_dr_count)}

    op = SimpleNamespace(dag_id="pv")
    assert batching.own_runs_ahead(op, count(set()), days) == days and len(asked) == 1
    assert batching.own_runs_ahead(op, count({days[0].start}), days) == days  # its own run: itself
    assert batching.own_runs_ahead(op, count({days[2].start, days[3].start}), days) == days[:2]

    # make backfill's range run of [d, d+1) has the logical date d+1 (a manual run under a data-interval
    # timetable): it is not the next day's own run - found by the e2e backfill test
    itself = {**count({days[1].start}), "dag_run": SimpleNamespace(logical_date=days[1].start)}
    assert batching.own_runs_ahead(op, itself, days) == days
    assert batching.with_own_runs(op, itself, days[1:]) == []
    both = {**count({days[1].start, days[2].start}), "dag_run": SimpleNamespace(logical_date=days[1].start)}
    assert batching.own_runs_ahead(op, both, days) == days[:2]

    def broken(**k):
        raise RuntimeError("no such API")

    assert batching.own_runs_ahead(op, {"ti": SimpleNamespace(get_dr_count=broken)}, days) == days[:1]
