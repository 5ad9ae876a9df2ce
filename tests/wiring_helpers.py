"""What the Airflow wiring tests (``test_airflow_wiring``, ``test_airflow_phase_tasks``) share: a pipeline config
of the DAG being built, an hourly DAG, and the context Airflow would hand an operator (a task instance's identity
and XCom) - operators are executed without a scheduler or a JVM."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from airflow.sdk import DAG, CronDataIntervalTimetable

from exactly_once.airflow import exactly_once_group
from exactly_once.airflow.operators import BeginOperator
from exactly_once.protocol.config import PipelineConfig
from exactly_once.ids import Interval
from exactly_once.protocol.layout import Source


START = datetime(2013, 1, 1, tzinfo=timezone.utc)


HOURLY = "dt={start:%Y-%m-%d}/hour={start:%H}"


def config(root: Any, sink: str = "t", partitions: str = HOURLY, **kw: Any) -> PipelineConfig:
    """A pipeline of the DAG being built (its pipeline is the DAG id), else of ``daily`` (the DAG the tests
    build for a config made first)."""
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    kw.setdefault("sources", Source("s", format="csv"))
    kw.setdefault("pipeline", getattr(DagContext.get_current(), "dag_id", "daily"))
    return PipelineConfig(sink=sink, root=str(root), application="/job.py", partitions=partitions, **kw)


def hourly_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"), start_date=START)


class FakeTI:
    """What the operators use of a task instance: identity and XCom."""

    def __init__(self, run_id: str, xcom: dict[str, Any] | None = None) -> None:
        self.run_id, self.try_number, self.dag_id, self.task_id = run_id, 1, "d", "t.begin"
        self.xcom = xcom or {}
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcom.get(task_ids) if key == "return_value" else self.pushed.get(key)  # another key: its own

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def get_task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str]) -> dict[str, Any]:
        return {run_id: {t: "success" for t in task_ids} for run_id in run_ids}  # what ran before this task


def context(run_id: str, iv: Interval, conf: dict[str, Any] | None = None, **xcom: Any) -> dict[str, Any]:
    return {"ti": FakeTI(run_id, xcom), "data_interval_start": iv.start, "data_interval_end": iv.end,
            "dag_run": SimpleNamespace(conf=conf or {})}


def one_csv_day(tmp_path: Any) -> tuple[PipelineConfig, Interval, BeginOperator]:
    """A daily pipeline with one landing file for 2013-01-01: ``(config, interval, its begin operator)``."""
    landing = tmp_path / "landing" / "s" / "dt=2013-01-01"
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text("x\n1\n")
    cfg = config(tmp_path, partitions="dt={start:%Y-%m-%d}", sources=Source("s", format="csv", allow_empty=True))
    return cfg, Interval.daily("2013-01-01"), BeginOperator(task_id="begin", config=cfg, begin_task_id="t.begin")


def begun_daily_with_output(tmp_path, cfg: PipelineConfig, run_id: str, xs: list[int]):
    """A daily DAG of ``cfg`` whose begin task ran for 2013-01-01 (one landing file), with one Parquet
    file of column ``x`` = ``xs`` staged as the write's output: ``(iv, sink, tasks, began, txn)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from exactly_once.ids import TxnRef

    landing = tmp_path / "landing" / "s" / "dt=2013-01-01"
    landing.mkdir(parents=True)
    (landing / "a.csv").write_text("x\n1\n")
    with DAG("daily", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=START) as dag:
        exactly_once_group(cfg)
    iv, sink, tasks = Interval.daily("2013-01-01"), cfg.sink_handle(), dag.task_dict
    began = tasks["t.begin"].execute(context(run_id, iv))
    txn = TxnRef.from_dict(began["txn"])
    out = os.path.join(sink.data_dir(txn), "dt=2013-01-01")
    os.makedirs(out)
    pq.write_table(pa.table({"x": xs}), os.path.join(out, "part-0.parquet"))
    return iv, sink, tasks, began, txn
