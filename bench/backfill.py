"""Section ``backfill``: backfills of ``pv_pipeline`` and of a naive one-task DAG under the real scheduler,
the write phase over Spark Connect and over spark-submit.

Two modes, each one :class:`tools.deployment.Deployment` (a fresh PostgreSQL metadata DB, api-server,
scheduler - LocalExecutor, workers forked from the preloaded forkserver, as docker-compose.yaml ships it -
and dag-processor) over the SAME landing data (generated once, ``events`` per day):

* ``connect``: a Spark Connect server (:mod:`tools.spark_connect`, ``local[*]``) started by this section;
  ``EO_SPARK_REMOTE`` makes ``pv_pipeline``'s write phase its client (no DAG change), and the naive DAG is
  ``bench/dags/naive_pv_connect.py`` (the provider's ``PySparkOperator`` on a ``spark_connect`` connection);
* ``submit``: ``pv_pipeline`` with spark-submit, and ``bench/dags/naive_pv.py`` (one SparkSubmitOperator).

In each mode both DAGs (or only ours: ``dags=("ours",)``, e.g. for the 365-interval run) backfill the first
N+1 days with ``airflow backfill create --max-active-runs 1`` (a stateful pipeline runs in order): first
ours, then the naive one (or the other way round). The first
interval of each backfill is the warm-up (forkserver start, first parse in a worker, the server's first
query, page cache) and is not timed.
Timings come from Airflow's metadata DB (:mod:`bench.backfill_metrics`); afterwards each mode's published
``app_pv`` table must equal its naive DAG's outputs row for row (without the naive DAG: the test oracle's,
``tests/reference_pv.py``, computed in plain Python from the same landing files).
"""
from __future__ import annotations

import json
import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.backfill_metrics import (naive_rows, oracle_rows, ours_rows, outputs_equal, same_rows, spark_app_starts,
                                    timings, where_time_goes)
from bench.common import ROOT, landing_days, loadavg, say, wait_for_runs

from tools import spark_connect
from tools.deployment import Deployment, free_port, postgres_problem

OURS = "pv_pipeline"
NAIVE = {"connect": "naive_pv_connect", "submit": "naive_pv"}
MODES = ("connect", "submit")
DAGS = ("ours", "naive")
YEAR = 365


def _backfill(deploy: Deployment, dag_id: str, days: list[str], timeout: float) -> None:
    deploy.backfill(dag_id, days[0], days[-1])
    wait_for_runs(deploy, dag_id, lambda: deploy.runs(dag_id), len(days), timeout, poll=2)


