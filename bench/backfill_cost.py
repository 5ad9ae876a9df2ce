"""Section ``batched`` (issue 26): what a backfill of ``pv_pipeline`` costs against its number of intervals
(one, a month, a year), three ways, under the real scheduler, all over one Spark Connect server, on the same
landing data:

* **batched** - ``pv_pipeline`` as shipped (``max_batch`` 366): the backfill's first run's ``begin`` hosts
  ONE Spark job for every interval, each interval still its own transaction; the other runs finish at once;
* **per interval** - the same DAG with ``EO_PV_MAX_BATCH=1``: six tasks and one job per interval;
* **naive** - ``bench/dags/naive_pv_connect.py``: one PySparkOperator task per interval.

Three deployments (:class:`tools.deployment.Deployment`: a fresh PostgreSQL metadata DB, api-server,
scheduler with the LocalExecutor of ``--backfill-parallelism`` worker slots - 4 by default: a batch's host holds
one for the whole batch -, dag-processor, a fresh data root each), in this order:

* ``month``: ours batched over the last M days, then the naive DAG over the same days;
* ``month-per-interval``: ours with ``EO_PV_MAX_BATCH=1`` over the same M days;
* ``year``: ours batched over the last Y days, then the naive DAG over the same days.

Every range ends yesterday (unpausing a ``catchup=False`` DAG then schedules nothing the backfill lacks);
``pv_pipeline`` starts at the range's first day (``EO_PV_START``). Before anything is timed each deployment
runs ``bench/dags/warmup_connect.py`` once (the forkserver's first fork, a worker's first parse, the Connect
server's first queries). Each backfill is one ``airflow backfill create --max-active-runs N`` (N =
``--backfill-max-active-runs``, 10 by default (Airflow's own), for the batched ones; always 1 for the naive DAG, whose cumulative
state needs its days in order, and for the per-interval variant, which stands for
scheduled runs, one at a time), timed end to
end: from the bench calling it until the bench sees every run final (polled every second:
``wall_seconds``), and in the metadata DB from the backfill's ``created_at`` to its last run's end
(``span``). Per-interval medians: :func:`bench.backfill_metrics.timings` (a backfill's first run excluded).
A batched backfill's hosting run is split phase by phase from its log (:mod:`bench.batch_metrics`).
Outputs: ours' published ``app_pv`` table vs the naive DAG's outputs of the same deployment and vs the test
oracle (``tests/reference_pv.py``), row for row, every day.
"""
from __future__ import annotations

import json
import shutil
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.backfill_metrics import naive_rows, oracle_rows, ours_rows, same_rows, timings, where_time_goes
from bench.batch_metrics import (announcements, backfill_runs, batch_phases, host_logs, newest_backfill, span, waits,
                                 where_batch_time_goes)
from bench.common import ROOT, landing_days, loadavg, say, wait_for_runs
from bench.cpu import CpuSampler, peak_rss_mb

from tools import spark_connect
from tools.deployment import Deployment, free_port, postgres_problem

OURS, NAIVE, WARMUP = "pv_pipeline", "naive_pv_connect", "bench_warmup"
# the month's ways: ours batched and the naive DAG (deployment `month`), ours per interval with six tasks
# (`month-per-interval`) and with one (`month-one-task`: EO_PV_ONE_TASK=1, what a scheduled interval can run)
MONTH_WAYS = ("batched", "naive", "per-interval", "one-task")


def _warm_up(deploy: Deployment, landing_day: Path) -> float:
    """Run the warm-up DAG once (triggered, then unpaused: it has no schedule); its wall seconds."""
    t0 = time.perf_counter()
    deploy.airflow("warmup", ["dags", "trigger", WARMUP, "--conf", json.dumps({"landing": str(landing_day)})])
    deploy.airflow("warmup", ["dags", "unpause", WARMUP])
    deploy.wait("the warm-up run", lambda: bool(deploy.db.query(
        "select 1 from dag_run where dag_id = %s and state in ('success', 'failed')", (WARMUP,))), 600)
    if deploy.db.query("select 1 from dag_run where dag_id = %s and state = 'failed'", (WARMUP,)):
        raise RuntimeError(f"the warm-up run failed; task logs under {deploy.run_dir}/airflow-home/logs")
    return round(time.perf_counter() - t0, 1)


