"""REGRESSION of 8b09adf (resume lost, exactly-once holds). A NON-stateful batched backfill (as
flights_hourly): the host run (day 2) hosts days 2-4; day 2's pre_commit hits a transient error (pending),
day 3 commits, then the host's worker dies (day 4 written, not pre-committed). With this commit day 3's run
finishes at once - its DAG run is success. The host's retry recomputes candidates() from the DAG runs still
queued/running: the prefix stops at day 3 (finished), so it claims [day 2] only, resumes day 2, marks the
batch done and releases day 4. Day 4's written attempt is not resumed: day 4's run hosts a NEW batch, a new
epoch (the old attempt aborted) and a second write job. README ("Backfills"): "the host's retry resumes the
batch's attempts (same epochs, nothing recomputed)". OLD=1 replays the order before 8b09adf: it resumes."""
import dataclasses, os, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _airflow as C
import exactly_once.protocol.batch as batch_mod
import exactly_once.protocol.pipeline as pipeline_mod
from exactly_once.ids import Interval
from batch_helpers import pv_oracle


s = C.world()
cfg = dataclasses.replace(C.config(s), stateful=False)
op, sink = C.FakeBegin(s, cfg), C.sink_of(s)
active = set(C.DAYS)                     # the backfill's runs of days 2-4 are running
d2, d3, d4 = C.DAYS
real_pre, real_fp, hit = pipeline_mod.IntervalRun.pre_commit, batch_mod.failpoint, {"pre": 0}


def flaky_pre_commit(self, txn, *a, **k):
    if txn.interval == Interval.daily(d2) and not hit["pre"]:
        hit["pre"] = 1
        raise OSError("transient: storage timeout")
    return real_pre(self, txn, *a, **k)


def die_after_day3(name):
    if name == "batch.between_commits":
        raise RuntimeError("host worker killed")


pipeline_mod.IntervalRun.pre_commit, batch_mod.failpoint = flaky_pre_commit, die_after_day3
try:
    print("host try 1:", C.begin(op, s, cfg, d2, C.ctx(d2, active)))
except RuntimeError as exc:
    print("host try 1 died:", exc)
batch_mod.failpoint = real_fp
e4_batch = max(sink.status(Interval.daily(d4)))
writes = len(C.WRITES)
print("after try 1:", C.epochs(s))
r3 = C.begin(op, s, cfg, d3, C.ctx(d3, active))
print("day 3's run:", r3)
if r3.startswith("finished"):
    active.discard(d3)                   # its DAG run is success
print("day 4's run:", C.begin(op, s, cfg, d4, C.ctx(d4, active)))
print("host try 2:", C.begin(op, s, cfg, d2, C.ctx(d2, active, try_number=2)))
print("day 4's run:", C.begin(op, s, cfg, d4, C.ctx(d4, active)))
live4 = sink.committed(Interval.daily(d4))[0].epoch
print("epochs:", C.epochs(s), "| write jobs after try 1:", len(C.WRITES) - writes)
seen = C.visible_rows(s)
want = {d: pv_oracle(s.root, [d])[d] for d in C.DAYS}   # non-stateful: each day from an empty state
assert all(seen.get(d) == want[d] for d in C.DAYS), ("exactly-once broken", seen)
assert live4 == e4_batch and len(C.WRITES) == writes, (
    f"BREAK (resume lost): day 4 committed as e{live4}, not the batch's written attempt e{e4_batch}; "
    f"{len(C.WRITES) - writes} more write job(s): the host's retry (claims {batch_mod.hosted_intervals(sink, C.batching.batch_id(C.ctx(d2, active), Interval.daily(d2)))}) did not resume it")
print("held: the host's retry resumed day 4")
