"""Shared helpers of the file_rows reproducers (not a test)."""
import json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT), str(ROOT / "tests" / "integration"), str(ROOT / "tests")]

import pyarrow.parquet as pq  # noqa: E402


def delta_adds(table_url: str) -> dict[str, int | None]:
    """{add path: stats.numRecords} of every add action in the Delta log (newest wins)."""
    out = {}
    for f in sorted((Path(table_url) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            a = json.loads(line).get("add")
            if a:
                out[a["path"]] = json.loads(a.get("stats") or "{}").get("numRecords")
    return out


def footers(table_url: str, adds: dict[str, int | None]) -> dict[str, int]:
    from urllib.parse import unquote
    return {p: pq.ParquetFile(str(Path(table_url) / unquote(p))).metadata.num_rows for p in adds}


def begun_delta_month(spark=None):
    """A Delta pipeline's January attempt, begun, and its job's context: ``(cfg, run, txn, ctx, out)`` with
    ``out`` the partition's output dir (created)."""
    import tempfile

    from test_interval_runs import config, land, month
    from exactly_once.contracts import JobSpec
    from exactly_once.ids import TxnRef
    from exactly_once.job import JobContext
    from exactly_once.protocol.pipeline import IntervalRun
    from exactly_once.storage import storage_for

    root = Path(tempfile.mkdtemp())
    land(root, "2013-01", "a.csv", [1, 2, 3])
    cfg = config(root, table_format="delta")
    run = IntervalRun(cfg, month(1), storage_options={})
    began = run.begin()
    store, key = storage_for(began["spec"])
    ctx = JobContext(spark, JobSpec.from_json(store.read_bytes(key)))
    out = Path(ctx.spec.data_dir) / ctx.partitions[0]
    out.mkdir(parents=True, exist_ok=True)
    return cfg, run, TxnRef.from_dict(began["txn"]), ctx, out