def _variant(deploy: Deployment, label: str, dag_id: str, days: list[str], timeout: float,
             batched: bool, max_active_runs: int) -> dict[str, Any]:
    """One backfill of ``days``, timed end to end (module docstring)."""
    say(f"{label}: backfill of {dag_id}, {len(days)} intervals {days[0]} .. {days[-1]}")
    load0 = loadavg()
    t0 = time.perf_counter()
    with CpuSampler() as cpu:
        deploy.backfill(dag_id, days[0], days[-1], max_active_runs=max_active_runs)
        backfill_id = newest_backfill(deploy, dag_id)
        assert backfill_id is not None, f"no backfill of {dag_id} in the metadata DB"
        wait_for_runs(deploy, dag_id, lambda: backfill_runs(deploy, backfill_id), len(days), timeout, report_every=25)
    wall = round(time.perf_counter() - t0, 1)
    tim = timings(deploy, dag_id, backfill_id)
    sp = span(deploy, backfill_id)
    res: dict[str, Any] = {"dag": dag_id, "batched": batched, "intervals": len(days), "days": [days[0], days[-1]],
                           "max_active_runs": max_active_runs, "cpu": cpu.result(),
                           "wall_seconds": wall, "span": sp, "timings": tim, "loadavg": [load0, loadavg()]}
    if batched:
        hosts = [batch_phases(p) for p in host_logs(deploy.run_dir / "airflow-home", dag_id)]
        res["batch"] = hosts
        res["waits"] = waits(deploy.run_dir / "airflow-home", dag_id)
        res["where_time_goes"] = where_batch_time_goes(sp, hosts, tim)
    elif tim["intervals"]:
        res["where_time_goes"] = where_time_goes(tim)
    say(f"  {label}: {dag_id} {len(days)} intervals in {wall:.0f}s end to end ({wall / 60:.1f} min; "
        f"metadata DB {sp['created_to_last_end']:.0f}s)")
    return res


