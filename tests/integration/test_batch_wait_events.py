"""One asset event per publish when a run waited for a batch in the triggerer (issue 26; adversarial review
34, reproducers in tests/repro/batch_wait/): each reproducer drives a real BeginOperator in a real DAG, resumed
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
from exactly_once.protocol.batch import Outcome

REPRO = Path(__file__).resolve().parents[1] / "repro" / "batch_wait"
pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("script", [
    # the trigger fired at the batch's commit DECISION; the resumed begin finished that publish itself
    # (announce_finished) and then announced it again (finish_at_once): two events for one version
    "r01_two_asset_events_when_resumed_between_decision_and_publish.py",
    # a range run's host announced a day whose own backfill run (waiting on the range's batch) announced it too
    "r02_range_host_and_waiting_backfill_run_both_announce_a_day.py",
])
def test_a_publish_is_announced_once_whoever_waited_for_it(script):
    out = subprocess.run([sys.executable, str(REPRO / script)], capture_output=True, text=True, timeout=240)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("OK", "BREAK"))]
    assert out.returncode == 0 and lines == ["OK"], out.stdout[-3000:] + out.stderr[-3000:]


def test_a_range_host_announces_every_day_when_airflow_cannot_say_which_have_runs():
    """The range host asks Airflow which of its days have a queued or running DAG run of their own (those
    announce themselves); one question for the usual range with none, and every day is announced when
    Airflow cannot answer (a lost event is worse than a second one)."""
    outs = [Outcome(Interval.daily(d), "committed", f"{d}.e1", "", {"version": f"{d}.e1"})
            for d in ("2026-01-02", "2026-01-03", "2026-01-04")]
    asked: list[list] = []

    def count(dag_id, logical_dates, states):
        asked.append(list(logical_dates))
        assert states == ["queued", "running"]
        return sum(d == outs[1].interval.start for d in logical_dates)

    op = SimpleNamespace(dag_id="pv")
    assert batching.unannounced(op, {"ti": SimpleNamespace(get_dr_count=count)}, outs) == [outs[0], outs[2]]
    assert asked[0] == [o.interval.start for o in outs] and len(asked) == 4
    asked.clear()
    assert batching.unannounced(op, {"ti": SimpleNamespace(get_dr_count=lambda **k: 0)}, outs) == outs

    def broken(**k):
        raise RuntimeError("no such API")

    assert batching.unannounced(op, {"ti": SimpleNamespace(get_dr_count=broken)}, outs) == outs
