"""bench.cpu: a backfill's CPU seconds per component of the machine."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.cpu import CpuSampler, component

# 1 s of CPU, then it says so and waits for its stdin to close: it is alive when the sampler reads it last
BUSY = ("import sys, time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\n"
        "print('done', flush=True)\nsys.stdin.read()\n")


def test_each_process_is_credited_to_its_component():
    assert component("/usr/lib/jvm/java-17/bin/java -cp x org.apache.spark.deploy.SparkSubmit") == "spark"
    assert component("/venv/bin/python /venv/bin/airflow scheduler") == "scheduler"
    assert component("airflow api_server -- host:127.0.0.1 port:8080") == "api-server"
    assert component("/venv/bin/python /venv/bin/airflow triggerer") == "triggerer"
    assert component("/venv/bin/python /venv/bin/airflow dag-processor") == "dag-processor"
    assert component("airflow worker -- LocalExecutor: 01a2") == "task processes"
    assert component("postgres: 15/main: postgres eo_bench 127.0.0.1(33800) idle") == "postgresql"
    assert component("/venv/bin/python -m bench --only batched") is None


def sampled(script: str, said: str, *as_component: str) -> dict:
    """``cpu.result()`` of a sampler around a child running ``script`` (its command line ending in
    ``as_component``), kept alive until a whole sample after it printed ``said``."""
    with CpuSampler(every=0.1, root=os.getpid()) as cpu:
        child = subprocess.Popen([sys.executable, "-c", script, *as_component], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == f"{said}\n"
        seen = cpu.samples
        while cpu.samples < seen + 2:
            time.sleep(0.01)
        child.communicate("")
    return cpu.result()


def test_a_process_busy_inside_the_block_is_credited_and_the_rest_is_other():
    out = sampled(BUSY, "done", "airflow", "scheduler")
    assert 0.8 <= out["by_component"]["scheduler"] <= 1.5, out
    assert out["cpu_seconds"] >= sum(v for k, v in out["by_component"].items() if k != "other") - 0.2, out
    assert out["available_seconds"] >= out["wall_seconds"] > 0.9, out


# holds 700 MiB resident (every page written) until its stdin closes
HOLD = "import sys\nheld = b'x' * (700 * 2**20)\nprint('held', flush=True)\nsys.stdin.read()\n"


def test_the_memory_peak_of_each_component_is_recorded():
    peak = sampled(HOLD, "held", "airflow", "triggerer")["rss_peak_mb"]["triggerer"]
    assert 700 <= peak["max_process"] < 800 and peak["sum"] >= peak["max_process"], peak
