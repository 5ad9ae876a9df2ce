"""A range run whose own day an earlier batch failed now HOSTS a batch (the change) over days whose backfill
runs already went on alone (README: "backfill that day"). Stateless pv_pipeline, days 2-4 aborted by the done
batch b-failed. Day 3's backfill run goes on alone and begins its single attempt e2 (writing). The range run
of days 2-4 (own day 2, failed) hosts a new batch: its begin of day 3 fences e2 (e3), commits e3, and - since
day 3 has a running DAG run - leaves the asset event of e3 to that run ("finishes at once on the range's
version"). But that run is past begin: its commit of the fenced e2 fails. Day 3 is published as e3 and nobody
announces it; the run of day 3 is failed. Before the change (OLD=1) the range run went on alone (own day 2),
and nothing fenced day 3's run."""
import os
import sys
import dataclasses
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "batch"))
import _airflow as C  # noqa: E402
import fault_helpers as F  # noqa: E402
from exactly_once.airflow import batching, notes  # noqa: E402
from exactly_once.protocol.batch import BatchRun, claim_intervals, mark_done  # noqa: E402
from exactly_once.ids import TxnRef  # noqa: E402

ANNOUNCED: list[tuple[str, str]] = []


def record(operator, context, summary, interval=None):
    iv = interval or context["dag_run"].logical_date
    ANNOUNCED.append((iv.start.date().isoformat() if hasattr(iv, "start") else iv.date().isoformat(),
                      summary.get("version")))


notes.announce = record
if os.environ.get("OLD"):  # the check before the change: a range run of a failed day went on alone
    real = batching.before_begin

    def before_begin(operator, run, context, **kw):
        held = batching.holder(run.sink, run.interval)
        by = held[1]["batch"] if held else None
        if by and by != batching.batch_id(context, run.interval) and not batching.batch_live(
                run.sink, by, batching.stale_seconds()) and batching.failed_in(run, by) \
                and batching.published(run, held, kw.get("reprocess", False)) is None:
            return
        return real(operator, run, context, **kw)
    batching.before_begin = before_begin

s = C.world()
cfg = dataclasses.replace(C.config(s), stateful=False)
sink, op = C.sink_of(s), C.FakeBegin(s, cfg)
ivs = [C.Interval.daily(d) for d in C.DAYS]
assert claim_intervals(sink, ivs, "b-failed", {}, stale_after=300) == ivs
X = BatchRun(cfg, ivs, batch_id="b-failed", storage_options=s.options())
X.begin()
X.abort()  # what a failed gate leaves
mark_done(sink, "b-failed")

# day 3's backfill run: goes on alone, begins and writes its single attempt
assert C.begin(op, s, cfg, C.DAYS[1], C.ctx(C.DAYS[1], {C.DAYS[1]})) == "went on alone"
run3 = s.run(C.DAYS[1], config=cfg)
b = run3.begin(run={"run_id": "backfill__" + C.DAYS[1]})
txn = TxnRef.from_dict(b["txn"])
F.stage_write(b["spec"], s.options())

# the range run (make backfill's resume) of days 2-4, day 3's run still running
c0 = C.ctx(C.DAYS[0], {C.DAYS[1]}, conf={"eo_batch": {"end": f"{C.DAYS[-1]}T00:00:00+00:00"}}, run_type="manual")
c0["dag_run"].run_id = c0["ti"].run_id = "manual__range"
print("range run:", C.begin(op, s, cfg, C.DAYS[0], c0))

# day 3's run goes on: pre_commit, validate, commit (its own publish would announce)
try:
    run3.pre_commit(txn)
    run3.validate(txn)
    summary = run3.commit(txn)
    record(op, {"dag_run": c0["dag_run"]}, summary, interval=C.Interval.daily(C.DAYS[1]))
    own = "committed " + summary["version"]
except Exception as exc:  # noqa: BLE001
    own = f"FAILED {type(exc).__name__}: {str(exc)[:120]}"
print("day 3's own run:", own)
found = sink.committed(C.Interval.daily(C.DAYS[1]))
pub = found[0].name if found and found[1].published else None
print("day 3 published:", pub, "announced:", ANNOUNCED)
if pub and not any(v == pub for _, v in ANNOUNCED):
    print(f"BREAK: day 3 published as {pub} by the range's batch, never announced (its own run failed: {own})")
else:
    print("OK")
