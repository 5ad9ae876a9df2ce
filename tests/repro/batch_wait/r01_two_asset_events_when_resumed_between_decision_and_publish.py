"""BatchWaitTrigger fires as soon as the interval's newest COMMITTED txn changes - i.e. at the batch's commit
DECISION, before its publish finished (sink.committed() counts a decided, unpublished version). The resumed
begin then re-runs execute: announce_finished() finishes that publish itself and adds the table's asset
event, and before_begin() -> finish_at_once() adds a SECOND asset event for the same version (the run's one
task success carries both: two AssetEvents, a consumer DAG / triggering_asset_events sees the day twice).

Interleaving (forced in-process): batch b-live holds days 2-4, live. Day 3's run defers (trigger, seen=None).
The host commits day 2, decides day 3 (COMMITTED record) and is at commit.before_publish. The trigger looks:
fires "committed ...e000001". The scheduler resumes day 3's begin (after_batch_wait): it runs to its end.
Then the host goes on with its publish."""
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _wait as W
import exactly_once.protocol.transaction as txn_mod

s = W.world()
op, sink = W.build(s), W.sink_of(s)
d2, d3, d4 = W.DAYS
IV3 = W.Interval.daily(d3)
assert W.claim_intervals(sink, [W.Interval.daily(d) for d in W.DAYS], "b-live", {"host": {}}, stale_after=300)
c3 = W.context(d3)
print("day 3's begin:", W.run_task(op, c3))
trigger = c3["deferred"].trigger
print("trigger while nothing is committed:", W.first_event(W.rebuilt(trigger), 0.3))

state = {"n": 0, "busy": False, "resumed": None, "event": None}
real_fp = txn_mod.failpoint


def at(name):
    real_fp(name)
    if name != "commit.before_publish" or state["busy"]:
        return
    state["n"] += 1
    if state["n"] != 2:  # the 2nd decided commit of the batch is day 3's
        return
    st = sink.status(IV3)
    print("host decided day 3:", {e: (x.state.value, x.published) for e, x in st.items()})
    state["event"] = W.first_event(W.rebuilt(trigger), 2)
    print("trigger fires:", state["event"])
    state["busy"] = True
    try:  # the scheduler resumes day 3's begin with the event: a new process, the same try
        c = W.context(d3)
        how = dict(next_method=W.batching.RESUME, next_kwargs={"event": state["event"]}) if state["event"] else \
            dict(next_method="__fail__", next_kwargs={"error": "Trigger timeout"})  # no event: the deferral times out
        state["resumed"] = (W.run_task(op, c, **how), W.events(c))
    finally:
        state["busy"] = False


txn_mod.failpoint = at
out = W.batch_task(s, W.DAYS, "b-live", child=False)
txn_mod.failpoint = real_fp
W.mark_done(sink, "b-live")
print("batch:", out.ok, [o["status"] for o in (out.result or [])] if out.ok else out)
verdict, evs = state["resumed"]
print("resumed day 3's begin:", verdict)
for e in evs:
    print("  asset event:", e["version"], e["interval"])
versions = [e["version"] for e in evs]
if len(versions) != len(set(versions)):
    print(f"BREAK: one publish of {IV3} announced {versions.count(versions[0])} times by the resumed begin "
          f"(announce_finished + finish_at_once): {versions}")
else:
    print("OK")
