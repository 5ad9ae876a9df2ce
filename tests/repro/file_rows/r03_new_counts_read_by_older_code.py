"""A counts document with file_rows (what JobContext.finish of 5846c19 writes for a partition of several
files) read by the previous release's Airflow side (commit c669cd7, same CONTRACT_VERSION = 1): during a
rolling upgrade (a Celery worker still on the old wheel runs pre_commit/validate of a run whose write ran
on an upgraded one) or with EO_SPARK_SHIP_LIBRARY=never and a newer package on the cluster. The old
Counts.from_dict refuses unknown fields, so the old gate fails an interval that is correct; the contract
version does not say the document changed. Exit 1 when broken."""
import json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OLD = Path(tempfile.mkdtemp()) / "old"
OLD.mkdir()
subprocess.run(f"git -C {ROOT} archive c669cd7 plugins | tar -x -C {OLD}", shell=True, check=True)
work = Path(tempfile.mkdtemp())

PHASE = r'''
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], %(tests)r]
import exactly_once
from test_interval_runs import config, land, month
from exactly_once.ids import TxnRef
from exactly_once.protocol.pipeline import IntervalRun
root = Path(%(work)r)
cfg = config(root, table_format="delta")
run = IntervalRun(cfg, month(1), storage_options={})
phase = sys.argv[2]
print(phase, "runs", exactly_once.__file__)
if phase == "begin":
    land(root, "2013-01", "a.csv", [1, 2, 3])
    (root / "began.json").write_text(json.dumps(run.begin()))
elif phase == "write":
    import pyarrow as pa, pyarrow.parquet as pq
    from exactly_once.contracts import Counts, JobSpec
    from exactly_once.job import JobContext
    from exactly_once.storage import storage_for
    began = json.loads((root / "began.json").read_text())
    store, key = storage_for(began["spec"])
    ctx = JobContext(None, JobSpec.from_json(store.read_bytes(key)))
    part = ctx.partitions[0]
    out = Path(ctx.spec.data_dir) / part
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"n": [1, 2]}), out / "part-0.parquet")
    pq.write_table(pa.table({"n": [3]}), out / "part-1.parquet")
    files, size = ctx.input_stats()
    # exactly what finish() counts with Spark for this partition (the footers)
    from exactly_once.job.files import write_file_rows  # what finish() writes after counting with Spark
    write_file_rows(ctx._store, ctx._staging, {part: {"part-0.parquet": 2, "part-1.parquet": 1}})
    ctx.finish(Counts(records_in=3, records_out=3, rows_written={part: 3}, input_files=files, input_bytes=size))
else:
    began = json.loads((root / "began.json").read_text())
    txn = TxnRef.from_dict(began["txn"])
    try:
        print("pre_commit:", {k: v for k, v in run.pre_commit(txn).items() if k != "counts"})
        print("validate:", run.validate(txn)["passed"])
        print("commit:", run.commit(txn).get("partitions"))
        print("RESULT published")
    except Exception as exc:
        print("RESULT failed:", type(exc).__name__, str(exc)[:400])
    finally:
        run.abort(txn)
''' % {"tests": str(ROOT / "tests" / "integration"), "work": str(work)}
script = work / "phase.py"
script.write_text(PHASE)
py = sys.executable
env = {**os.environ, "PYTHONPATH": ""}
outs = []
for plugins, phase in ((OLD / "plugins", "begin"), (ROOT / "plugins", "write"), (OLD / "plugins", "finish")):
    p = subprocess.run([py, str(script), str(plugins), phase], capture_output=True, text=True, env=env)
    outs.append(p.stdout)
    print(p.stdout.strip() or p.stderr[-2000:])
broken = "RESULT failed" in outs[-1]
print("BROKEN: the previous release fails a correct interval on a new counts document" if broken else "OK")
sys.exit(1 if broken else 0)
