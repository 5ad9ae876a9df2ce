"""``make test``: the test suite in lanes at once - ``python -m tools.test_lanes [pytest args]``.

Much of the suite's time is spent waiting: the chaos tests (``tests/chaos/``) drive whole Airflow
deployments and wait for heartbeats to time out, for reschedules, retries and restarted components; the
end-to-end and fleet tests wait for Airflow's processes to start and hand over. So the suite runs as two
pytest processes at once (:data:`LANES`: the chaos, end-to-end, conformance and multi-process deployments;
everything else), and its wall time is about the longer lane's instead of the sum. Two, not more: on the 2-core machine CI runs on, a third lane of
Spark and Airflow processes made every lane slower than the sum (measured: three lanes did not finish in 90
min). The lanes are balanced by the slowest tests (``--durations``, 2026-11-27: main 57 min, deployments 47
min, before the batched bench smoke - 4.4 min - moved to the deployments lane; 2026-11-30: main 50 min, deployments
55, and the batched bench smoke - 3.2 min - moved back).
Every test file is in exactly one lane (tests/unit/test_test_lanes.py checks it). Each lane has
its own ``--basetemp``, Airflow home and data root (no SQLite or temp dir shared between processes) and
its own log; the main lane is printed as it runs, the others when they end. The exit code is non-zero
when a lane fails. ``EO_TEST_LANES=1`` runs one pytest process over everything instead.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# lane -> the test paths it runs; "main" runs the rest of tests/
LANES = {
    "deployments": ["tests/chaos", "tests/e2e", "tests/conformance", "tests/integration/test_celery_fleet.py",
                    "tests/integration/test_spark_cluster.py", "tests/integration/test_mutant_sample.py"],
}


def lanes(args: list[str]) -> list[tuple[str, list[str]]]:
    """The pytest command lines of the lanes (``args`` go to every lane)."""
    base = [sys.executable, "-m", "pytest"]
    if os.environ.get("EO_TEST_LANES") == "1":
        return [("all", [*base, "tests", *args])]
    others = [f"--ignore={p}" for paths in LANES.values() for p in paths]
    return [*((name, [*base, *paths, *args]) for name, paths in LANES.items()),
            ("main", [*base, "tests", *others, *args])]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    work = Path(tempfile.mkdtemp(prefix="eo-test-lanes-"))
    procs: dict[str, tuple[subprocess.Popen, Path, float]] = {}
    for name, cmd in lanes(args):
        log_path = work / f"{name}.log"
        out = None if name in ("main", "all") else log_path.open("wb")
        env = {**os.environ, "AIRFLOW_HOME": str(work / f"airflow-{name}"), "EO_DATA_ROOT": str(work / f"data-{name}")}
        procs[name] = (subprocess.Popen([*cmd, f"--basetemp={work / ('tmp-' + name)}"], cwd=ROOT, stdout=out, env=env,
                                        stderr=subprocess.STDOUT if out else None), log_path, time.time())
        print(f"== lane {name}: {' '.join(cmd[2:])}" + (f" (output: {log_path})" if out else ""), flush=True)
    codes = {}
    for name, (proc, log_path, t0) in sorted(procs.items(), key=lambda kv: kv[0] != "main"):  # main's live first
        codes[name] = proc.wait()
        if name not in ("main", "all"):
            sys.stdout.write(f"\n== lane {name} output\n{log_path.read_text(errors='replace')}")
        print(f"== lane {name}: exit {codes[name]} after {time.time() - t0:.0f} s", flush=True)
    # pytest's exit 5 (nothing collected) in a lane is fine when the other lane ran tests (e.g. -k)
    if all(c == 0 or (c == 5 and 0 in codes.values()) for c in codes.values()):
        return 0
    return next((c for c in codes.values() if c not in (0, 5)), 5)


if __name__ == "__main__":
    sys.exit(main())
