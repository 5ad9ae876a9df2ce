"""Airflow decision, JVM-free: a REPROCESS backfill's run of day 3 reaches its begin before its own
backfill's host (day 2's run) claims day 3 (backfill runs start in parallel: the backfill's own
max_active_runs). Day 3's newest claim is still the one of the batch of an EARLIER backfill, done, whose
version is the current one. batching.published(..., reprocess=True) says "published by the batch that
holds it" -> before_begin finishes the run at once ("published e1 in batch b-old"): the reprocess of
day 3 is silently dropped (the late file never read), though the run reports success."""
import json
from pathlib import Path

from _world import DAYS, batch_task, report, sink_of, world

from exactly_once.airflow import batching
from exactly_once.protocol.batch import claim_intervals, holder, mark_done
from exactly_once.ids import Interval

s = world()
sink = sink_of(s)
ivs = [Interval.daily(d) for d in DAYS]
# the first (batched) backfill: host claims days 2-4 and runs them as batch b-old, then marks it done
assert claim_intervals(sink, ivs, "b-old", {"host": {"run_id": "backfill__d2"}}, stale_after=300) == ivs
assert [o["status"] for o in batch_task(s, DAYS, "b-old", child=False).result] == ["committed"] * 3
mark_done(sink, "b-old")
# a late file for day 3; a reprocess backfill is created; day 3's run asks first
late = Path(s.root) / "landing" / "app_logs" / f"dt={DAYS[1]}" / "hour=23" / "late.jsonl"
late.parent.mkdir(parents=True, exist_ok=True)
late.write_text(json.dumps({"event_id": "late-1", "app_id": "app_late", "user_id": "u1", "event": "page_view",
                            "ts": f"{DAYS[1]}T23:59:00Z"}) + "\n")
run3 = s.run(DAYS[1])
done = batching.published(run3, holder(sink, ivs[1]), reprocess=True)
print("reprocess run of day 3 judged already done by the old batch:", done)
report(s, "after")
assert not done, "BREAK: the reprocess run of day 3 finishes at once on the old batch's version"
