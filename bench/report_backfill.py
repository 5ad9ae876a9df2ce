"""Section 5 of docs/BENCHMARKS.md: the scheduler backfills (``bench/backfill.py``), Spark Connect vs
spark-submit, ours vs the naive one-task DAG, and issue 16's goals."""
from __future__ import annotations

from typing import Any

from bench.common import fmt_num as _fmt
from bench.common import table as _table

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


# ---------------------------------------------------------------- section 6: backfill cost (issue 26)
GOALS_26 = {
    "year": "a year (365 daily intervals) of pv_pipeline batched, end to end <= 5 min (stretch 2 min)",
    "single": "a single scheduled interval <= 1.5x the naive Connect DAG",
    "year_range": "the same year as ONE range-triggered DAG run under the scheduler, end to end <= 5 min",
}
GOALS_48 = {
    "year": "a year through `airflow backfill create` <= 2 min (stretch: <= 1.5x the plain-Spark floor)",
    "single": "a single scheduled interval <= 1.1x the naive Connect DAG",
}
VARIANT = {"batched": "ours, batched (one Spark job, each interval its own transaction)",
           "per-interval": "ours, per interval (EO_PV_MAX_BATCH=1: 6 tasks and a job per interval)",
           "one-task": "ours, per interval in one task (EO_PV_ONE_TASK=1: begin publishes it, 5 tasks skipped)",
           "naive": "naive (1 PySparkOperator task per interval)",
           "range": "ours, one range-triggered DAG run (one Spark job, each interval its own transaction)"}


