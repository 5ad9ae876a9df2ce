"""Section ``backfill``: a K-interval backfill of ``pv_pipeline`` vs the naive DAG under the real scheduler.

One :class:`tools.deployment.Deployment` - a fresh PostgreSQL metadata DB, api-server, scheduler
(LocalExecutor, workers forked from the preloaded forkserver, as docker-compose.yaml ships it) and
dag-processor - whose DAGs folder holds ``dags/pv_pipeline.py`` and ``bench/dags/naive_pv.py``. Each DAG
backfills the same K+1 days of landing data with ``airflow backfill create --max-active-runs 1`` (a
stateful pipeline runs in order): first ours, then the naive one. The first interval of each backfill is
the warm-up (forkserver start, first parse in a worker, page cache) and is not timed.

Everything is read from Airflow's own metadata: an interval costs the time from the end of the previous
run to the end of its own (so the backfill's hand-off between runs is included), a run's "between
tasks" time is its wall time minus the durations of its tasks (the scheduler's hand-off from one task to
the next). Afterwards the published ``app_pv`` table must equal the naive outputs row for row.
"""
from __future__ import annotations

import shutil
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.common import ROOT, loadavg, say, stats

from tools.deployment import FINAL, Deployment, postgres_problem
from tools.sample_data import generate

OURS, NAIVE = "pv_pipeline", "naive_pv"


def _timings(deploy: Deployment, dag_id: str) -> dict[str, Any]:
    """Per-interval, per-run and per-task times of the DAG's backfill (warm-up run excluded)."""
    runs = deploy.db.query(
        "select run_id, start_date, end_date from dag_run where dag_id = %s and run_type = 'backfill' "
        "order by data_interval_start", (dag_id,))
    tis = deploy.db.query(
        "select run_id, task_id, queued_dttm, start_date, end_date from task_instance where dag_id = %s "
        "and state = 'success'", (dag_id,))
    timed = runs[1:]
    per_interval = [(end - prev_end).total_seconds() for (_, _, prev_end), (_, _, end) in zip(runs, timed)]
    by_task: dict[str, dict[str, list[float]]] = {}
    between = []
    for run_id, start, end in timed:
        mine = [t for t in tis if t[0] == run_id]
        for _, task, queued, t_start, t_end in mine:
            d = by_task.setdefault(task, {"duration": [], "queued": []})
            d["duration"].append((t_end - t_start).total_seconds())
            d["queued"].append((t_start - queued).total_seconds() if queued else 0.0)
        between.append((end - start).total_seconds() - sum((e - s).total_seconds() for *_, s, e in mine))
    return {
        "intervals": len(timed), "total_seconds": round((timed[-1][2] - runs[0][2]).total_seconds(), 2),
        "per_interval": stats(per_interval), "run_seconds": stats([(e - s).total_seconds() for _, s, e in timed]),
        "between_tasks": stats(between),
        "tasks": {t: {k: round(statistics.median(v), 3) for k, v in d.items()} for t, d in sorted(by_task.items())},
    }


def _jvm_starts(home: Path, dag_id: str) -> list[int]:
    """SparkContext starts per run, from the task logs (spark-submit logs ``Running Spark version``)."""
    counts = {}
    for log in sorted((home / "logs" / f"dag_id={dag_id}").glob("run_id=*/task_id=*/attempt=*.log")):
        run = log.parts[-3]
        counts[run] = counts.get(run, 0) + log.read_text(errors="replace").count("Running Spark version")
    return [counts[r] for r in sorted(counts)]


def _outputs_equal(data: Path, days: list[str]) -> tuple[bool, int]:
    """The published table (a plain reader's view) == the naive DAG's outputs, row for row, every day."""
    import pyarrow.dataset as ds

    cols = ["app_id", "pv", "uv", "cumulative_pv"]
    ours = ds.dataset(str(data / "warehouse" / "app_pv"), format="parquet", partitioning="hive").to_table()
    by_day: dict[str, set[tuple]] = {}
    for r in ours.to_pylist():
        by_day.setdefault(str(r["dt"]), set()).add(tuple(r[c] for c in cols))
    equal, rows = set(by_day) == set(days), 0
    for day in days:
        naive = ds.dataset(str(data / "naive" / "app_pv" / day / "data" / f"dt={day}"), format="parquet")
        theirs = {tuple(r[c] for c in cols) for r in naive.to_table(columns=cols).to_pylist()}
        equal, rows = equal and theirs == by_day.get(day), rows + len(theirs)
    return equal, rows


