"""The README's "Use it in your own DAG" examples run as written.

The code blocks that start with ``# dags/...`` or ``# spark_jobs/...`` are written into a fresh project;
the DAG files are imported (Airflow builds the DAG and the group checks the schedule), and their
intervals run through IntervalRun with the example jobs in the shared Spark session.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from exactly_once.errors import OrderingError
from exactly_once.ids import Interval, TxnRef
from exactly_once.job import JobContext
from exactly_once.protocol.pipeline import IntervalRun

README = Path(__file__).resolve().parents[2] / "README.md"
pytestmark = pytest.mark.spark


def blocks() -> dict[str, str]:
    """``{relative path: code}`` of the README's file blocks."""
    out = {}
    for code in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S):
        first = code.splitlines()[0]
        if first.startswith(("# dags/", "# spark_jobs/")):
            out[first[2:].strip()] = code
    return out


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"readme_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("EO_REPORTS_DIR", str(tmp_path / "reports"))
    files = blocks()
    assert set(files) == {"dags/orders_daily.py", "spark_jobs/store_revenue.py", "dags/store_totals.py",
                          "spark_jobs/store_totals.py"}
    for rel, code in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(code)
    first = [f"o{i},s1,1.0" for i in range(20)] + [f"p{i},s2,2.5" for i in range(4)] + ["q0,,1.0"]  # 4% bad
    for day, rows in (("2026/01/01", first), ("2026/01/02", ["o99,s1,2.5"])):
        folder = tmp_path / "data" / "landing" / "orders" / day
        folder.mkdir(parents=True)
        (folder / "part-0.csv").write_text("order_id,store,amount\n" + "\n".join(rows) + "\n")
    return tmp_path


def run_day(cfg: Any, job: Any, spark: Any, day: str) -> None:
    run = IntervalRun(cfg, Interval.daily(day), storage_options={})
    began = run.begin()
    txn = TxnRef.from_dict(began["txn"])
    try:
        ctx = JobContext.open(spark, began["spec"])
        ctx.finish(job.compute(ctx))
        run.pre_commit(txn)
        run.validate(txn)
        run.commit(txn)
    finally:
        run.abort(txn)


def rows(cfg: Any) -> dict[tuple, tuple]:
    table = ds.dataset(cfg.table_url, format="parquet", partitioning="hive").to_table().to_pylist()
    return {(str(r.pop("dt")), r.pop("store")): tuple(r.values()) for r in table}


def test_the_stateless_example(project, spark):
    cfg = load(project / "dags" / "orders_daily.py").ORDERS
    assert cfg.application == str(project / "spark_jobs" / "store_revenue.py")
    job = load(project / "spark_jobs" / "store_revenue.py")
    run_day(cfg, job, spark, "2026-01-01")
    assert rows(cfg) == {("2026-01-01", "s1"): (20, 20.0), ("2026-01-01", "s2"): (4, 10.0)}
    counts = cfg.sink_handle().committed(Interval.daily("2026-01-01"))[1].records["pre_committed"]["counts"]
    assert (counts["records_in"], counts["records_out"], counts["records_rejected"]) == (25, 24, 1)


def test_the_stateful_example_and_its_first_run(project, spark):
    cfg = load(project / "dags" / "store_totals.py").TOTALS
    job = load(project / "spark_jobs" / "store_totals.py")
    with pytest.raises(OrderingError, match="ends at 2026-01-02T00:00:00"):
        run_day(cfg, job, spark, "2026-01-02")
    run_day(cfg, job, spark, "2026-01-01")  # the first interval: no state
    run_day(cfg, job, spark, "2026-01-02")
    assert rows(cfg) == {("2026-01-01", None): (1.0,), ("2026-01-01", "s1"): (20.0,),
                         ("2026-01-01", "s2"): (10.0,), ("2026-01-02", None): (1.0,),
                         ("2026-01-02", "s1"): (22.5,), ("2026-01-02", "s2"): (10.0,)}
