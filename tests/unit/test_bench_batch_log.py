"""The ``batched`` bench section's reading of a hosting ``begin`` task's log (bench/batch_metrics.py): each
phase of a batch is the gap from the line before to the line that ends it, summed over the intervals, and
the parts add up to the task's time."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from bench.batch_metrics import batch_phases, host_logs, waits, where_batch_time_goes

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
LINES = [  # (seconds after T0, logger, message)
    (0.0, "task", "::group::Pre Execute"),
    (0.5, "exactly_once.airflow.batching", "hosting batch b-x: 2 intervals (a .. b)"),
    (0.6, "exactly_once.protocol.pipeline", "begin a.e000001: 1 input files"),
    (0.7, "exactly_once.protocol.pipeline", "begin b.e000001: 1 input files"),
    (0.8, "exactly_once.protocol.batch", "batch b-x of pv: 2 attempts (2 to write), 0 intervals skipped or failed"),
    (10.8, "exactly_once.airflow.write", "wrote batch b-x (2 intervals) over Spark Connect sc://h:1 in 9.5 s"),
    (11.0, "exactly_once.protocol.pipeline", "pre_commit a.e000001: 1 files, 5 rows sealed"),
    (12.0, "great_expectations.core", "validate a.e000001: not ours"),
    (12.5, "exactly_once.protocol.pipeline", "validate a.e000001: passed; report r"),
    (12.6, "exactly_once.protocol.pipeline", "commit a.e000001: {}, 5 rows"),
    (12.9, "exactly_once.protocol.pipeline", "pre_commit b.e000001: 1 files, 5 rows sealed"),
    (14.4, "exactly_once.protocol.pipeline", "validate b.e000001: passed; report r"),
    (14.6, "exactly_once.protocol.pipeline", "commit b.e000001: {}, 5 rows"),
    (14.7, "exactly_once.protocol.batch", "batch b-x of pv finished: {'committed': 2}"),
    (15.0, "task", "::endgroup::"),
]


def _write(path, lines=LINES):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(
        json.dumps({"timestamp": (T0 + timedelta(seconds=s)).isoformat().replace("+00:00", "Z"), "logger": lg,
                    "event": msg}) for s, lg, msg in lines) + "\nnot json\n")


def test_a_hosting_begin_is_split_phase_by_phase(tmp_path):
    home = tmp_path / "home"
    log = home / "logs" / "dag_id=pv" / "run_id=r1" / "task_id=g.begin" / "attempt=1.log"
    _write(log)
    _write(home / "logs" / "dag_id=pv" / "run_id=r2" / "task_id=g.begin" / "attempt=1.log", LINES[:1])
    assert host_logs(home, "pv") == [log]  # only the try that hosted
    r = batch_phases(log)
    assert r["parsed"] and r["intervals"] == 2 and r["begins"] == 2
    assert (r["start_up_and_claims"], r["begin"], r["write_job"], r["job_reported"]) == (0.5, 0.3, 10.0, 9.5)
    assert (r["pre_commit"], r["validate"], r["commit"]) == (0.5, 3.0, 0.3)
    assert r["per_interval"]["validate"]["samples"] == [1.5, 1.5]
    assert r["after_batch"] == 0.4 and r["task_seconds"] == 15.0
    parts = ("start_up_and_claims", "begin", "write_job", "pre_commit", "validate", "commit", "after_batch")
    assert round(sum(r[p] for p in parts), 2) == r["task_seconds"]

    span = {"runs": 2, "created_to_first_task": 2.0, "first_run": 16.0, "after_first_run": 1.5,
            "created_to_last_end": 19.5}
    where = where_batch_time_goes(span, [r], {"per_interval": {"n": 1, "median": 1.5}})
    assert where["host begin: the Spark job (all intervals)"] == 10.0
    assert where["host run: the rest (hand-offs, the skipped tasks, the run's end)"] == 1.0
    assert where["the other 1 runs, each finishing at once"] == 1.5
    assert where["total: created -> the last run's end"] == 19.5


def test_runs_that_waited_for_the_batch_are_counted_and_the_tail_says_how_many_finished_behind_its_gate(tmp_path):
    """With --max-active-runs above 1 the other runs wait in the triggerer and finish while the host's run
    still gates: the split says how many did, and their begin logs say how they waited."""
    home = tmp_path / "home"
    _write(home / "logs" / "dag_id=pv" / "run_id=r1" / "task_id=g.begin" / "attempt=1.log")  # the host
    w = "x is in batch b-x, still running: waiting for it (deferred to the triggerer)"
    _write(home / "logs" / "dag_id=pv" / "run_id=r2" / "task_id=g.begin" / "attempt=1.log",
           [(0.0, "exactly_once.airflow.batching", w), (5.0, "exactly_once.airflow.operators",
                                                         "x: the wait for the batch is over (committed x.e000001)")])
    _write(home / "logs" / "dag_id=pv" / "run_id=r3" / "task_id=g.begin" / "attempt=1.log",
           [(0.0, "exactly_once.airflow.batching", w), (60.0, "exactly_once.airflow.operators",
                                                         "no word from the triggerer for 60 s: looking again")])
    assert waits(home, "pv") == {"deferred": 2, "resumed_by_trigger": 1, "timed_out": 1}
    span = {"runs": 3, "created_to_first_task": 2.0, "first_run": 16.0, "after_first_run": 0.5,
            "created_to_last_end": 18.5, "during_first_run": 1}
    where = where_batch_time_goes(span, [], {})
    assert where["the other 2 runs: after the host's run (1 finished while it ran)"] == 0.5
