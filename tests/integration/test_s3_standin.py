"""The fleet's ``spark-submit`` stand-in (``tools/s3_standin.py``): the real job, on S3, without s3a.

pip's PySpark cannot read or write ``s3://`` (no hadoop-aws jars), so a fleet worker's ``spark-submit`` is
the stand-in: it mirrors the frozen inputs and the previous state into the worker's private temp dir, runs
the real ``spark-submit`` of ``spark_jobs/pv_counts.py`` there and uploads what the job staged. Here two
intervals go begin -> write -> pre_commit -> validate -> commit on the loopback S3 server: the first with the
tests' pure-Python write (no JVM), the second through the stand-in as the SparkSubmitOperator calls it, so
its job reads the first interval's state mirrored from S3. Before that write, files of an earlier attempt
are planted in the staging dir, as a write killed mid-upload leaves them: the upload must replace them the
way an s3a ``mode("overwrite")`` does (Spark names its part files at random). The published rows equal
the reference, nothing of the worker's temp dir is left, the quarantine names the S3 inputs (not the
mirror's copies).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT, make_bucket, need

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from pv_checks import expected_rows  # noqa: E402

from exactly_once.protocol.config import PipelineConfig  # noqa: E402
from exactly_once.ids import Interval, TxnRef  # noqa: E402
from exactly_once.protocol.layout import Source  # noqa: E402
from exactly_once.protocol.pipeline import IntervalRun  # noqa: E402
from exactly_once.storage import storage_for  # noqa: E402
from pv_standin import stage_write  # noqa: E402
from tools.sample_data import generate  # noqa: E402

pytestmark = [pytest.mark.s3, pytest.mark.spark, pytest.mark.timeout(1200)]
DAYS = ["2026-03-01", "2026-03-02"]


def test_the_stand_in_runs_the_real_job_and_a_retry_replaces_the_upload(s3_server, tmp_path):
    need(subprocess.run(["java", "-version"], capture_output=True).returncode == 0, "Java is not installed")
    root = f"s3://{make_bucket(s3_server)}/eo"
    generate(str(tmp_path / "landing"), DAYS, seed=5, events_per_day=200, malformed_rate=0.03)
    store, landing = storage_for(f"{root}/landing")
    for path in sorted((tmp_path / "landing").rglob("*.jsonl")):
        store.write_atomic(store.join(landing, path.relative_to(tmp_path / "landing").as_posix()), path.read_bytes())
    cfg = PipelineConfig(pipeline="pv_pipeline", sink="app_pv", root=root, reports=f"{root}/reports",
                         sources=Source("app_logs", format="json", path="dt={start:%Y-%m-%d}", allow_empty=True),
                         partitions="dt={start:%Y-%m-%d}", application=str(ROOT / "spark_jobs" / "pv_counts.py"),
                         suite=str(ROOT / "expectations" / "app_pv.json"), stateful=True,
                         start=date.fromisoformat(DAYS[0]))
    worker_tmp = tmp_path / "worker-tmp"
    worker_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(worker_tmp), "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",  # as a worker's
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    sink = cfg.sink_handle()
    for day in DAYS:
        run = IntervalRun(cfg, Interval.daily(day))
        began = run.begin(run={"run_id": f"standin__{day}"})
        txn = TxnRef.from_dict(began["txn"])
        st = sink.storage
        if day == DAYS[0]:
            stage_write(began["spec"], {})
            for phase in (run.pre_commit, run.validate, run.commit, run.abort):
                phase(txn)
            continue
        # what a write killed mid-upload leaves: an earlier attempt's part files
        st.write_atomic(st.join(sink.data_dir(txn), f"dt={day}", "part-00000-earlier.snappy.parquet"), b"x")
        st.write_atomic(st.join(sink.staging_dir(txn), "_quarantine", "part-00000-earlier.json"), b"{}\n")
        proc = subprocess.run([sys.executable, "-m", "tools.s3_standin", "--master", "local[1]", "--conf",
                               "spark.sql.session.timeZone=UTC", "--conf", "spark.ui.enabled=false",
                               cfg.application, "--spec", began["spec"]], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        staged = [e.rel for e in st.walk_files(sink.data_dir(txn))]
        assert len([r for r in staged if r.endswith(".parquet")]) == 1, staged  # replaced, not added
        assert not any("earlier" in r for r in staged), staged
        assert not any(r.rsplit("/", 1)[-1].startswith((".", "_SUCCESS")) for r in staged), staged
        quarantine = st.join(sink.staging_dir(txn), "_quarantine")
        records = [json.loads(line) for e in st.walk_files(quarantine)
                   for line in st.read_bytes(st.join(quarantine, e.rel)).splitlines() if line.strip()]
        assert records and all(r.get("file", "").startswith(f"{root}/landing/") for r in records), records[:2]
        run.pre_commit(txn)
        assert run.validate(txn)["passed"]
        run.commit(txn)
        assert run.abort(txn) == "COMMITTED"
    assert not list(worker_tmp.iterdir()), "the stand-in leaves nothing in the worker's temp dir"
    expected = expected_rows(tmp_path, DAYS)
    for day in DAYS:
        rows = []
        for path in sink.live_files(f"dt={day}"):
            with sink.storage.open(path, "rb") as f:
                rows += pq.read_table(f).to_pylist()
        assert {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows} == expected[day], day
        assert len(rows) == len(expected[day])
