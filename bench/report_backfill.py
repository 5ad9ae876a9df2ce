"""Section 5 of docs/BENCHMARKS.md: the scheduler backfills (``bench/backfill.py``), Spark Connect vs
spark-submit, ours vs the naive one-task DAG, and issue 16's goals."""
from __future__ import annotations

from typing import Any

from bench.report import _s as _fmt
from bench.report import table as _table

GOALS = {
    "per_interval": "ours over Spark Connect <= 12 s per interval at 20,000 events",
    "speedup": "ours over Spark Connect >= 2.5x faster per interval than the naive spark-submit DAG",
    "year": "a 365-interval backfill end to end <= 75 min (stretch 30 min)",
}
LABEL = {("connect", "pv_pipeline"): "ours (exactly-once, 6 tasks) over Spark Connect",
         ("connect", "naive_pv_connect"): "naive (1 PySparkOperator) over Spark Connect",
         ("submit", "pv_pipeline"): "ours (exactly-once, 6 tasks) over spark-submit",
         ("submit", "naive_pv"): "naive (1 SparkSubmitOperator) over spark-submit",
         ("connect-year", "pv_pipeline"): "ours over Spark Connect, a year (365 intervals) in one backfill"}


def _s(x: float | None, digits: int = 1) -> str:
    return _fmt(x, digits)


def _dags(sec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    return [(mode, dag, m[dag], m) for mode, m in sec["modes"].items()
            for dag in ("pv_pipeline", m.get("naive_dag")) if dag in m]


def modes_table(sec: dict[str, Any]) -> str:
    """Totals and per-interval medians of every variant, then where an interval's time goes, per task."""
    rows = []
    for mode, dag, r, m in _dags(sec):
        rows.append([LABEL.get((mode, dag), f"{dag} ({mode})"), str(r["intervals"]), _s(r["total_seconds"], 0),
                     _s(r["per_interval"]["median"]), f"{_s(r['per_interval']['min'])}-{_s(r['per_interval']['max'])}",
                     _s(r["tasks_running"]["median"]), _s(r["between_tasks"]["median"]),
                     _s(r["between_runs"]["median"]), ",".join(map(str, sorted(set(r["spark_app_starts_per_run"])))),
                     ("yes" if m["outputs_equal"] else "**NO**")
                     + (" (vs the oracle)" if m.get("vs_oracle") or not m.get("naive_dag") else "")])
    text = _table(["variant", "intervals", "total s", "per interval median s", "min-max s",
                   "tasks running s (median per run)", "between tasks s", "between runs s",
                   "Spark apps started per run", "outputs == naive"], rows)
    loads = "; ".join(f"{mode}: {' -> '.join(str(x[0]) for x in m['loadavg'])}" for mode, m in sec["modes"].items())
    text += (f"\n\n{sec['events_per_interval']:,} events per interval, the same landing files for every variant; "
             "the first interval of every backfill is an untimed warm-up. Outputs compared row for row per mode "
             f"(ours' published table vs that mode's naive outputs, or each DAG's outputs vs the test oracle where "
             "they ran in separate backfills): "
             + ", ".join(f"{mode} {m['rows_compared']:,} rows" for mode, m in sec["modes"].items())
             + f". 1-minute load average before and after each DAG ({loads}).")
    tasks = []
    for mode, dag, r, _ in _dags(sec):
        tasks += [[f"{mode}: {dag}: {t.split('.')[-1]}", _s(v["duration"], 2), _s(v["queued"], 2)]
                  for t, v in r["tasks"].items()]
    text += "\n\nTasks (median s over the timed runs, from `task_instance`):\n\n"
    return text + _table(["task", "running", "queued -> running"], tasks)


def goal_rows(sec: dict[str, Any]) -> list[list[str]]:
    """Issue 16's goals: measured, verdict (the levers for missed goals are in bench/notes/backfill.md)."""
    g, rows = sec.get("goals", {}), []
    if "ours_connect_per_interval_median" in g:
        v = g["ours_connect_per_interval_median"]
        rows.append([GOALS["per_interval"], f"{v:.1f} s (median of {sec['modes']['connect']['intervals']}, "
                     f"{sec['events_per_interval']:,} events per interval)",
                     "met" if v <= 12 else "missed"])
    if "speedup_vs_naive_submit" in g:
        v = g["speedup_vs_naive_submit"]
        rows.append([GOALS["speedup"], f"{v:.2f}x ({g['naive_submit_per_interval_median']:.1f} s / "
                     f"{g['ours_connect_per_interval_median']:.1f} s)", "met" if v >= 2.5 else "missed"])
    if "ours_connect_year_estimate_minutes" in g:
        v = g.get("year_measured_minutes")
        est = g["ours_connect_year_estimate_minutes"]
        what = f"{v:.0f} min measured" if v is not None else f"not run; ~{est:.0f} min estimated (mean interval x 365)"
        val = v if v is not None else est
        verdict = "met (stretch too)" if val <= 30 else "met (stretch missed)" if val <= 75 else "missed"
        rows.append([GOALS["year"], what, verdict if v is not None else f"{verdict}, by estimate"])
    return rows
