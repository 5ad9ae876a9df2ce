"""Timing helpers and machine facts shared by every section."""
from __future__ import annotations

import importlib.metadata as md
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "plugins", ROOT / "spark_jobs", ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stats(samples: list[float]) -> dict[str, Any]:
    """Median, min, max and the raw samples (seconds, rounded to 0.1 ms)."""
    s = [round(x, 4) for x in samples]
    return {"median": round(statistics.median(s), 4) if s else None, "min": min(s, default=None),
            "max": max(s, default=None), "n": len(s), "samples": s}


def clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """Cores, RAM, CPU model, load average now, and the versions that matter."""
    mem_kb = 0
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = None
    return {
        "cores": os.cpu_count(), "ram_gb": round(mem_kb / 1024 / 1024, 1), "cpu": cpu,
        "platform": platform.platform(), "python": platform.python_version(), "java": java,
        "versions": {d: _version(d) for d in ("pyspark", "apache-airflow", "great_expectations", "s3fs",
                                               "pyarrow", "moto", "apache-airflow-providers-apache-spark")},
        "loadavg_start": loadavg(),
    }


def wait_for_runs(deploy: Any, dag_id: str, runs_of: Callable[[], dict[str, str]], n: int, timeout: float, *,
                  poll: float = 1.0, report_every: int = 1) -> None:
    """Until all ``n`` runs ``runs_of()`` returns (day -> state) are final, polled every ``poll`` s; a progress
    line whenever the count done reaches a multiple of ``report_every`` (and at the end). Raises if one failed."""
    from tools.deployment import FINAL

    end, seen = time.time() + timeout, -1
    while True:
        runs = runs_of()
        done = sum(s in FINAL for s in runs.values())
        if done != seen and (done == n or done % report_every == 0):
            seen = done
            say(f"  {dag_id}: {done}/{n} intervals done (load {loadavg()})")
        if len(runs) == n and done == n:
            break
        if time.time() > end:
            raise TimeoutError(f"{dag_id} backfill not done after {timeout:.0f}s: {runs}")
        deploy.check_alive()
        time.sleep(poll)
    if failed := sorted(d for d, s in runs.items() if s != "success"):
        raise RuntimeError(f"{dag_id} runs failed for {failed}; task logs under {deploy.run_dir}/airflow-home/logs")


def landing_days(work: Path, name: str, n: int, events: int) -> tuple[list[str], Path]:
    """``n`` days ending yesterday (unpausing a ``catchup=False`` DAG then schedules nothing a backfill lacks; the
    deployment's ``EO_PV_END`` keeps it so past midnight UTC) and a fresh landing ``work/<name>`` of ``events``
    events a day on each (``tools.sample_data``: 50 apps)."""
    import shutil
    from datetime import datetime, timedelta, timezone

    from tools.sample_data import generate

    today = datetime.now(timezone.utc).date()
    days = [(today - timedelta(days=n - i)).isoformat() for i in range(n)]
    landing = work / name
    shutil.rmtree(landing, ignore_errors=True)
    say(f"{name}: generating {n} days x {events:,} events")
    generate(str(landing), days, events_per_day=events, apps=50, users=max(300, events // 10))
    return days, landing


def fmt_num(x: float | None, digits: int = 2) -> str:
    """A measured number for a report table ("-" where nothing was measured)."""
    return "-" if x is None else f"{x:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)
