"""A job hands over its own Counts.file_rows (JobContext.finish keeps them: "Unless the job gave them").
They name exactly the staged files and add up to rows_written, but the split is wrong (a stale count, a
bug in the job). pre_commit takes them without reading one footer; the gate compares only per-partition
totals with rows_written, so it passes; the commit publishes Delta add actions whose stats.numRecords
contradict the files they describe. Exit 1 when broken."""
import sys, tempfile
from pathlib import Path

import _common  # noqa: F401  (sys.path)
from _common import begun_delta_month, delta_adds, footers

import pyarrow as pa
import pyarrow.parquet as pq
from test_interval_runs import config, land, month
from exactly_once.contracts import Counts, JobSpec
from exactly_once.ids import TxnRef
from exactly_once.job import JobContext
from exactly_once.protocol.pipeline import IntervalRun
from exactly_once.storage import storage_for

cfg, run, txn, ctx, out = begun_delta_month(None)
part = ctx.partitions[0]
pq.write_table(pa.table({"n": [1, 2, 3]}), out / "part-a.parquet")           # 3 rows
pq.write_table(pa.table({"n": [4, 5, 6, 7, 8, 9, 10]}), out / "part-b.parquet")  # 7 rows
files, size = ctx.input_stats()
import json
from exactly_once.contracts import FILE_ROWS
(Path(ctx.spec.staging_dir) / FILE_ROWS).write_text(json.dumps({part: {"part-a.parquet": 7, "part-b.parquet": 3}}))
ctx.finish(Counts(records_in=3, records_out=3, rows_written={part: 10}, input_files=files, input_bytes=size))
# (the job's own side file: a wrong split, right sum; since review 33 the gate checks it against the files)

print("pre_commit:", {k: v for k, v in run.pre_commit(txn).items() if k != "counts"})
print("manifest rows per file:", {f.name: f.rows for f in run.sink.status_of(txn).manifest.partitions[part]})
try:
    print("validate passed:", run.validate(txn)["passed"])
    print("commit:", run.commit(txn).get("partitions"))
except Exception as exc:  # noqa: BLE001 - the gate refuses the split: nothing is published
    print("refused:", type(exc).__name__, str(exc)[:300])
run.abort(txn)

adds = delta_adds(cfg.table_url)
real = footers(cfg.table_url, adds)
print("Delta add stats.numRecords:", adds)
print("rows in those files (footers):", real)
try:
    from deltalake import DeltaTable
    import pyarrow as pa
    acts = pa.table(DeltaTable(cfg.table_url).get_add_actions(flatten=True))
    print("delta-rs get_add_actions num_records:", dict(zip(acts.column("path").to_pylist(),
                                                          acts.column("num_records").to_pylist())))
    from deltalake import QueryBuilder
    got = pa.table(QueryBuilder().register("t", DeltaTable(cfg.table_url)).execute("SELECT * FROM t LIMIT 5").read_all())
    print("delta-rs SELECT * FROM t LIMIT 5 returned", got.num_rows, "rows (the table holds 10)")
except Exception as exc:  # noqa: BLE001
    print("deltalake:", exc)
broken = any(adds[p] != real[p] for p in adds)  # (nothing published: no add action at all)
print("BROKEN: published Delta stats disagree with the published files" if broken else "OK")
sys.exit(1 if broken else 0)
