"""``exactly_once.quality.gx_fast``: GX's per-expectation bookkeeping made cheaper, every result unchanged.

One child process validates the same intervals - a passing one and every failing case of
``test_quality.py`` - first with GX's own methods (``EO_GX_FAST=0``), then with the faster ones, and
counts how often ``Expectation.configuration`` is rebuilt. The stored GX results (every expectation's
observed values, minus run times and ids), the verdicts and the failure lines must be equal.
"""
from __future__ import annotations

import datetime
import decimal
import enum
import json
import os
import pathlib
import subprocess
import sys
import uuid
from importlib.metadata import version

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

CHILD = r"""
import json, os, sys
from pathlib import Path
import test_quality as tq
from exactly_once.quality import gx_fast
from great_expectations.expectations.expectation import Expectation

calls = {"n": 0}
plain = Expectation.configuration.fget
def counted(self):
    calls["n"] += 1
    return plain(self)
Expectation.configuration = property(counted)

VOLATILE = {"run_id", "run_time", "validation_time", "batch_id", "id", "active_batch_definition",
            "batch_spec", "batch_markers", "batch_parameters", "checkpoint_id", "validation_id",
            "great_expectations_version", "expectation_suite_meta"}

def scrub(value):
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in sorted(value.items()) if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value

def stored(root):
    out = {}
    for path in sorted(Path(root, "_gx", "validations").rglob("*.json")):
        doc = json.loads(path.read_text())
        out[doc["suite_name"] + "/" + doc["meta"]["run_id"]["run_name"]] = scrub(doc)
    return out

def mode(fast):
    os.environ["EO_GX_FAST"] = "1" if fast else "0"
    gx_fast._state.clear()
    base = Path(sys.argv[1]) / ("fast" if fast else "plain")
    calls["n"] = 0
    verdicts = {}
    cases = {"good": None, **{name: mutate for name, (mutate, _) in tq.FAILING.items()}}
    for name, mutate in cases.items():
        o = tq.run(base, mutate, name=name, report_root=base / "reports")
        verdicts[name] = [o.passed, o.failures, {k: v for k, v in o.summary["suites"].items()},
                          o.summary["measured"]]
        for suite in verdicts[name][2].values():
            suite.pop("report")
    return {"on": gx_fast._state["on"], "json": gx_fast._state.get("json", False), "configurations": calls["n"],
            "verdicts": verdicts,
            "stored": stored(base / "reports")}

print(json.dumps({"plain": mode(False), "fast": mode(True)}, default=str))
"""


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "plugins"), str(ROOT / "tests"), str(ROOT / "tests" / "integration"), str(ROOT)])}
    base = tmp_path_factory.mktemp("gx-fast")
    out = subprocess.run([sys.executable, "-c", CHILD, str(base)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_verdict_failure_line_and_stored_result_is_the_same_with_and_without(both):
    plain, fast = both["plain"], both["fast"]
    assert plain["on"] is False
    assert set(plain["verdicts"]) == {"good", *__import__("test_quality").FAILING}
    assert fast["verdicts"] == plain["verdicts"]
    assert plain["verdicts"]["good"][0] is True and not any(v[0] for k, v in plain["verdicts"].items() if k != "good")
    assert len(plain["stored"]) >= 3 * len(plain["verdicts"])  # every suite of every case stored
    assert fast["stored"].keys() == plain["stored"].keys()
    for key in plain["stored"]:
        assert fast["stored"][key] == plain["stored"][key], key


def test_on_the_locked_gx_the_configuration_is_rebuilt_far_less(both):
    locked = _locked_gx()
    if version("great-expectations") != locked:  # another release: on only if its methods' source is the same
        pytest.skip(f"great-expectations {version('great-expectations')} is not the locked {locked}")
    assert both["fast"]["on"] is True and both["fast"]["json"] is True and both["plain"]["json"] is False
    assert both["fast"]["configurations"] * 3 < both["plain"]["configurations"], \
        (both["fast"]["configurations"], both["plain"]["configurations"])


def test_another_release_of_the_methods_is_left_alone(monkeypatch):
    """A method whose source is not the one the copy was written against (its digest differs): GX's stays."""
    code = ("from exactly_once.quality import gx_fast\n"
            "from great_expectations.expectations.expectation import Expectation\n"
            "gx_fast.KNOWN['_get_runtime_kwargs'] = '0' * 64\n"
            "before = Expectation._get_runtime_kwargs\n"
            "print(gx_fast.install(), Expectation._get_runtime_kwargs is before)\n")
    assert _printed(code) == ["False", "True"]


def _printed(code: str) -> list[str]:
    """What ``code`` prints (split), run in a new process with gx_fast allowed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "plugins"), "EO_GX_FAST": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


class Tag(enum.Enum):
    A = "a"


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


PLAIN_JSON_CASES = [
    None, True, False, 0, -5, 2**70, 1.5, -0.0, float("inf"), float("-inf"), float("nan"), "", "x", "\u00fcn\u00ef",
    [], (), [None, [None, (1, "a")]], {"a": None, 1: 2, (1, 2): "t", None: 0, 2.5: [float("nan")]},
    {"nested": {"l": [1, None, {"b": float("nan")}], "t": (1, "a"), "empty": {}}},
    # handed to GX's own function (each a type the short cut does not take), also inside plain containers
    np.int64(3), np.float64(2.5), np.float32(1.1), np.bool_(True), np.array([1, 2]), np.datetime64("2026-01-02"),
    pd.Timestamp("2026-01-02T03:04:05Z"), datetime.date(2026, 1, 2), decimal.Decimal("1.5"), {7}, range(3),
    uuid.UUID(int=5), b"xy", pathlib.PurePosixPath("/a/b"), Tag.A, Level.LOW, Name("n"), pd.NA, pd.NaT,
    pd.Series([1, 2], name="v"), pd.DataFrame({"a": [1, None]}), {"k": np.int64(4), "d": datetime.date(2026, 1, 3)},
    [np.float64("nan"), Level.LOW, Name("m")], ({"deep": [{"x": np.int64(1)}]},),
]


def _typed(value):
    """``value`` with every leaf's type spelled out (``1 == 1.0 == True`` in Python; NaN != NaN)."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, "nan" if value != value else repr(value))


@pytest.mark.parametrize("value", PLAIN_JSON_CASES, ids=lambda v: type(v).__name__)
def test_plain_json_converts_every_value_as_gx_does(value):
    """gx_fast.plain_json against GX's own convert_to_json_serializable: the same output, type for type."""
    from great_expectations import util

    from exactly_once.quality import gx_fast

    original = getattr(util.convert_to_json_serializable, "_eo_original", util.convert_to_json_serializable)
    assert gx_fast.digest(original) in gx_fast.JSON_KNOWN or version("great-expectations") != _locked_gx()
    fast = gx_fast.plain_json(original)
    assert _typed(fast(value)) == _typed(original(value))


def test_another_release_of_the_json_conversion_is_left_alone():
    """GX's convert_to_json_serializable whose source is not the one plain_json knows: GX's stays, everywhere."""
    code = ("from exactly_once.quality import gx_fast\n"
            "import great_expectations.util as util, great_expectations.core.id_dict as id_dict\n"
            "gx_fast.JSON_KNOWN = frozenset({'0' * 64})\n"
            "before = util.convert_to_json_serializable\n"
            "print(gx_fast.install_plain_json(), util.convert_to_json_serializable is before,\n"
            "      id_dict.convert_to_json_serializable is before)\n")
    assert _printed(code) == ["False", "True", "True"]


def test_gx_s_function_keeps_its_name_and_pickles_after_the_install():
    """Review 41 (b01): the short cut stands in for GX's public function - its name, doc and signature, and a
    pickle of it by reference (a process pool shipping it) gives it back."""
    code = ("import inspect, pickle\n"
            "import great_expectations.util as util\n"
            "from exactly_once.quality import gx_fast\n"
            "before = util.convert_to_json_serializable\n"
            "assert gx_fast.install_plain_json() and util.convert_to_json_serializable is not before\n"
            "fast = util.convert_to_json_serializable\n"
            "print(pickle.loads(pickle.dumps(fast)) is fast, fast.__qualname__ == before.__qualname__,\n"
            "      fast.__module__ == before.__module__, fast.__doc__ == before.__doc__,\n"
            "      inspect.signature(fast) == inspect.signature(before))\n")
    assert _printed(code) == ["True"] * 5


def _locked_gx() -> str:
    return next(line.split("==")[1].strip() for line in (ROOT / "requirements.lock").read_text().splitlines()
                if line.startswith("great-expectations=="))


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "tests" / "repro" / "gate_fast").glob("r*.py")))
def test_review_36_reproducers_hold(script):
    """Adversarial review 36: r01 - a subclass overriding one of the methods keeps its override (a failing
    suite passed with the copies); r02 - two files spelling one suite differently share one definition
    (they invalidated each other on every validation). Each exits 1 while its break shows."""
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "repro" / "gate_fast" / script)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "EO_GX_FAST": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
