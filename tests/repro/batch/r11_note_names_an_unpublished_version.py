"""NEW WITH 8b09adf (truthfulness; a race, forced here). Days 2-4 were committed by an earlier batch A (e1).
A late file lands for day 3; a REPROCESS range run hosts batch H over days 2-4 (live). A NON-reprocess
batched run of day 3 (a backfill run beside the range) looks: published() sees e1 committed+published and
- new - finishes at once although H holds day 3 and is live. finish_at_once() then RE-READS
sink.committed(): between the two reads H decided e2 (COMMITTED, publish not finished - a slow database /
Redis / Delta publish, or its host dying before publish). The run's note and asset event say
"published e2" while readers still see e1 (and e2's rows may never be seen by the time a consumer runs).
Before 8b09adf the run waited while H was live. OLD=1 replays the old order: the run waits."""
import json, sys
from pathlib import Path
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _airflow as C
import exactly_once.protocol.transaction as txn_mod
from batch_helpers import batch_task
from exactly_once.protocol.batch import claim_intervals, mark_done

s = C.world()
cfg = C.config(s)
op, sink = C.FakeBegin(s, cfg), C.sink_of(s)
d2, d3, d4 = C.DAYS
ivs = [C.Interval.daily(d) for d in C.DAYS]
assert claim_intervals(sink, ivs, "b-old", {}, stale_after=300) == ivs
assert batch_task(s, C.DAYS, "b-old", child=False).ok
mark_done(sink, "b-old")
late = Path(s.root) / "landing" / "app_logs" / f"dt={d3}" / "hour=23" / "late.jsonl"
late.parent.mkdir(parents=True, exist_ok=True)
late.write_text(json.dumps({"event_id": "late-1", "app_id": "app_late", "user_id": "u1", "event": "page_view",
                            "ts": f"{d3}T23:59:00Z"}) + "\n")
assert claim_intervals(sink, ivs, "b-reproc", {}, stale_after=300) == ivs     # H, live
assert batch_task(s, C.DAYS, "b-reproc", "begin", child=False, reprocess=True).ok
assert batch_task(s, C.DAYS, "b-reproc", "write", child=False, reprocess=True).ok

real_published, real_fp, n = C.batching.published, txn_mod.failpoint, {"c": 0}


def stop_day3_before_publish(name):
    if name == "commit.before_publish":
        n["c"] += 1
        if n["c"] == 2:            # day 2 published; day 3 decided COMMITTED, its publish not done yet
            raise RuntimeError("H's publish of day 3 is slow / its host died here")


def racing_published(run, held, reprocess, own=None):
    ok = real_published(run, held, reprocess, own=own)
    if ok and run.interval == ivs[1]:   # H's commit of day 3 lands right after the run's first read
        txn_mod.failpoint = stop_day3_before_publish
        try:
            batch_task(s, C.DAYS, "b-reproc", "finish", child=False, reprocess=True)
        finally:
            txn_mod.failpoint = real_fp
    return ok


C.batching.published = racing_published
c = C.ctx(d3, set(C.DAYS))
seen = C.begin(op, s, cfg, d3, c)
live = sink.live_version(f"dt={d3}")
top = sink.committed(ivs[1])
print("day 3's run:", seen)
print("readers see:", live, "| newest committed:", top[0].name, "published:", top[1].published)
assert not seen.startswith("finished") or f"published e{int(live.rsplit('.e', 1)[1])}:" in seen, (
    f"BREAK: the run's note/asset event say {seen!r} but readers see {live}")
print("held")
