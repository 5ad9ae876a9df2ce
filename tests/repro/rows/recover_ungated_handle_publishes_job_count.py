"""A pipeline's pre_commit trusts the job's rows_written (sink.require_validation=True at pre_commit), but
the log does not record that the transaction is gated. A third party whose sink handle has
require_validation=False (TwoPhaseCommitSink.open(url) / .at(...) defaults, e.g. gc(sink) or sink.recover()
in a maintenance script) recovers it: it claims a verdict, commits it unvalidated, and the Delta add action
carries numRecords = the job's (wrong) count. Exit 1 when broken."""
import json, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT), str(ROOT / "tests" / "integration"), str(ROOT / "tests")]
import pyarrow.dataset as ds
from test_interval_runs import config, land, month, write
from exactly_once.ids import TxnRef
from exactly_once.protocol.pipeline import IntervalRun
from exactly_once.protocol.transaction import TwoPhaseCommitSink

root = Path(tempfile.mkdtemp())
land(root, "2013-01", "a.csv", [1, 2, 3])
cfg = config(root, table_format="delta")
run = IntervalRun(cfg, month(1), storage_options={})
began = run.begin()
txn = TxnRef.from_dict(began["txn"])
write(began["spec"], reported=999)          # the job misreports: 1 row staged, rows_written 999
run.pre_commit(txn)                         # manifest rows taken from the job (gated sink)
st = run.sink.status_of(txn)
print("pre_committed record has gated:", st.records["pre_committed"].get("gated"))
# ... the worker dies before validate. A maintenance process recovers with a default handle:
other = TwoPhaseCommitSink.open(cfg.table_url)
print("recover:", other.recover())
st = run.sink.status_of(txn)
print("state:", st.state, "verdict:", st.validation)
real = ds.dataset(cfg.table_url, format="parquet", partitioning="hive").to_table().num_rows
stats = []
for f in sorted((Path(cfg.table_url) / "_delta_log").glob("*.json")):
    for line in f.read_text().splitlines():
        a = json.loads(line).get("add")
        if a and a.get("stats"):
            stats.append(json.loads(a["stats"]).get("numRecords"))
print("rows in published files:", real, "| Delta numRecords:", stats, "| manifest rows:", st.manifest.rows)
broken = st.state.name == "COMMITTED" and (999 in stats or st.manifest.rows == 999)
print("BROKEN: unvalidated attempt published with the job's wrong row count" if broken else "held")
sys.exit(1 if broken else 0)
