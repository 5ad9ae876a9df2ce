"""Run with PYTHONPATH=plugins:tests:. (no JVM). Over spark-submit or this stand-in nothing can interrupt the
query: the fix (BeginOperator.interrupt_batch before the release) acts over Spark Connect only, so this
script still reports the leftovers here; test_the_hosts_last_failed_try_releases_its_intervals_at_once
checks the order (interrupt, then end the attempts; no release when the interrupt fails)."""
"""The host's last try loses its Spark Connect client mid-write (SparkConnectLostError-like) while the
server-side query goes on. batching.release() ends the batch's attempts and marks the batch done AT ONCE,
without interrupting that query (the abort teardown interrupts a single run's queries first:
AbortOperator.interrupt_writes; the batch's own retry does it in _session). The query then recreates
the staging dirs of the ended attempts and the batch's scratch; nobody ends them again (the batch is
done: no finish, no teardown). The waiting runs go on alone and publish meanwhile.
Exit 1 on a break (leftovers of aborted attempts while the table is idle)."""
import os, shutil, sys, tempfile, threading, uuid
from pathlib import Path
from types import SimpleNamespace
os.environ.setdefault("EO_BATCH_STALE_SECONDS", "300")
import batch_helpers
from batch_helpers import pv_oracle, stage_batch_write
from fault_helpers import Driver, Setup, leftovers, sink_of, visible_rows
from tools.sample_data import generate
from exactly_once.airflow import batching
from exactly_once.airflow.operators import BeginOperator
from exactly_once.ids import Interval
from exactly_once.records.txlog import State

D1, DAYS = "2026-01-01", ["2026-01-02", "2026-01-03", "2026-01-04"]
base = Path(tempfile.mkdtemp(prefix="advrel-r2-"))
setup = Setup(root=str(base / "root"), start=D1, reports=str(base / "reports"), env={"EO_REPORTS_DIR": str(base / "reports")})
generate(str(base / "root" / "landing"), [D1, *DAYS], events_per_day=80)
Driver(setup).clean_run(D1)
sink, ivs = sink_of(setup), [Interval.daily(d) for d in DAYS]

go, reached = threading.Event(), threading.Event()
real_compute = batch_helpers._compute
def server_side_compute(*a, **kw):  # the server read its specs; its output lands later
    reached.set(); go.wait(60)
    return real_compute(*a, **kw)
batch_helpers._compute = server_side_compute
query = {}
begin = BeginOperator(task_id="begin", config=setup.config(), begin_task_id="app_pv.begin", retries=0)
def connect_write(url, attempt):
    query["t"] = threading.Thread(target=lambda: query.setdefault("r", stage_batch_write(url, setup.options())))
    query["t"].start(); reached.wait(60)
    raise RuntimeError("SparkConnectLostError: the Spark Connect server sc://spark:15002 stopped answering")
begin.write_batch = connect_write
ti = SimpleNamespace(run_id="backfill__h", try_number=1, max_tries=0, dag_id="pv_pipeline", task_id="app_pv.begin")
ctx = {"ti": ti, "dag_run": SimpleNamespace(run_id="backfill__h", conf={}, clear_number=0)}
try:
    batching.host(begin, setup.run(DAYS[0]), ctx, ivs, reprocess=False)
except RuntimeError as exc:
    print("host failed on its last try:", exc)
bid = batching.batch_id(ctx, ivs[0])
st = {d: {e: s.state.value for e, s in sink.status(Interval.daily(d)).items()} for d in DAYS}
print("after release:", st, "batch live:", batching.batch_live(sink, bid, 300), "leftovers:", leftovers(sink_of(setup)))

for d in DAYS:  # the waiting runs go on alone at once (failed_in: the batch's attempt was aborted)
    Driver(setup).clean_run(d)
go.set(); query["t"].join(60)  # the long server-side batch query ends after the single runs published
print("query wrote:", "r" in query)
ok_rows = visible_rows(setup) == pv_oracle(setup.root, [D1, *DAYS])
left = leftovers(sink_of(setup))
scratch = sink.storage.exists(sink.storage.join(sink.home, "_batches", bid, "scratch"))
print("rows as the oracle:", ok_rows, "| leftovers once idle:", left)
bad = []
if not ok_rows: bad.append("published rows differ from the oracle")
if scratch: bad.append("the released batch's scratch dir was recreated")
if left: bad.append(f"aborted attempts' staging recreated by the un-interrupted query and never ended: {left}")
print("\n".join("BREAK " + b for b in bad) or "held")
shutil.rmtree(base, ignore_errors=True)
sys.exit(1 if bad else 0)
