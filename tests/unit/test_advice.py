"""Advice that works where the user is: no library message names a ``make`` target unless the library runs
from a checkout (``exactly_once.advice``), and what it names instead exists in a wheel-only deployment."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "plugins" / "exactly_once"


def make_targets() -> list[str]:
    phony = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith(".PHONY:"))
    return phony.split(":", 1)[1].split()


def strings_shown(path: Path) -> list[str]:
    """The string constants of a module that can reach a user: all but docstrings (cli.py's module docstring
    counts: ``eo --help`` prints it)."""
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) + (() if path.name == "cli.py" else (ast.Module,))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, kinds) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def named_make() -> re.Pattern:
    return re.compile(r"\bmake (%s)\b" % "|".join(map(re.escape, make_targets())))


def test_only_the_advice_module_names_make_targets():
    named = named_make()
    found = {f"{path.relative_to(ROOT)}: {s[:80]!r}" for path in LIBRARY.rglob("*.py") if path.name != "advice.py"
             for s in strings_shown(path) if named.search(s)}
    assert not found, f"route these through exactly_once.advice (make only in a checkout): {sorted(found)}"


PROBE = r'''
import json, sys
from datetime import datetime, timezone
from exactly_once import advice
from exactly_once.errors import PredecessorPendingError
from exactly_once.ids import Interval
from exactly_once.protocol.config import PipelineConfig
from exactly_once.protocol.pipeline import IntervalRun

root = sys.argv[1]
cfg = PipelineConfig(pipeline="p", sink="t", application="job.py", root=root, sources="src", stateful=True,
                     start=datetime(2026, 1, 1, tzinfo=timezone.utc))
try:
    IntervalRun(cfg, Interval.daily("2026-01-03")).predecessor()
except PredecessorPendingError as exc:
    pending = str(exc)
print(json.dumps({"checkout": advice.in_checkout(), "pending": pending,
                  "reprocess": advice.reprocess("p", root + "/warehouse/t", "2026-01-03T00:00:00+00:00")}))
'''


def _probe(package_parent: Path, data: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(data)], env={"PYTHONPATH": str(package_parent),
                                                                        "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=120, cwd=data)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_outside_a_checkout_the_advice_names_eo_and_airflow_and_never_make(tmp_path):
    """The library copied out of the checkout (as a wheel installs it): its messages name ``eo reprocess``
    and Airflow's backfill; from the checkout the same messages add the ``make`` line second."""
    installed = tmp_path / "site-packages"
    shutil.copytree(LIBRARY, installed / "exactly_once", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "data" / "landing" / "src").mkdir(parents=True)
    wheel = _probe(installed, tmp_path / "data")
    checkout = _probe(ROOT / "plugins", tmp_path / "data")
    assert (wheel["checkout"], checkout["checkout"]) == (False, True)
    for said in (wheel["pending"], wheel["reprocess"]):
        assert not named_make().search(said), said
    assert ("`airflow backfill create --dag-id p --from-date <its start> --to-date <its start> --reprocess-behavior "
            "completed`" in wheel["pending"])     # its run may exist and have failed: test_airflow_operations
    assert wheel["reprocess"].startswith(f"`eo reprocess {tmp_path}/data/warehouse/t --interval 2026-01-03T00:00:00")
    for said in (checkout["pending"], checkout["reprocess"]):  # the make line comes second, in a checkout only
        first = min(i for i in (said.find("`eo "), said.find("`airflow ")) if i >= 0)
        assert first < said.find("; in a checkout: make "), said
