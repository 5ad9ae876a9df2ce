"""Helpers shared by tests (importable as ``eo_testing``; conftest.py re-exports them)."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

REQUIRE = os.environ.get("EO_REQUIRE_SERVICES") == "1"
_ROOT = Path(__file__).resolve().parents[1]
BERLIN = ZoneInfo("Europe/Berlin")


def berlin_hour(iv) -> str:
    """A partition callable: the interval's local date and hour in Berlin - the repeated 02:00 of the autumn
    change is one partition for two intervals."""
    s = iv.start.astimezone(BERLIN)
    return f"dt={s:%Y-%m-%d}/hour={s:%H}"


def berlin_hour_offset(iv) -> str:
    """:func:`berlin_hour` with the UTC offset: the repeated 02:00 is two partitions."""
    s = iv.start.astimezone(BERLIN)
    return f"dt={s:%Y-%m-%d}/hour={s:%H%z}"


def need(condition: bool, reason: str) -> None:
    """Skip (or, with EO_REQUIRE_SERVICES=1, fail) when a required service is missing."""
    if not condition:
        if REQUIRE:
            pytest.fail(f"required service missing: {reason}")
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def load_module(name: str, path: "os.PathLike[str] | str"):
    """Import the file ``path`` (a DAG file, a Spark job) as module ``name``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@contextmanager
def clock_off(monkeypatch, seconds: float):
    """This actor's clock (``time.time``) runs ``seconds`` off inside the block; the storage's is real."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)
    try:
        yield
    finally:
        monkeypatch.setattr(time, "time", real)


def run_bench(tmp_path, *args: str, timeout: float = 600) -> dict:
    """Run ``python -m bench <args>`` into a scratch dir; return the results JSON."""
    need(shutil.which("java") is not None, "Java is not installed")
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "bench", *args, "--workdir", str(tmp_path / "work"),
                           "--out", str(out), "--no-doc"], cwd=_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())