def _trigger(deploy: Deployment, run_id: str, day: str, conf: dict[str, Any]) -> None:
    """A manual run of the daily interval starting ``day``, through Airflow's REST API (``POST
    /api/v2/dags/<dag>/dagRuns`` with its data interval: ``airflow dags trigger`` gives a manual run the
    latest interval, whatever its logical date)."""
    import urllib.request

    base = f"http://127.0.0.1:{deploy.api_port}"
    with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as r:  # all-admins deployment: no credentials
        token = json.loads(r.read())["access_token"]
    start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
    body = {"dag_run_id": run_id, "logical_date": start.isoformat(), "data_interval_start": start.isoformat(),
            "data_interval_end": (start + timedelta(days=1)).isoformat(), "conf": conf}
    req = urllib.request.Request(f"{base}/api/v2/dags/{OURS}/dagRuns", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        made = json.loads(r.read())
    if made.get("dag_run_id") != run_id:
        raise RuntimeError(f"the range trigger made {made}")


def _range_parts(parts: dict[str, Any]) -> dict[str, Any]:
    """A range run's time split: a backfill's, its words for a single triggered run."""
    out = {}
    for k, v in parts.items():
        if k.startswith("the other "):
            continue  # a range has no other runs
        out[k.replace("backfill created -> first task starts", "triggered -> first task starts")
            .replace("host begin", "range begin").replace("host run", "range run")] = v
    return out


def _range(deploy: Deployment, label: str, days: list[str], timeout: float) -> dict[str, Any]:
    """Ours over ``days`` as ONE DAG run under the scheduler: the range trigger (a manual run of the first day
    with conf ``{"eo_batch": {"end": <the last day>}}``, README "Backfills", made through the REST API), timed
    from the trigger until that run is final. The DAG is unpaused first: with catchup=False the scheduler then runs the latest day
    alone, which cannot begin before the days ahead of it commit and fails at once (nothing is running that
    could commit them); that run ends before the range is triggered and is not timed."""
    deploy.airflow("unpause", ["dags", "unpause", OURS])
    deploy.wait("the latest day's scheduled run", lambda: bool(deploy.db.query(
        "select 1 from dag_run where dag_id = %s and run_type = 'scheduled' and state in ('success', 'failed')",
        (OURS,))), 300)
    say(f"{label}: one range run of {OURS}, {len(days)} intervals {days[0]} .. {days[-1]}")
    load0, run_id = loadavg(), f"range__{days[0]}"
    t0 = time.perf_counter()
    with CpuSampler() as cpu:
        _trigger(deploy, run_id, days[0], {"eo_batch": {"end": f"{days[-1]}T00:00:00+00:00"}})
        state = lambda: {r[0]: r[1] for r in deploy.db.query(  # noqa: E731
            "select run_id, state from dag_run where dag_id = %s and run_id = %s", (OURS, run_id))}
        wait_for_runs(deploy, OURS, state, 1, timeout)
    wall = round(time.perf_counter() - t0, 1)
    (created, start, end, first), = deploy.db.query(
        "select coalesce(queued_at, start_date), start_date, end_date, data_interval_start at time zone 'UTC' "
        "from dag_run where dag_id = %s and run_id = %s", (OURS, run_id))
    if first.date().isoformat() != days[0]:
        raise RuntimeError(f"the range run's interval starts {first}, not {days[0]}")
    sp = {"runs": 1, "created_to_last_end": round((end - created).total_seconds(), 2),
          "created_to_first_task": round((start - created).total_seconds(), 2),
          "first_run": round((end - start).total_seconds(), 2), "after_first_run": 0.0}
    hosts = [batch_phases(p) for p in host_logs(deploy.run_dir / "airflow-home", OURS) if run_id in str(p)]
    res: dict[str, Any] = {"dag": OURS, "batched": True, "range": True, "intervals": len(days),
                           "days": [days[0], days[-1]], "max_active_runs": 1, "wall_seconds": wall, "span": sp,
                           "timings": {"intervals": 0, "per_interval": {"n": 0, "median": None}},
                           "loadavg": [load0, loadavg()], "batch": hosts, "cpu": cpu.result(),
                           "where_time_goes": _range_parts(where_batch_time_goes(sp, hosts, {}))}
    say(f"  {label}: {OURS} {len(days)} intervals in one range run, {wall:.0f}s end to end ({wall / 60:.1f} min)")
    return res


def _deployment(work: Path, name: str, landing: Path, server: spark_connect.Server, days: list[str],
                plan: list[tuple[str, str, bool]], max_batch: int, timeout_per_interval: float,
                idle_sleep: float | None, max_active_runs: int, parallelism: int, one_task: bool = False,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """One deployment: warm up, then each ``(label, dag_id, batched)`` of ``plan`` backfills ``days``;
    ``parallelism``: Airflow's ``[core] parallelism`` (the LocalExecutor's worker slots); ``one_task``: ours'
    runs that do not batch publish their interval in their begin task (``EO_PV_ONE_TASK=1``)."""
    run_dir = work / f"cost-{name}"
    shutil.rmtree(run_dir, ignore_errors=True)
    folder = run_dir / "dags"
    folder.mkdir(parents=True)
    (folder / "pv_pipeline.py").symlink_to(ROOT / "dags" / "pv_pipeline.py")
    for dag in (NAIVE, "warmup_connect"):
        (folder / f"{dag}.py").symlink_to(ROOT / "bench" / "dags" / f"{dag}.py")
    (run_dir / "data").mkdir()
    (run_dir / "data" / "landing").symlink_to(landing)
    settings = {"AIRFLOW__CORE__DAGS_FOLDER": str(folder), "EO_PV_START": days[0], "EO_PV_END": days[-1],
                "EO_RETRIES": "0",
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",  # as docker-compose.yaml ships it (DEPLOYING.md)
                "EO_PV_MAX_BATCH": str(max_batch), "EO_PV_ONE_TASK": "1" if one_task else "0",
                "EO_SPARK_REMOTE": server.url,
                "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
                    {"conn_type": "spark_connect", "host": "127.0.0.1", "port": server.port})}
    if idle_sleep is not None:
        settings["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] = str(idle_sleep)
    lineage = run_dir / "openlineage.jsonl"  # every task's OpenLineage event (counted per variant)
    settings.update({"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage),
                                                                    "append": True}),
                     "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True"})
    settings.update(env or {})
    res: dict[str, Any] = {"intervals": len(days), "days": [days[0], days[-1]], "max_batch": max_batch,
                           "one_task": one_task, "env": dict(env or {}),
                           "scheduler_idle_sleep_time": idle_sleep if idle_sleep is not None else 1.0,
                           "min_heartbeat_interval": float(settings["AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"]),
                           "parallelism": parallelism, "variants": {}}
    with Deployment(run_dir, purpose="bench", settings=settings, parallelism=parallelism, log=say) as deploy:
        res["deployment"] = {"id": deploy.id, "metadata_db": deploy.db.name}
        deploy.start([OURS, NAIVE, WARMUP])
        res["warmup_seconds"] = _warm_up(deploy, landing / "app_logs" / f"dt={days[0]}")
        timeout = timeout_per_interval * len(days) + 600
        for label, dag_id, batched in plan:
            res["variants"][label] = _range(deploy, f"{name}: {label}", days, timeout) if label == "range" else \
                _variant(deploy, f"{name}: {label}", dag_id, days, timeout, batched,
                         max_active_runs if batched else 1)  # the naive DAG's cumulative state needs its days in order
            res["variants"][label]["spark_peak_rss_mb"] = peak_rss_mb(server.pid())  # the JVM's, so far
        if any(d == OURS for _, d, _ in plan):  # one asset event and one lineage output per published version
            told = settled_announcements(deploy, f"file://{run_dir / 'data' / 'warehouse' / 'app_pv'}", lineage,
                                         len(days))
            told["each_once"] = told["asset_events"] == told["asset_event_versions"] == told["lineage_outputs"] \
                == told["lineage_versions"] == len(days)
            res["announcements"] = told
            say(f"  {name}: announcements {told}")
    oracle = oracle_rows(landing, days)
    checks: dict[str, Any] = {}
    ours = ours_rows(run_dir / "data") if any(d == OURS for _, d, _ in plan) else None
    if ours is not None:
        checks["ours_vs_oracle"] = same_rows(ours, oracle, days)
    if any(d == NAIVE for _, d, _ in plan):
        naive = naive_rows(run_dir / "data", days)
        checks["naive_vs_oracle"] = same_rows(naive, oracle, days)
        if ours is not None:
            checks["ours_vs_naive"] = same_rows(ours, naive, days)
    res["checks"] = {k: {"equal": v[0], "rows": v[1]} for k, v in checks.items()}
    res["outputs_equal"] = all(v[0] for v in checks.values())
    say(f"  {name}: outputs {res['checks']}")
    return res


