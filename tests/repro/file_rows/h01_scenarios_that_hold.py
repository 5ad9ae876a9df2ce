"""Scenarios of the file_rows surface that held (each prints OK or BROKEN with evidence), with a real local
Spark count in JobContext.finish and the real pre_commit / gate / Delta commit of IntervalRun:
 A  names with spaces, '%', '+', '=', unicode, a 0-row file, a partition value with ':' and '+'
 B  a 0-byte "x.parquet" beside good files (Spark skips it: counted 0, sums up) - the gate must stop it
 C  a late writer adds a file between the count and pre_commit
 D  a late writer removes a file between the count and pre_commit
 E  a late writer rewrites a file between pre_commit and commit
 F  an older counts document (no file_rows) - footers read, published right
Exit 1 if any broke."""
import os, sys, tempfile
from pathlib import Path

import _common  # noqa: F401
from _common import delta_adds, footers

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from test_interval_runs import config, land, month
from exactly_once.contracts import Counts, JobSpec
from exactly_once.ids import TxnRef
from exactly_once.job import JobContext
from exactly_once.protocol.pipeline import IntervalRun
from exactly_once.storage import storage_for

spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
bad = []


def interval(files: dict[str, int | None], *, partitions="month={start:%Y-%m}", after_count=None,
             after_pre_commit=None, use_spark=True):
    root = Path(tempfile.mkdtemp())
    land(root, "2013-01", "a.csv", [1])
    cfg = config(root, table_format="delta", partitions=partitions)
    run = IntervalRun(cfg, month(1), storage_options={})
    began = run.begin()
    txn = TxnRef.from_dict(began["txn"])
    store, key = storage_for(began["spec"])
    ctx = JobContext(spark if use_spark else None, JobSpec.from_json(store.read_bytes(key)))
    part = ctx.partitions[0]
    out = Path(ctx.spec.data_dir) / part
    out.mkdir(parents=True, exist_ok=True)
    for name, n in files.items():
        if n is None:
            (out / name).write_bytes(b"")
        else:
            pq.write_table(pa.table({"n": pa.array(list(range(n)), pa.int64())}), out / name)
    fi, size = ctx.input_stats()
    counts = ctx.finish(Counts(records_in=1, records_out=1, rows_written={part: sum(n or 0 for n in files.values())},
                               input_files=fi, input_bytes=size))
    import json as _json
    side = Path(ctx.spec.staging_dir) / "_file_rows.json"
    seen = _json.loads(side.read_text()) if side.exists() else {}
    if after_count:
        after_count(out)
    outcome = "published"
    try:
        run.pre_commit(txn)
        if after_pre_commit:
            after_pre_commit(out)
        run.validate(txn)
        run.commit(txn)
    except Exception as exc:  # noqa: BLE001
        outcome = f"refused ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
    finally:
        try:
            run.abort(txn)
        except Exception:  # noqa: BLE001
            pass
    adds = delta_adds(cfg.table_url) if (Path(cfg.table_url) / "_delta_log").exists() else {}
    real = footers(cfg.table_url, adds) if adds else {}
    side = Path(ctx.spec.staging_dir) / "_file_rows.json"  # (gone once committed: read what pre_commit saw)
    return seen.get(part), outcome, adds, real


def check(label, ok, evidence):
    print(f"{label}: {'OK' if ok else 'BROKEN'} - {evidence}")
    if not ok:
        bad.append(label)


names = {"sp ace.parquet": 2, "p%41.parquet": 3, "pA.parquet": 4, "x=y+z.parquet": 5, "üñí €.parquet": 6,
         "empty.parquet": 0}
fr, outcome, adds, real = interval(names, partitions="k={start:%Y-%m}T00:00+00:00")
check("A special names", outcome == "published" and adds == real and fr == names,
      f"file_rows={fr}; {outcome}; stats==footers: {adds == real}")

fr, outcome, adds, real = interval({"a.parquet": 3, "b.parquet": 4, "zero.parquet": None})
check("B 0-byte parquet", outcome != "published" and not adds, f"file_rows={fr}; {outcome}")

fr, outcome, adds, real = interval({"a.parquet": 3, "b.parquet": 4},
                                   after_count=lambda d: pq.write_table(pa.table({"n": [9]}), d / "late.parquet"))
check("C file added after count", outcome != "published" or adds == real, f"file_rows={fr}; {outcome}")

fr, outcome, adds, real = interval({"a.parquet": 3, "b.parquet": 4}, after_count=lambda d: (d / "b.parquet").unlink())
check("D file removed after count", outcome != "published" or adds == real, f"file_rows={fr}; {outcome}")


def rewrite(d):
    target = next(p for p in Path(d).parent.parent.parent.rglob("a.parquet"))
    pq.write_table(pa.table({"n": [7, 7, 7]}), target)  # same rows, other bytes


fr, outcome, adds, real = interval({"a.parquet": 3, "b.parquet": 4}, after_pre_commit=rewrite)
check("E rewrite after pre_commit", outcome != "published", f"file_rows={fr}; {outcome}")

fr, outcome, adds, real = interval({"a.parquet": 3, "b.parquet": 4}, use_spark=False)
check("F counts without file_rows", outcome == "published" and adds == real and fr is None,
      f"file_rows={fr}; {outcome}; stats={sorted(adds.values())} footers={sorted(real.values())}")
spark.stop()
print(f"BROKEN: {bad}" if bad else "OK: every scenario held")
sys.exit(1 if bad else 0)
