"""Where a backfill's CPU goes: CPU seconds per component of the machine over a block.

:class:`CpuSampler` reads every process's CPU time (user + system, ``psutil``) every ``every`` seconds in a
thread and credits what each process used since it was last seen to its component (:func:`component`, by
its command line). The machine's own total (``psutil.cpu_times``) is read at the start and the end:
``other`` is that total less what was credited - the processes that lived between two samples (a task
process that starts and ends within ``every`` s), the bench itself and the rest of the machine. A process
already running at the start is credited only what it used after it. ``root=pid`` narrows the processes read to
that one and its descendants (the tests: another deployment's scheduler on the same machine is not theirs).

Each sample also reads every process's resident memory (RSS): per component, the peak over the samples of its
processes' sum and of its largest process (``rss_peak_mb``; a process that lived between two samples is not seen).
"""
from __future__ import annotations

import threading
import time
from typing import Any

import psutil

COMPONENTS = ("spark", "scheduler", "api-server", "triggerer", "dag-processor", "task processes", "postgresql")


def component(cmdline: str) -> str | None:
    """The component a process's command line belongs to (None: counted in ``other``)."""
    if "java" in cmdline.split(" ", 1)[0] or "org.apache.spark" in cmdline:
        return "spark"
    if cmdline.startswith("postgres"):
        return "postgresql"
    if "airflow worker" in cmdline or "airflow task" in cmdline:
        return "task processes"
    for name, needles in (("scheduler", ("airflow scheduler",)), ("api-server", ("airflow api-server", "api_server")),
                          ("triggerer", ("airflow triggerer",)), ("dag-processor", ("airflow dag-processor",))):
        if any(n in cmdline for n in needles):
            return name
    return None


class CpuSampler:
    """``with CpuSampler() as cpu: ...``; then ``cpu.result()``: seconds of wall time, of CPU in all (and
    available: cores x wall), and per component (module docstring)."""

    def __init__(self, every: float = 0.5, root: int | None = None) -> None:
        self.every, self.root = every, root  # root: count only that process and its descendants (None: all)
        self._seen: dict[tuple[int, float], tuple[str | None, float]] = {}  # (pid, created) -> (component, used)
        self._used = dict.fromkeys(COMPONENTS, 0.0)
        self._rss_sum = dict.fromkeys(COMPONENTS, 0)  # bytes: the peak of the sum of a component's processes
        self._rss_max = dict.fromkeys(COMPONENTS, 0)  # bytes: its largest process
        self.samples = 0  # how many times every process was read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> "CpuSampler":
        self._t0, self._cpu0 = time.monotonic(), _busy(psutil.cpu_times())
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._wall, self._cpu = time.monotonic() - self._t0, _busy(psutil.cpu_times()) - self._cpu0

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self, first: bool = False) -> None:
        rss = dict.fromkeys(COMPONENTS, 0)
        for proc in self._processes():
            try:
                key, times = (proc.pid, proc.create_time()), proc.cpu_times()
                used = times.user + times.system
                if key not in self._seen:
                    self._seen[key] = (component(" ".join(proc.cmdline())), used if first else 0.0)
                name, before = self._seen[key]
                if name is not None and used > before:
                    self._used[name] += used - before
                self._seen[key] = (name, max(before, used))
                if name is not None:
                    one = proc.memory_info().rss
                    rss[name] += one
                    self._rss_max[name] = max(self._rss_max[name], one)
            except (psutil.Error, OSError):
                continue
        for name, total in rss.items():
            self._rss_sum[name] = max(self._rss_sum[name], total)
        self.samples += 1

    def _processes(self) -> list[psutil.Process]:
        if self.root is None:
            return list(psutil.process_iter())
        try:
            root = psutil.Process(self.root)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def result(self) -> dict[str, Any]:
        credited = sum(self._used.values())
        return {"wall_seconds": round(self._wall, 1), "cpu_seconds": round(self._cpu, 1),
                "available_seconds": round(self._wall * (psutil.cpu_count() or 1), 1),
                "by_component": {**{k: round(v, 1) for k, v in self._used.items()},
                                 "other": round(max(0.0, self._cpu - credited), 1)},
                "rss_peak_mb": {k: {"sum": round(self._rss_sum[k] / 2**20), "max_process": round(self._rss_max[k] / 2**20)}
                                for k in COMPONENTS if self._rss_sum[k]}}


def _busy(times: Any) -> float:
    """CPU seconds the machine spent busy: user (guests' time included), nice, system, interrupts - not idle,
    I/O wait, or time the hypervisor gave another machine (steal)."""
    return sum(getattr(times, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))


def peak_rss_mb(pid: int | None) -> int | None:
    """The highest resident memory process ``pid`` has had so far (Linux's ``VmHWM``), MB; None if unknown."""
    try:
        for line in open(f"/proc/{pid}/status", encoding="ascii") if pid else ():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return None
