"""PRE-EXISTING (also before 8b09adf; not caused by it). Stateful pv_pipeline, batched backfill: the host
run (day 2) hosts days 2-4 and its worker dies after days 2 and 3 committed (day 4 written, not
pre-committed). The host's retry calls before_begin: its OWN interval is committed and published, so
published() finishes it at once before host() - the batch is never resumed nor marked done. Day 4's run
waits until the batch goes stale (EO_BATCH_STALE_SECONDS, 300 s), then hosts a new batch: new epoch,
second write (OLD=1, the order before 8b09adf, does the same). README: "the host's retry resumes the batch's attempts (same epochs, nothing recomputed)"."""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _airflow as C
import exactly_once.protocol.batch as batch_mod
from exactly_once.ids import Interval

s = C.world()
cfg = C.config(s)
op, sink = C.FakeBegin(s, cfg), C.sink_of(s)
active, (d2, d3, d4), n = set(C.DAYS), C.DAYS, {"c": 0}
real_fp = batch_mod.failpoint


def die_after_day3(name):
    if name == "batch.between_commits":
        n["c"] += 1
        if n["c"] == 2:
            raise RuntimeError("host worker killed")


batch_mod.failpoint = die_after_day3
try:
    C.begin(op, s, cfg, d2, C.ctx(d2, active))
except RuntimeError as exc:
    print("host try 1 died:", exc)
batch_mod.failpoint = real_fp
print("after try 1:", C.epochs(s))
retry = C.begin(op, s, cfg, d2, C.ctx(d2, active, try_number=2))
bid = C.batching.batch_id(C.ctx(d2, active), Interval.daily(d2))
live = C.batching.batch_live(sink, bid, C.batching.stale_seconds())
print("host try 2:", retry, "| batch still live:", live, "| day 4's run:", C.begin(op, s, cfg, d4, C.ctx(d4, active)))
assert sink.committed(Interval.daily(d4)) is not None and not live, (
    "BREAK (resume lost): the host's retry finished at once on its own committed day; day 4 "
    f"({C.epochs(s)[d4]}) is left to wait until batch {bid} goes stale, then recomputed")
