"""REAL Spark (local[1]): a batch of pv_pipeline days that ALL have no input file (allow_empty=True, as
the demo DAG declares it). A single run of each day commits an empty version; the batch's write job
fails (pv_counts.compute_batch tags an empty createDataFrame, which has no _metadata column), on every
retry - a backfill over a quiet stretch never goes through the batch."""
import shutil
from pathlib import Path

from _world import DAYS, report, world

from eo_testing import load_module
from pyspark.sql import SparkSession

from exactly_once.protocol.batch import BatchRun
from exactly_once.contracts import BatchSpec
from exactly_once.ids import Interval
from exactly_once.job import execute_batch
from exactly_once.storage import storage_for

s = world()
for d in DAYS:
    shutil.rmtree(Path(s.root) / "landing" / "app_logs" / f"dt={d}")
pv = load_module("pv_counts_advb", Path(__file__).resolve().parents[3] / "spark_jobs" / "pv_counts.py")
spark = (SparkSession.builder.master("local[1]").appName("advb").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC").getOrCreate())
try:
    batch = BatchRun(s.config(), [Interval.daily(d) for d in DAYS], batch_id="bE", run={"run_id": "r"})

    def write(url):
        store, key = storage_for(url)
        execute_batch(pv.compute_batch, spark, BatchSpec.from_json(store.read_bytes(key)))

    try:
        out = batch.run_all(write)
        print("batch:", [(o.status, o.detail[:80]) for o in out])
    except Exception as exc:  # noqa: BLE001
        print("BATCH WRITE FAILED:", type(exc).__name__, str(exc).splitlines()[0][:300])
    report(s, "all-empty batch")
finally:
    spark.stop()
