"""Section 4: one interval of ``pv_pipeline`` through Airflow vs the naive one-task DAG ``naive_pv``.

Both run with ``airflow dags test`` (``tools.localrun.run_interval``) in one environment: the
same AIRFLOW_HOME (SQLite), a temporary DAGs folder holding symlinks to ``dags/pv_pipeline.py`` and
``bench/dags/naive_pv.py`` (so both runs parse the same two files), the same landing data, local Spark.
Intervals alternate ours / naive. Per-task durations come from Airflow's own task_instance table.
A backfill under the real scheduler is the ``backfill`` section (``bench/backfill.py``).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.common import ROOT, loadavg, say, stats

from tools.localrun import airflow_env, ensure_db, run_interval
from tools.sample_data import generate

OURS, NAIVE = "pv_pipeline", "naive_pv"


def _jvm_starts(log: Path, since: int) -> int:
    """SparkContext starts in the part of ``log`` written by this run (spark-submit logs this line)."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace").count("Running Spark version")
    except FileNotFoundError:
        return 0


def _task_durations(home: Path, dag_id: str, since: str) -> dict[str, float]:
    db = home / "airflow.db"
    if not db.exists():
        return {}
    con = sqlite3.connect(str(db))
    try:
        rows = con.execute("SELECT task_id, duration FROM task_instance WHERE dag_id=? AND duration IS NOT NULL "
                           "AND state='success' AND start_date >= ?", (dag_id, since)).fetchall()
    except sqlite3.Error:
        return {}
    finally:
        con.close()
    by: dict[str, list[float]] = {}
    for task, dur in rows:
        by.setdefault(task, []).append(float(dur))
    return {t: round(statistics.median(v), 3) for t, v in sorted(by.items())}


def airflow_compare(work: Path, intervals: int, events: int, home: Path,
                    warmup: int = 1) -> dict[str, Any]:
    data = work / "airflow_data"
    shutil.rmtree(data, ignore_errors=True)
    dags = work / "airflow_dags"
    shutil.rmtree(dags, ignore_errors=True)
    dags.mkdir(parents=True)
    (dags / "pv_pipeline.py").symlink_to(ROOT / "dags" / "pv_pipeline.py")
    (dags / "naive_pv.py").symlink_to(ROOT / "bench" / "dags" / "naive_pv.py")
    start = date(2030, 1, 1)
    days = [(start + timedelta(days=i)).isoformat() for i in range(intervals)]
    say(f"airflow: generating {len(days)} days x {events:,} events")
    generate(str(data / "landing"), days, events_per_day=events, apps=50, users=max(300, events // 10))
    extra = {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "EO_DATA_ROOT": str(data),
             "EO_PV_START": days[0], "EO_RETRIES": "0", "EO_REPORTS_DIR": str(data / "reports")}
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)  # run_interval logs under data_root(); the DAG files read EO_* at parse time
    try:
        home.mkdir(parents=True, exist_ok=True)
        ensure_db(airflow_env(extra))

        def one(dag: str, day: str) -> dict[str, Any]:
            log = data / "logs" / dag / f"{day}.log"
            since = log.stat().st_size if log.exists() else 0
            r = run_interval(dag, day, extra_env=extra, timeout=1800)
            if not r.ok:
                raise RuntimeError(f"{dag} {day} failed (exit {r.exit_code}); see {r.log_path}")
            return {"seconds": r.seconds, "jvm_starts": _jvm_starts(r.log_path, since)}

        if warmup:
            say("airflow: warm-up (one interval each; DAG parsing, .pyc, page cache)")
            warm_day = (start - timedelta(days=1)).isoformat()
            generate(str(data / "landing"), [warm_day], events_per_day=events, apps=50,
                     users=max(300, events // 10))
            os.environ["EO_PV_START"] = extra["EO_PV_START"] = warm_day
            one(OURS, warm_day)
            one(NAIVE, warm_day)
        since = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        ours, naive = [], []
        for day in days:
            ours.append(one(OURS, day))
            naive.append(one(NAIVE, day))
            say(f"  {day}: ours {ours[-1]['seconds']:.1f}s, naive {naive[-1]['seconds']:.1f}s")
        res: dict[str, Any] = {
            "events_per_interval": events, "intervals": intervals, "warmup": warmup,
            "ours": stats([o["seconds"] for o in ours]), "naive": stats([o["seconds"] for o in naive]),
            "jvm_starts_per_interval": {"ours": [o["jvm_starts"] for o in ours],
                                        "naive": [o["jvm_starts"] for o in naive]},
            "loadavg": [loadavg()]}
        res["ratio"] = round(res["ours"]["median"] / res["naive"]["median"], 3)
        res["overhead_seconds"] = round(res["ours"]["median"] - res["naive"]["median"], 3)
        res["task_seconds_median"] = {"ours": _task_durations(home, OURS, since),
                                      "naive": _task_durations(home, NAIVE, since)}
        say(f"  ours {res['ours']['median']:.1f}s vs naive {res['naive']['median']:.1f}s ({res['ratio']}x)")
        return res
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
