"""One input file of the middle interval changes after the batch froze it (begin) and before the write:
the batch's write job refuses it (replay impossible) - and with it the WHOLE batch; the retry resumes the
same attempts with the same frozen inputs and fails again, for ever. A single run fails only that
interval; here no interval of the batch is ever published by it (the other intervals are not at fault)."""
from pathlib import Path

from _world import DAYS, batch_task, report, world

s = world()
assert batch_task(s, DAYS, "b1", "begin", child=False).ok
victim = sorted((Path(s.root) / "landing" / "app_logs" / f"dt={DAYS[1]}").rglob("*.jsonl"))[0]
with open(victim, "a") as f:
    f.write('{"event_id": "late-1", "app_id": "app_x", "user_id": "u", "event": "page_view", "ts": "%sT10:00:00Z"}\n' % DAYS[1])
for attempt in range(3):
    out = batch_task(s, DAYS, "b1", child=False)
    print(f"try {attempt + 1}:", out.ok, out.error, (out.result and [o["status"] for o in out.result]))
r = report(s, "changed input")
assert r["visible_days"] != ["2026-01-01"], "nothing of the batch is ever published: one changed file poisons every interval"
