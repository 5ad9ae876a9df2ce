"""The batch (days 2-4) crashes right after committing day 2 (batch.between_commits=crash, a real kill);
a late file lands for day 3 and a single REPROCESS run of day 3 publishes it; then the batch's retry.
Chained state (cumulative_pv) must equal an interval-by-interval run over the landing as it is now."""
import json
from pathlib import Path

from _world import DAYS, Driver, batch_task, report, world


def main() -> None:
    s = world()
    out = batch_task(s, DAYS, "b1", failpoints="batch.between_commits=crash")
    print("crashed:", out.exit, out.error, (out.message or "")[-800:])
    late = Path(s.root) / "landing" / "app_logs" / f"dt={DAYS[1]}" / "hour=23" / "late.jsonl"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text("".join(json.dumps({"event_id": f"late-{i}", "app_id": "app_late", "user_id": f"u{i}",
                                        "event": "page_view", "ts": f"{DAYS[1]}T23:59:0{i}Z"}) + "\n" for i in range(3)))
    Driver(s).clean_run(DAYS[1], refresh=True)
    retry = batch_task(s, DAYS, "b1", child=False)
    print("retry:", [(o["status"], o["detail"][:60]) for o in retry.result])
    r = report(s, "crash, reprocess middle, retry")
    assert all(r["rows_equal_oracle"].values()) and len(r["visible_days"]) == 4 and not r["leftovers"], r


if __name__ == "__main__":
    main()