def _backfill(deploy: Deployment, dag_id: str, days: list[str], timeout: float) -> None:
    deploy.backfill(dag_id, days[0], days[-1])
    end, seen = time.time() + timeout, -1
    while True:
        runs = deploy.runs(dag_id)
        done = sum(s in FINAL for s in runs.values())
        if done != seen:
            seen = done
            say(f"  {dag_id}: {done}/{len(days)} intervals done")
        if len(runs) == len(days) and done == len(days):
            break
        if time.time() > end:
            raise TimeoutError(f"{dag_id} backfill not done after {timeout:.0f}s: {runs}")
        deploy.check_alive()
        time.sleep(2)
    if failed := sorted(d for d, s in runs.items() if s != "success"):
        raise RuntimeError(f"{dag_id} runs failed for {failed}; task logs under {deploy.run_dir}/airflow-home/logs")


def backfill_compare(work: Path, intervals: int, events: int, timeout_per_interval: float = 300) -> dict[str, Any]:
    """Backfill ``intervals`` (+1 warm-up) days with each DAG under the scheduler; see the module docstring."""
    if problem := postgres_problem():
        raise SystemExit(f"the backfill section needs PostgreSQL: {problem}")
    run_dir = work / "backfill"
    shutil.rmtree(run_dir, ignore_errors=True)
    dags = run_dir / "dags"
    dags.mkdir(parents=True)
    (dags / "pv_pipeline.py").symlink_to(ROOT / "dags" / "pv_pipeline.py")
    (dags / "naive_pv.py").symlink_to(ROOT / "bench" / "dags" / "naive_pv.py")
    # the last day is yesterday: unpausing a catchup=False DAG then schedules nothing the backfill lacks
    today = datetime.now(timezone.utc).date()
    days = [(today - timedelta(days=intervals + 1 - i)).isoformat() for i in range(intervals + 1)]
    say(f"backfill: generating {len(days)} days x {events:,} events")
    generate(str(run_dir / "data" / "landing"), days, events_per_day=events, apps=50, users=max(300, events // 10))
    settings = {"AIRFLOW__CORE__DAGS_FOLDER": str(dags), "EO_PV_START": days[0], "EO_RETRIES": "0"}
    res: dict[str, Any] = {"events_per_interval": events, "intervals": intervals, "warmup": 1,
                           "days": [days[0], days[-1]], "loadavg": [loadavg()]}
    with Deployment(run_dir, purpose="bench", settings=settings, log=say) as deploy:
        res["deployment"] = {"id": deploy.id, "metadata_db": deploy.db.name}
        deploy.start([OURS, NAIVE])
        for dag_id in (OURS, NAIVE):
            say(f"backfill: {dag_id}, {len(days)} intervals (the first one is the warm-up)")
            t0 = time.perf_counter()
            _backfill(deploy, dag_id, days, timeout_per_interval * len(days))
            res[dag_id] = {**_timings(deploy, dag_id), "wall_seconds_with_warmup": round(time.perf_counter() - t0, 1),
                           "jvm_starts_per_run": _jvm_starts(run_dir / "airflow-home", dag_id)}
            res["loadavg"].append(loadavg())
    o, n = res[OURS], res[NAIVE]
    res["ratio"] = round(o["total_seconds"] / n["total_seconds"], 3)
    res["ratio_of_medians"] = round(o["per_interval"]["median"] / n["per_interval"]["median"], 3)
    res["overhead_per_interval"] = round((o["total_seconds"] - n["total_seconds"]) / intervals, 2)
    res["outputs_equal"], res["rows_compared"] = _outputs_equal(run_dir / "data", days)
    say(f"  backfill of {intervals}: ours {o['total_seconds']:.0f}s vs naive {n['total_seconds']:.0f}s "
        f"({res['ratio']}x), outputs equal: {res['outputs_equal']}")
    return res