def _floors(url: str, pid: int | None, landing: Path, days: list[str], work: Path,
            spans: dict[str, int]) -> dict[str, Any]:
    """The plain-Spark floor (:mod:`bench.limit`) over the last ``n`` days for each ``{name: n}`` of ``spans``
    (0 skips it), on the section's own Connect server, before any deployment starts."""
    from bench.limit import connect, measure

    spark = connect(url)
    try:
        return {name: measure(spark, landing, days[-n:], work, name, pid) for name, n in spans.items() if n}
    finally:
        spark.stop()


def _floor_ratios(out: dict[str, Any], floor: dict[str, Any]) -> None:
    """``<scope>_floor_seconds`` and each way's end to end over it (``<scope>_<way>_over_floor``) into ``out``."""
    for scope, f in floor.items():
        out[f"{scope}_floor_seconds"] = f["wall_seconds"]
        for way in ("batched", "naive", "range", "per_interval", "one_task"):
            key = f"{scope}_{way}_seconds"
            if out.get(key) and f["wall_seconds"]:
                out[f"{scope}_{way}_over_floor"] = round(out[key] / f["wall_seconds"], 2)


def _summary(dep: dict[str, Any], floor: dict[str, Any] | None = None) -> dict[str, Any]:
    """The headline numbers (seconds, ratios) from the deployments' results and the plain-Spark floors."""
    out: dict[str, Any] = {}

    def var(d: str, v: str) -> dict[str, Any] | None:
        return dep.get(d, {}).get("variants", {}).get(v)

    for scope in ("year", "month"):
        b, n = var(scope, "batched"), var(scope, "naive")
        if b is not None:
            out[f"{scope}_batched_seconds"] = b["wall_seconds"]
            out[f"{scope}_intervals"] = b["intervals"]
        if n is not None:
            out[f"{scope}_naive_seconds"] = n["wall_seconds"]
            out[f"{scope}_naive_per_interval_median"] = n["timings"]["per_interval"]["median"]
        if b is not None and n is not None:
            out[f"{scope}_naive_over_batched"] = round(n["wall_seconds"] / b["wall_seconds"], 2)
    r = var("year-range", "range")
    if r is not None:
        out["year_range_seconds"] = r["wall_seconds"]
        out["year_range_intervals"] = r["intervals"]
    one = var("month-one-task", "one-task")
    if one is not None:
        out["month_one_task_seconds"] = one["wall_seconds"]
        out["one_task_median"] = one["timings"]["per_interval"]["median"]
        naive = out.get("month_naive_per_interval_median") or out.get("year_naive_per_interval_median")
        if naive and out["one_task_median"] is not None:
            out["single_interval_one_task_ratio"] = round(out["one_task_median"] / naive, 2)
    p = var("month-per-interval", "per-interval")
    if p is not None:
        out["month_per_interval_seconds"] = p["wall_seconds"]
        out["per_interval_median"] = p["timings"]["per_interval"]["median"]
        if var("month", "batched") is not None:
            out["month_per_interval_over_batched"] = round(p["wall_seconds"] / out["month_batched_seconds"], 2)
        naive = out.get("month_naive_per_interval_median") or out.get("year_naive_per_interval_median")
        if naive and out["per_interval_median"] is not None:
            out["single_interval_ratio"] = round(out["per_interval_median"] / naive, 2)
    _floor_ratios(out, floor or {})
    return out


