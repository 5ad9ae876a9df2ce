"""A range run (conf eo_batch, `make backfill`) hosts days 2-4 and, in range mode, announces the days other
than its own itself ("no run of their own announces them"). A backfill run of day 3 (airflow backfill create
over an overlapping range) finds day 3 held by that live batch and defers to BatchWaitTrigger; the trigger
fires when the range batch commits day 3; the resumed begin finishes at once on that version and announces it
AGAIN. Two tasks, two asset events for one publish of day 3.

Interleaving: day 3's backfill run defers (range batch claimed, live); the range host runs its batch to the end
(announcing days 3 and 4); the trigger fires; day 3's begin resumes (after_batch_wait)."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _wait as W
import exactly_once.protocol.batch as batch_mod

s = W.world()
op, sink = W.build(s), W.sink_of(s)
d2, d3, d4 = W.DAYS
IV3 = W.Interval.daily(d3)
conf = {"eo_batch": {"end": W.Interval.daily(d4).start.isoformat()}}
# Airflow's view from the range host's task: day 3 has a DAG run of its own, queued or running (the
# overlapping backfill's); get_dr_count says so (the harness's fake counts the days in this set)
host_ctx = W.context(d2, {d3}, conf=conf, run_type="manual", run_id="manual__range")
bf_ctx = W.context(d3)
real_fp, state = batch_mod.failpoint, {"n": 0}


def at(name):  # the range host committed day 2: day 3's backfill run begins now, and waits
    real_fp(name)
    if name == "batch.between_commits":
        state["n"] += 1
        if state["n"] == 1:
            state["first"] = W.run_task(op, bf_ctx)


batch_mod.failpoint = at
print("range host:", W.run_task(op, host_ctx))
batch_mod.failpoint = real_fp
print("day 3's backfill begin (while the range batch ran):", state.get("first"))
if "deferred" in bf_ctx:  # day 3's run waited on the range's batch: the trigger resumes it
    event = W.first_event(W.rebuilt(bf_ctx["deferred"].trigger), 2)
    print("trigger:", event)
    c = W.context(d3)
    print("resumed:", W.run_task(op, c, next_method=W.batching.RESUME, next_kwargs={"event": event}))
else:  # (since session 9 a range stops before a day with a run of its own: that run decided alone)
    c = bf_ctx
host_events = [e["version"] for e in W.events(host_ctx) if e["interval"]["start"].startswith(d3)]
run_events = [e["version"] for e in W.events(c)]
print("day 3 announced by the range host:", host_events, "| by day 3's backfill run:", run_events)
both = set(host_events) & set(run_events)
if both:
    print(f"BREAK: {sorted(both)[0]} (one publish of {IV3}) has two asset events: the range host's and the "
          "resumed backfill run's")
else:
    print("OK")
