"""What the ``backfill`` section reads back after a backfill: timings from Airflow's metadata DB, Spark
application starts from the task logs, and the row-for-row comparison of the published table with the
naive DAG's outputs. Everything here only reads; :mod:`bench.backfill` runs the backfills.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.common import stats

from tools.deployment import Deployment


def timings(deploy: Deployment, dag_id: str, backfill_id: int | None = None) -> dict[str, Any]:
    """Per-interval, per-run and per-task times of the DAG's backfill (the first, warm-up run excluded;
    ``backfill_id``: only that backfill's runs, else every backfill run of the DAG).

    An interval costs the time from the end of the previous run to the end of its own (the backfill's
    hand-off between runs included: ``between_runs``); a run's ``between_tasks`` is its wall time minus
    the durations of its tasks (the scheduler's hand-offs from one task to the next, queueing included).
    """
    which = "backfill_id = %s" if backfill_id is not None else "run_type = 'backfill'"
    runs = deploy.db.query(
        f"select run_id, start_date, end_date from dag_run where dag_id = %s and {which} "
        "order by data_interval_start", (dag_id, backfill_id) if backfill_id is not None else (dag_id,))
    ids = {r[0] for r in runs}
    tis = [t for t in deploy.db.query(
        "select run_id, task_id, queued_dttm, start_date, end_date from task_instance where dag_id = %s "
        "and state = 'success'", (dag_id,)) if t[0] in ids]
    timed = runs[1:]
    per_interval = [(end - prev_end).total_seconds() for (_, _, prev_end), (_, _, end) in zip(runs, timed)]
    gaps = [(start - prev_end).total_seconds() for (_, _, prev_end), (_, start, _) in zip(runs, timed)]
    by_task: dict[str, dict[str, list[float]]] = {}
    between, tasks_sum = [], []
    for run_id, start, end in timed:
        mine = [t for t in tis if t[0] == run_id]
        for _, task, queued, t_start, t_end in mine:
            d = by_task.setdefault(task, {"duration": [], "queued": []})
            d["duration"].append((t_end - t_start).total_seconds())
            d["queued"].append((t_start - queued).total_seconds() if queued else 0.0)
        running = sum((e - s).total_seconds() for *_, s, e in mine)
        tasks_sum.append(running)
        between.append((end - start).total_seconds() - running)
    return {
        "intervals": len(timed), "total_seconds": round((timed[-1][2] - runs[0][2]).total_seconds(), 2),
        "per_interval": stats(per_interval), "run_seconds": stats([(e - s).total_seconds() for _, s, e in timed]),
        "tasks_running": stats(tasks_sum), "between_tasks": stats(between), "between_runs": stats(gaps),
        "tasks": {t: {k: round(statistics.median(v), 3) for k, v in d.items()} for t, d in sorted(by_task.items())},
    }


def spark_app_starts(home: Path, dag_id: str) -> list[int]:
    """Spark applications started per run, from the task logs (spark-submit logs ``Running Spark version``;
    a Spark Connect client starts none)."""
    counts: dict[str, int] = {}
    for log in sorted((home / "logs" / f"dag_id={dag_id}").glob("run_id=*/task_id=*/attempt=*.log")):
        run = log.parts[-3]
        counts[run] = counts.get(run, 0) + log.read_text(errors="replace").count("Running Spark version")
    return [counts[r] for r in sorted(counts)]


COLUMNS = ["app_id", "pv", "uv", "cumulative_pv"]


def table_rows(path: Path) -> dict[str, set[tuple]]:
    """``{day: rows}`` of a Parquet table partitioned by ``dt=<day>`` under ``path``, as a plain hive reader sees it."""
    import pyarrow.dataset as ds

    out: dict[str, set[tuple]] = {}
    for r in ds.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pylist():
        out.setdefault(str(r["dt"]), set()).add(tuple(r[c] for c in COLUMNS))
    return out


def ours_rows(data: Path) -> dict[str, set[tuple]]:
    """``{day: rows}`` of the published ``app_pv`` table, as a plain hive reader sees it."""
    return table_rows(data / "warehouse" / "app_pv")


def naive_rows(data: Path, days: list[str]) -> dict[str, set[tuple]]:
    """``{day: rows}`` the naive DAG wrote (one directory per day)."""
    import pyarrow.dataset as ds

    out = {}
    for day in days:
        table = ds.dataset(str(data / "naive" / "app_pv" / day / "data" / f"dt={day}"), format="parquet")
        out[day] = {tuple(r[c] for c in COLUMNS) for r in table.to_table(columns=COLUMNS).to_pylist()}
    return out


def oracle_rows(landing: Path, days: list[str]) -> dict[str, set[tuple]]:
    """``{day: rows}`` of the test oracle (``tests/reference_pv.py``): the pv computation in plain Python
    over the same landing files, the state carried from day to day."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from reference_pv import compute

    out, state = {}, {}
    for day in days:
        files = sorted(str(p) for p in (landing / "app_logs" / f"dt={day}").rglob("*") if p.is_file())
        rows, state, _ = compute(files, state)
        out[day] = {tuple(r[c] for c in COLUMNS) for r in rows}
    return out


def same_rows(got: dict[str, set[tuple]], want: dict[str, set[tuple]], days: list[str]) -> tuple[bool, int]:
    """``(got == want on every day, rows compared)``."""
    return set(got) == set(days) and all(got.get(d) == want[d] for d in days), sum(len(want[d]) for d in days)


def outputs_equal(data: Path, days: list[str]) -> tuple[bool, int]:
    """The published table (a plain reader's view) == the naive DAG's outputs, row for row, every day."""
    return same_rows(ours_rows(data), naive_rows(data, days), days)


def reference_equal(data: Path, landing: Path, days: list[str]) -> tuple[bool, int]:
    """The published table == the test oracle's rows, every day (a backfill of ours alone)."""
    return same_rows(ours_rows(data), oracle_rows(landing, days), days)


def where_time_goes(r: dict[str, Any]) -> dict[str, float]:
    """One interval of a DAG split by medians: each task's running time, the hand-offs between its tasks
    (queueing + scheduling) and between runs. Medians do not add up exactly to the interval's median."""
    out = {f"task {t.split('.')[-1]}": v["duration"] for t, v in r["tasks"].items()}
    out["hand-offs between tasks"] = r["between_tasks"]["median"]
    out["hand-off between runs"] = r["between_runs"]["median"]
    return {k: round(v, 2) for k, v in out.items()}
