"""PRE-EXISTING (off the change; same with OLD=1). README: "To re-run unchanged inputs with fixed job code,
reprocess with --max-active-runs 1 ... or run make backfill ... REPROCESS=1". After an earlier batch b-old
(done) committed days 2-4, a REPROCESS range run (conf eo_batch + reprocess) of days 2-4 - the host itself -
finds its own day held by b-old and committed by it, inputs unchanged: published() is True and it finishes at
once before host(): nothing is reprocessed, days 3-4 not even looked at, the run reports success."""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
import _airflow as C
from batch_helpers import batch_task
from exactly_once.protocol.batch import claim_intervals, mark_done

s = C.world()
cfg, sink = C.config(s), C.sink_of(s)
op = C.FakeBegin(s, cfg)
ivs = [C.Interval.daily(d) for d in C.DAYS]
assert claim_intervals(sink, ivs, "b-old", {}, stale_after=300) == ivs
assert batch_task(s, C.DAYS, "b-old", child=False).ok
mark_done(sink, "b-old")
before = C.epochs(s)
c = C.ctx(C.DAYS[0], set(), conf={"reprocess": True, "eo_batch": {"end": f"{C.DAYS[-1]}T00:00:00+00:00"}}, run_type="manual")
print("range reprocess host:", C.begin(op, s, cfg, C.DAYS[0], c, reprocess=True))
print("epochs before:", before, "after:", C.epochs(s))
assert C.epochs(s) != before, "BREAK: the reprocess range run reprocessed nothing and reported success"
