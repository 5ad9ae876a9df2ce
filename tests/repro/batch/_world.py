"""Shared harness for the advb reproducers: a pv_pipeline root with days 1..N landed, day 1 committed,
the JVM-free batch write stand-in (tests/batch_helpers), and the oracle."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
for p in (str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)

from batch_helpers import batch_task, pv_oracle  # noqa: E402,F401
from fault_helpers import Driver, Setup, epoch_problems, leftovers, sink_of, visible_rows  # noqa: E402,F401
from tools.sample_data import generate  # noqa: E402

from exactly_once.ids import Interval  # noqa: E402
from exactly_once.records.txlog import State  # noqa: E402,F401

D1 = "2026-01-01"
DAYS = ["2026-01-02", "2026-01-03", "2026-01-04"]
ALL = [D1, *DAYS]


def world(base: str | None = None, **kw) -> Setup:
    base = Path(base or tempfile.mkdtemp(prefix="advb-"))
    root = base / f"s-{uuid.uuid4().hex[:8]}"
    generate(str(root / "landing"), ALL, events_per_day=60)
    setup = Setup(root=str(root), start=D1, reports=str(root / "reports"),
                  env={"EO_REPORTS_DIR": str(root / "reports")}, **kw)
    os.environ.update(setup.env)
    Driver(setup).clean_run(D1)
    return setup


def oracle(setup: Setup) -> dict[str, list]:
    return pv_oracle(setup.root, ALL)


def epochs(setup: Setup) -> dict[str, dict[int, str]]:
    sink = sink_of(setup)
    return {d: {e: s.state.value for e, s in sink.status(Interval.daily(d)).items()} for d in DAYS}


def report(setup: Setup, label: str) -> dict:
    exp, seen = oracle(setup), visible_rows(setup)
    sink = sink_of(setup)
    probs = {d: epoch_problems(sink, Interval.daily(d)) for d in ALL}
    out = {"label": label, "visible_days": sorted(seen), "rows_equal_oracle": {d: seen.get(d) == exp[d] for d in seen},
           "epochs": epochs(setup), "epoch_problems": {d: p for d, p in probs.items() if p},
           "leftovers": leftovers(sink)}
    print(out)
    return out