def settled_announcements(deploy: Any, table_uri: str, lineage: Path, versions: int,
                          settle_seconds: float = 180) -> dict[str, Any]:
    """:func:`announcements` once the provider's events are written: it writes a task's COMPLETE event in a
    thread after the task ended (a range host's, with 365 outputs, is 1.4 MB and lands seconds after the run
    is final - counted at once it read 0). Waits until every version is counted, or ``settle_seconds``."""
    deadline = time.monotonic() + settle_seconds
    while True:
        told = announcements(deploy, table_uri, lineage)
        if told["lineage_outputs"] >= versions or time.monotonic() > deadline:
            return told
        time.sleep(2)


def batched_compare(work: Path, year: int, month: int, events: int, timeout_per_interval: float = 60,
                    idle_sleep: float | None = None, max_active_runs: int = 1, range_run: bool = True,
                    naive: bool = True, parallelism: int = 4,
                    month_ways: tuple[str, ...] = MONTH_WAYS, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``year`` deployment over ``year`` days and the two ``month`` deployments over ``month`` days (0
    skips either, not both); see the module docstring."""
    if problem := postgres_problem():
        raise SystemExit(f"the batched section needs PostgreSQL: {problem}")
    if year < 0 or year == 1 or month < 0 or month == 1 or not (year or month):
        # a backfill's per-interval figures need a run after its first
        raise SystemExit(f"--backfill-batched and --backfill-month must each be 0 (skipped) or >= 2, and not both 0; "
                         f"not {year}, {month}")
    n = max(year, month)
    days, landing = landing_days(work, "cost-landing", n, events)
    if env and (bad := sorted(k for k in env if not k.startswith("EO_"))):
        raise SystemExit(f"--backfill-env takes EO_* settings only, not {bad}")
    if max_active_runs < 1:
        raise SystemExit(f"--backfill-max-active-runs must be >= 1, not {max_active_runs}")
    res: dict[str, Any] = {"events_per_interval": events, "max_active_runs": max_active_runs,
                           "parallelism": parallelism, "deployments": {},
                           "loadavg": [loadavg()]}
    with ExitStack() as stack:
        server = spark_connect.Server(free_port(), work / "cost-spark-connect")
        t0 = time.perf_counter()
        url = spark_connect.start(server)
        stack.callback(spark_connect.stop, server)
        res["server"] = {"url": url, "master": server.master, "start_seconds": round(time.perf_counter() - t0, 1)}
        res["floor"] = _floors(url, server.pid(), landing, days, work, {"month": month, "year": year})
        plans = []
        if month:
            first = [*([("batched", OURS, True)] if "batched" in month_ways else []),
                     *([("naive", NAIVE, False)] if "naive" in month_ways else [])]
            plans += [*([("month", days[-month:], first, 366, max_active_runs, False)] if first else []),
                      *([("month-per-interval", days[-month:], [("per-interval", OURS, False)], 1, 1, False)]
                        if "per-interval" in month_ways else []),
                      *([("month-one-task", days[-month:], [("one-task", OURS, False)], 1, 1, True)]
                        if "one-task" in month_ways else [])]
        if year:  # 0: the month deployments only
            plans.append(("year", days[-year:], [("batched", OURS, True), *([("naive", NAIVE, False)] if naive else [])],
                          366, max_active_runs, False))
            if range_run:  # the same year as ONE DAG run (a range trigger): a fresh data root
                plans.append(("year-range", days[-year:], [("range", OURS, True)], 366, 1, False))
        for name, span_days, plan, max_batch, runs_at_once, one_task in plans:
            try:
                res["deployments"][name] = _deployment(work, name, landing, server, span_days, plan, max_batch,
                                                       timeout_per_interval, idle_sleep, runs_at_once, parallelism,
                                                       one_task, env or {})
            except Exception as exc:  # noqa: BLE001 - the other deployments' figures still count
                say(f"  {name}: FAILED: {type(exc).__name__}: {exc}")
                res["deployments"][name] = {"intervals": len(span_days), "error": f"{type(exc).__name__}: {exc}",
                                            "variants": {}, "checks": {}, "outputs_equal": False}
            res["loadavg"].append(loadavg())
    res["summary"] = _summary(res["deployments"], res["floor"])
    res["outputs_equal"] = all(d["outputs_equal"] for d in [*res["deployments"].values(), *res["floor"].values()])
    say(f"  batched: {res['summary']}; outputs equal: {res['outputs_equal']}")
    return res