def _mode(work: Path, mode: str, landing: Path, days: list[str], timeout_per_interval: float,
          naive_first: bool, dags: tuple[str, ...] = DAGS, idle_sleep: float | None = None) -> dict[str, Any]:
    """Backfill ``days`` (the first one is the warm-up) with ours and/or the naive DAG of ``mode``
    (``idle_sleep``: the scheduler's ``scheduler_idle_sleep_time``, default Airflow's 1 s)."""
    run_dir = work / f"backfill-{mode}"
    shutil.rmtree(run_dir, ignore_errors=True)
    folder = run_dir / "dags"
    folder.mkdir(parents=True)
    (folder / "pv_pipeline.py").symlink_to(ROOT / "dags" / "pv_pipeline.py")
    naive = NAIVE[mode]
    (folder / f"{naive}.py").symlink_to(ROOT / "bench" / "dags" / f"{naive}.py")
    (run_dir / "data").mkdir()
    (run_dir / "data" / "landing").symlink_to(landing)  # the same landing files in every mode
    # per interval (EO_PV_MAX_BATCH=1): this section measures what each scheduled interval costs; the
    # batched path (one job for a whole backfill) is section ``batched`` (bench/backfill_cost.py)
    settings = {"AIRFLOW__CORE__DAGS_FOLDER": str(folder), "EO_PV_START": days[0], "EO_PV_END": days[-1],
                "EO_RETRIES": "0",
                "EO_PV_MAX_BATCH": "1"}
    if idle_sleep is not None:
        settings["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] = str(idle_sleep)
    res: dict[str, Any] = {"intervals": len(days) - 1, "days": [days[0], days[-1]], "loadavg": [loadavg()],
                           "scheduler_idle_sleep_time": idle_sleep if idle_sleep is not None else 1.0}
    with ExitStack() as stack:
        if mode == "connect":
            server = spark_connect.Server(free_port(), run_dir / "spark-connect")
            t0 = time.perf_counter()
            url = spark_connect.start(server)
            stack.callback(spark_connect.stop, server)
            res["server"] = {"url": url, "master": server.master, "start_seconds": round(time.perf_counter() - t0, 1)}
            settings["EO_SPARK_REMOTE"] = url
            settings["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = json.dumps(
                {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port})
        deploy = stack.enter_context(Deployment(run_dir, purpose="bench", settings=settings, log=say))
        res["deployment"] = {"id": deploy.id, "metadata_db": deploy.db.name}
        order = [naive, OURS] if naive_first else [OURS, naive]
        res["order"] = [d for d in order if ("ours" if d == OURS else "naive") in dags]
        deploy.start(res["order"])
        for dag_id in res["order"]:
            say(f"backfill ({mode}): {dag_id}, {len(days)} intervals (the first one is the warm-up)")
            t0 = time.perf_counter()
            _backfill(deploy, dag_id, days, timeout_per_interval * len(days))
            r = timings(deploy, dag_id)
            res[dag_id] = {**r, "wall_seconds_with_warmup": round(time.perf_counter() - t0, 1),
                           "spark_app_starts_per_run": spark_app_starts(run_dir / "airflow-home", dag_id),
                           "where_time_goes": where_time_goes(r)}
            res["loadavg"].append(loadavg())
    res["naive_dag"] = naive
    if len(res["order"]) == 1:  # one DAG alone: its outputs checked against the test oracle
        dag = res["order"][0]
        res["vs_oracle"] = True
        got = ours_rows(run_dir / "data") if dag == OURS else naive_rows(run_dir / "data", days)
        res["outputs_equal"], res["rows_compared"] = same_rows(got, oracle_rows(landing, days), days)
        say(f"  backfill ({mode}) of {res['intervals']}: {dag} {res[dag]['total_seconds']:.0f}s "
            f"({res[dag]['wall_seconds_with_warmup'] / 60:.1f} min end to end), outputs == oracle: "
            f"{res['outputs_equal']}")
        return res
    o, n = res[OURS], res[naive]
    res["ratio"] = round(o["total_seconds"] / n["total_seconds"], 3)
    res["ratio_of_medians"] = round(o["per_interval"]["median"] / n["per_interval"]["median"], 3)
    res["overhead_per_interval"] = round((o["total_seconds"] - n["total_seconds"]) / res["intervals"], 2)
    res["outputs_equal"], res["rows_compared"] = outputs_equal(run_dir / "data", days)
    say(f"  backfill ({mode}) of {res['intervals']}: ours {o['total_seconds']:.0f}s vs naive "
        f"{n['total_seconds']:.0f}s ({res['ratio']}x), outputs equal: {res['outputs_equal']}")
    return res


def _goals(modes: dict[str, Any]) -> dict[str, Any]:
    """Issue 16's goals, from the measured medians (the 365-interval figure is an estimate unless run)."""
    out: dict[str, Any] = {}
    if "connect" in modes and OURS in modes["connect"]:
        c = modes["connect"][OURS]
        out["ours_connect_per_interval_median"] = c["per_interval"]["median"]
        out["ours_connect_year_estimate_minutes"] = round(c["total_seconds"] / c["intervals"] * YEAR / 60, 1)
        if c["intervals"] + 1 >= YEAR:  # measured: the backfill's wall time, warm-up interval included
            out["year_measured_minutes"] = round(c["wall_seconds_with_warmup"] / 60, 1)
            out["year_intervals"] = c["intervals"] + 1
    if "submit" in modes and NAIVE["submit"] in modes["submit"]:
        s = modes["submit"]
        out["naive_submit_per_interval_median"] = s[NAIVE["submit"]]["per_interval"]["median"]
    if "submit" in modes and OURS in modes["submit"]:
        s = modes["submit"]
        out["ours_submit_year_estimate_minutes"] = round(
            s[OURS]["total_seconds"] / s[OURS]["intervals"] * YEAR / 60, 1)
    if "ours_connect_per_interval_median" in out and "naive_submit_per_interval_median" in out:
        out["speedup_vs_naive_submit"] = round(
            out["naive_submit_per_interval_median"] / out["ours_connect_per_interval_median"], 2)
    if "ours_connect_per_interval_median" in out and "ours_submit_year_estimate_minutes" in out:
        out["speedup_vs_ours_submit"] = round(
            modes["submit"][OURS]["per_interval"]["median"] / out["ours_connect_per_interval_median"], 2)
    return out


def backfill_compare(work: Path, intervals: dict[str, int], events: int, timeout_per_interval: float = 300,
                     naive_first: bool = False, dags: tuple[str, ...] = DAGS,
                     idle_sleep: float | None = None) -> dict[str, Any]:
    """Backfill ``intervals[mode]`` (+1 warm-up) days per mode and DAG (ours first, or the naive DAG first
    with ``naive_first``; ``dags`` picks ``ours`` and/or ``naive``; ``idle_sleep`` sets the scheduler's
    ``scheduler_idle_sleep_time``); see the module docstring."""
    if problem := postgres_problem():
        raise SystemExit(f"the backfill section needs PostgreSQL: {problem}")
    if bad := set(intervals) - set(MODES):
        raise SystemExit(f"unknown backfill mode(s) {sorted(bad)}; choose from {MODES}")
    if not dags or set(dags) - set(DAGS):
        raise SystemExit(f"backfill DAGs must be some of {DAGS}, not {dags}")
    # the last day is yesterday and the DAGs' end (EO_PV_END): unpausing a catchup=False DAG then schedules
    # nothing the backfill lacks, also past midnight UTC
    n = max(intervals.values()) + 1
    days, landing = landing_days(work, "backfill-landing", n, events)
    res: dict[str, Any] = {"events_per_interval": events, "warmup": 1, "modes": {}}
    for mode in MODES:
        if mode in intervals:
            res["modes"][mode] = _mode(work, mode, landing, days[:intervals[mode] + 1], timeout_per_interval,
                                      naive_first, dags, idle_sleep)
    res["goals"] = _goals(res["modes"])
    res["outputs_equal"] = all(m["outputs_equal"] for m in res["modes"].values())
    say(f"  backfill goals: {res['goals']}")
    return res