def _runs(sec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    return [(name, label, v, d) for name, d in sec["deployments"].items() for label, v in d["variants"].items()]


def _pivot(sec: dict[str, Any]) -> str:
    """Intervals (1, the month, the year) against the three ways, end to end."""
    def cell(dep: str, label: str) -> str:
        v = sec["deployments"].get(dep, {}).get("variants", {}).get(label)
        return "-" if v is None else f"{v['wall_seconds']:.0f} s ({v['wall_seconds'] / 60:.1f} min)"

    s = sec.get("summary", {})
    six = f"{s['per_interval_median']:.1f} s (median run of `month-per-interval`)" if s.get("per_interval_median") \
        else "-"
    if s.get("one_task_median"):
        six += f"; one task: {s['one_task_median']:.1f} s (`month-one-task`)"
    one = [six, f"{(s.get('month_naive_per_interval_median') or s.get('year_naive_per_interval_median') or 0):.1f}"
           " s (median run)" if s.get("month_naive_per_interval_median") or s.get("year_naive_per_interval_median")
           else "-"]
    floor = sec.get("floor", {})

    def over(dep: str, way: str) -> str:
        """The cell of ``way`` with its ratio to the floor of ``dep``'s days."""
        text = cell(*{"batched": (dep, "batched"), "range": ("year-range", "range"), "naive": (dep, "naive"),
                      "per_interval": ("month-per-interval", "per-interval"),
                      "one_task": ("month-one-task", "one-task")}[way])
        r = s.get(f"{dep}_{way}_over_floor")
        return text if r is None or text == "-" else f"{text} = **{r:.1f}x**"

    rows = [["1 (a scheduled interval: never in a batch of others)", "= per interval", "-", *one, "-"]]
    for dep in ("month", "year"):
        if dep in sec["deployments"]:
            d = sec["deployments"][dep]
            f = floor.get(dep)
            rows.append([str(d["intervals"]), over(dep, "batched"), over(dep, "range") if dep == "year" else "-",
                         "; ".join(x for x in (over(dep, "per_interval"), over(dep, "one_task")) if x != "-") or "-"
                         if dep == "month" else "-", over(dep, "naive"),
                         "-" if f is None else f"{f['wall_seconds']:.0f} s" + ("" if f["outputs_equal"] else " (**NOT** the oracle's rows)")])
    return _table(["intervals", "ours batched (`airflow backfill create`)", "ours, one range run",
                   "ours per interval", "naive Connect DAG", "the plain-Spark floor (one plain Spark job)"], rows)


def floor_note(sec: dict[str, Any], alone: bool = False) -> str:
    """What the floor is and what it took (the ``limit`` section's words), for section 6 and the limit section."""
    floors = sec.get("floor", {})
    if not floors:
        return ""
    srv = sec.get("server", {})
    parts = []
    for name, f in floors.items():
        jvm = f.get("server_cpu_seconds")
        parts.append(f"{f['intervals']} days ({name}) {f['wall_seconds']:.1f} s"
                     + (f", {jvm:.0f} CPU-seconds of the Spark JVM" if jvm is not None else "")
                     + (f", the JVM's peak RSS so far {f['server_peak_rss_mb']:,} MB" if f.get("server_peak_rss_mb") else "")
                     + f"; output {'equal to' if f['outputs_equal'] else '**NOT equal to**'} the oracle's "
                       f"({f['rows']:,} rows)")
    start = srv.get("start_seconds")
    where = "its own run, on a Spark Connect server" if alone else \
        "in the same run on the same Spark Connect server as the backfills, before them"
    return (f"**The plain-Spark floor** (`bench/limit.py`, {where}): the page-view computation as ONE plain Spark "
            "job over the landed days - parse (`from_json`), drop malformed, dedup, pv/uv, cumulative sum, one "
            "Parquet file a day - with no Airflow, no protocol, no gate, no quarantine or state"
            + ("" if alone else "; the ratios above are each way's end to end over it") + ". "
            + "; ".join(parts) + "."
            + (f" The server's JVM start ({start:.0f} s) is not in it." if start is not None else ""))


def cost_table(sec: dict[str, Any]) -> str:
    """The pivot (intervals against the three ways), then each backfill end to end, per-interval medians,
    the outputs' checks; then where a batched backfill's time goes."""
    rows = []
    for name, label, v, d in _runs(sec):
        t = v["timings"]
        check = d["checks"].get("ours_vs_oracle" if v["dag"] == "pv_pipeline" else "naive_vs_oracle", {})
        rows.append([VARIANT.get(label, label), str(v["intervals"]),
                     "-" if label == "range" else str(v.get("max_active_runs", 1)), _s(v["wall_seconds"], 0),
                     _s(v["wall_seconds"] / 60, 1), _s(v["span"]["created_to_last_end"], 0),
                     _s(v["wall_seconds"] / v["intervals"], 2), _s(t["per_interval"]["median"], 2),
                     f"`{name}`", ("yes" if check.get("equal") else "**NO**") + f" ({check.get('rows', 0):,} rows)"])
    note = floor_note(sec)
    text = _pivot(sec) + (f"\n\n{note}" if note else "") + "\n\nEvery backfill:\n\n" + _table(["backfill", "intervals", "`--max-active-runs`", "end to end s",
                   "min", "metadata DB s (created -> last run's end)",
                   "s per interval (end to end)", "per run after the first, median s", "deployment",
                   "outputs == oracle"], rows)
    cross = [f"`{n}` {d['checks']['ours_vs_naive']['rows']:,} rows " +
             ("equal" if d["checks"]["ours_vs_naive"]["equal"] else "**NOT equal**")
             for n, d in sec["deployments"].items() if "ours_vs_naive" in d["checks"]]
    files = sorted({d["results_file"] for d in sec["deployments"].values() if d.get("results_file")})
    text += (f"\n\n{sec['events_per_interval']:,} events per interval, the same landing files for every backfill"
             " of a bench run. End to end: from the bench calling `airflow backfill create` (or the range run's "
             "trigger) until it sees every run final (polled every second). Ours vs the naive DAG in the same "
             "deployment, row for row: " + "; ".join(cross) + ". "
             "1-minute load average before -> after each backfill: "
             + "; ".join(f"{n} {lb}: {v['loadavg'][0][0]} -> {v['loadavg'][1][0]}" for n, lb, v, _ in _runs(sec)) + ".")
    slots = sorted({d.get("parallelism", 2) for d in sec["deployments"].values()})
    text += (f" Airflow's `[core] parallelism` (the LocalExecutor's worker slots): {', '.join(map(str, slots))}"
             + (" (before session 12 every deployment of this section ran with 2)." if slots != [2] else "."))
    if len(files) > 1:
        text += " Deployments from more than one bench run: " + "; ".join(
            f"`{n}` {d['results_file']}" for n, d in sec["deployments"].items()) + "."
    for name, d in sec["deployments"].items():
        if "error" in d:
            text += f"\n\n**`{name}` did not finish**: {d['error']}."
    cpu = [(name, label, v["cpu"]) for name, label, v, _ in _runs(sec) if v.get("cpu")]
    if cpu:
        text += ("\n\nWhere the CPU goes (CPU seconds during each backfill, every process sampled twice a second; "
                 "`other`: the machine's busy time less what was credited - task processes that lived between two "
                 "samples, the bench, the rest of the machine):\n\n" + _table(
                     ["backfill", "deployment", "busy of available s", *cpu[0][2]["by_component"]],
                     [[VARIANT.get(label, label), f"`{name}`", f"{c['cpu_seconds']:.0f} of {c['available_seconds']:.0f}",
                       *(_s(x, 0) for x in c["by_component"].values())] for name, label, c in cpu]))
    mem = [(name, label, v) for name, label, v, _ in _runs(sec) if v.get("cpu", {}).get("rss_peak_mb")]
    if mem:
        def peak(v: dict[str, Any], comp: str, key: str) -> str:
            return _s(v["cpu"]["rss_peak_mb"].get(comp, {}).get(key), 0)

        text += ("\n\nMemory (MB of resident memory, RSS; the task processes' and the scheduler's peaks sampled "
                 "twice a second, the Spark JVM's its highest since the server started - Linux's `VmHWM` - read "
                 "after each backfill):\n\n" + _table(
                     ["backfill", "deployment", "Spark JVM, highest so far", "largest task process (a batch's host)",
                      "all task processes at once", "scheduler", "api-server", "PostgreSQL (all backends)"],
                     [[VARIANT.get(label, label), f"`{name}`", _s(v.get("spark_peak_rss_mb"), 0),
                       peak(v, "task processes", "max_process"), peak(v, "task processes", "sum"),
                       peak(v, "scheduler", "sum"), peak(v, "api-server", "sum"), peak(v, "postgresql", "sum")]
                      for name, label, v in mem]))
    for name, label, v, _ in _runs(sec):
        if "batch" not in v:
            continue
        rows = [[k, _s(x, 1) if x is not None else "-"] for k, x in v["where_time_goes"].items()]
        text += (f"\n\nWhere the time goes: `{name}` batched, {v['intervals']} intervals (seconds; the metadata DB's "
                 "span, split by the hosting `begin` task's log lines):\n\n" + _table(["part", "s"], rows))
        per = [(p, h["per_interval"][p]) for h in v["batch"] if h.get("parsed") for p in ("pre_commit", "validate", "commit")]
        if per:
            text += "\n\nPer interval inside the batch (median s, min-max): " + ", ".join(
                f"{p} {_s(st['median'], 3)} ({_s(st['min'], 3)}-{_s(st['max'], 3)})" for p, st in per if st["n"]) + "."
    return text


def cost_goal_rows(sec: dict[str, Any]) -> list[list[str]]:
    """Issue 26's goals from the ``batched`` section."""
    s, rows = sec.get("summary", {}), []
    if "year_batched_seconds" in s:
        v, n = s["year_batched_seconds"] / 60, s["year_intervals"]
        naive = f"; the naive DAG {s['year_naive_seconds'] / 60:.1f} min" if "year_naive_seconds" in s else ""
        what = f"{v:.1f} min for {n} intervals{naive}"
        ok = n >= 365 and sec["outputs_equal"]
        rows.append([GOALS_26["year"], what, ("met (stretch too)" if v <= 2 else "met (stretch missed)" if v <= 5
                                              else "missed") if ok else "not measured over a year"])
    if "year_range_seconds" in s:
        v, n = s["year_range_seconds"] / 60, s["year_range_intervals"]
        ok = n >= 365 and sec["outputs_equal"]
        rows.append([GOALS_26["year_range"], f"{v:.1f} min for {n} intervals",
                     ("met (stretch too)" if v <= 2 else "met (stretch missed)" if v <= 5 else "missed") if ok
                     else "not measured over a year"])
    rows += _goal_rows_48(sec)
    if "single_interval_ratio" in s:
        rows.append([GOALS_26["single"], f"{s['single_interval_ratio']:.2f}x ({s['per_interval_median']:.1f} s / "
                     f"{s.get('month_naive_per_interval_median') or s.get('year_naive_per_interval_median'):.1f} s, "
                     "per-interval medians)", "met" if s["single_interval_ratio"] <= 1.5 else "missed"])
    return rows


def limit_table(sec: dict[str, Any]) -> str:
    """The ``limit`` section alone: the plain-Spark floor over its days."""
    f = sec["floor"]
    rows = [[str(f["intervals"]), f"{sec['events_per_interval']:,}", _s(f["wall_seconds"], 1),
             _s(f.get("server_cpu_seconds"), 0), _s(f.get("server_peak_rss_mb"), 0),
             _s(sec.get("server", {}).get("start_seconds"), 1),
             ("yes" if f["outputs_equal"] else "**NO**") + f" ({f['rows']:,} rows)"]]
    return (_table(["days", "events a day", "the job s", "Spark JVM CPU s", "Spark JVM peak RSS MB",
                    "JVM start s (not in the job)", "output == oracle"], rows)
            + "\n\n" + floor_note({**sec, "floor": {"limit": f}}, alone=True))


def _idle_sleep(sec: dict[str, Any], dep: str) -> str:
    v = sec["deployments"].get(dep, {}).get("scheduler_idle_sleep_time")
    return "" if v is None else (" (Airflow's default scheduler)" if v == 1.0 else f" (scheduler_idle_sleep_time {v} s)")


def _goal_rows_48(sec: dict[str, Any]) -> list[list[str]]:
    """Issue 48's goals from the ``batched`` section: the year against 2 minutes and its floor, the single
    interval (six tasks and one task) against 1.1x the naive DAG, each with the scheduler it ran under."""
    s, rows = sec.get("summary", {}), []
    if "year_batched_seconds" in s and s.get("year_intervals", 0) >= 365:
        v, floor = s["year_batched_seconds"], s.get("year_batched_over_floor")
        what = f"{v:.0f} s{_idle_sleep(sec, 'year')}" + (f"; {floor:.1f}x the floor ({s['year_floor_seconds']:.0f} s)"
                                                          if floor else "")
        ok = sec["outputs_equal"] and v <= 120
        rows.append([GOALS_48["year"], what, ("met (stretch too)" if floor and floor <= 1.5 else "met (stretch missed)")
                     if ok else "missed"])
    naive = s.get("month_naive_per_interval_median") or s.get("year_naive_per_interval_median")
    for key, med, dep, how in (("single_interval_ratio", "per_interval_median", "month-per-interval", "six tasks"),
                               ("single_interval_one_task_ratio", "one_task_median", "month-one-task",
                                "one task, `one_task`")):
        if key in s:
            rows.append([f"{GOALS_48['single']} ({how})", f"{s[key]:.2f}x ({s[med]:.1f} s / {naive:.1f} s, medians)"
                         f"{_idle_sleep(sec, dep)}", "met" if s[key] <= 1.1 else "missed"])
    return rows
