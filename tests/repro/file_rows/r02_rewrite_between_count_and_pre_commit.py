"""JobContext.finish counts the rows of each file of a partition with Spark (Counts.file_rows) at the end of
the job; pre_commit seals the staged files later (another task). Nothing binds the counts to the bytes they
were counted from (no size, mtime or ETag in file_rows): a late writer (a zombie try of a writer with
deterministic file names) rewriting the same files with another split of the same rows between the count
and pre_commit leaves the names and the sum as they were, so pre_commit takes the stale counts. The
manifest seals the NEW bytes (size, sha256) beside the OLD row counts; the gate sees the right partition
total and passes; the Delta add actions carry numRecords of files that no longer exist. Before 5846c19
pre_commit read these footers itself, at sealing time. Exit 1 when broken."""
import os, sys, tempfile
from pathlib import Path

import _common  # noqa: F401
from _common import begun_delta_month, delta_adds, footers

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from test_interval_runs import config, land, month
from exactly_once.contracts import Counts, JobSpec
from exactly_once.ids import TxnRef
from exactly_once.job import JobContext
from exactly_once.protocol.pipeline import IntervalRun
from exactly_once.storage import storage_for

spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
cfg, run, txn, ctx, out = begun_delta_month(spark)
part = ctx.partitions[0]
pq.write_table(pa.table({"n": list(range(3))}), out / "part-0.parquet")      # the job's own split: 3 + 7
pq.write_table(pa.table({"n": list(range(3, 10))}), out / "part-1.parquet")
files, size = ctx.input_stats()
counts = ctx.finish(Counts(records_in=3, records_out=3, rows_written={part: 10}, input_files=files,
                           input_bytes=size))
print("file_rows counted by finish (Spark):", (Path(ctx.spec.staging_dir) / "_file_rows.json").read_text())

# a late writer rewrites both files (same names, same 10 rows, another split: 8 + 2)
pq.write_table(pa.table({"n": list(range(8))}), out / "part-0.parquet")
pq.write_table(pa.table({"n": list(range(8, 10))}), out / "part-1.parquet")

run.pre_commit(txn)
m = run.sink.status_of(txn).manifest.partitions[part]
print("manifest:", [(f.name, f.size, f.rows) for f in m])
print("footers at pre_commit:", {f.name: pq.ParquetFile(out / f.name).metadata.num_rows for f in m}
      if out.exists() else "(moved)")
try:
    print("validate passed:", run.validate(txn)["passed"])
    print("commit:", run.commit(txn).get("partitions"))
except Exception as exc:  # noqa: BLE001 - since review 33 the gate checks each file's rows: nothing published
    print("refused:", type(exc).__name__, str(exc)[:300])
run.abort(txn)
try:
    adds = delta_adds(cfg.table_url)
except Exception:  # noqa: BLE001 - no Delta commit at all
    adds = {}
real = footers(cfg.table_url, adds) if adds else {}
print("Delta numRecords:", {os.path.basename(p): n for p, n in adds.items()})
print("published rows  :", {os.path.basename(p): n for p, n in real.items()})
broken = any(adds[p] != real[p] for p in adds)
print("BROKEN: the manifest and Delta stats carry counts of bytes that were never published" if broken else "OK")
spark.stop()
sys.exit(1 if broken else 0)
