"""0.2's flat module names still import after 0.3's layers (exactly_once/moved.py), as the very same
module objects: a class, a monkeypatch or a pickle is the same whichever name a caller used."""
from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

from exactly_once import moved
from exactly_once.ids import Interval


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_an_old_name_is_the_new_module(old):
    new = importlib.import_module(f"exactly_once.{moved.MOVED[old]}")
    assert importlib.import_module(f"exactly_once.{old}") is new
    assert new.__spec__.name == f"exactly_once.{moved.MOVED[old]}"  # the alias leaves the module's own spec
    assert sys.modules[f"exactly_once.{old}"] is new


def test_old_names_work_in_a_fresh_interpreter_first():
    code = ("from exactly_once.transaction import TwoPhaseCommitSink\n"
            "from exactly_once.protocol.transaction import TwoPhaseCommitSink as T\n"
            "import exactly_once.storage_s3, exactly_once.storage.s3\n"
            "assert TwoPhaseCommitSink is T and exactly_once.storage_s3 is exactly_once.storage.s3\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_pickle_made_under_an_old_name_loads_under_the_new_one():
    from exactly_once import txlog  # noqa: F401 - the old name, imported first
    from exactly_once.records.txlog import State

    assert pickle.loads(pickle.dumps(State.COMMITTED)) is State.COMMITTED
    assert pickle.loads(pickle.dumps(Interval.daily("2026-01-01"))) == Interval.daily("2026-01-01")


def test_an_unknown_old_name_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("exactly_once.no_such_module")


def test_every_subpackage_export_resolves():
    for pkg in ("protocol", "records", "ops"):
        module = importlib.import_module(f"exactly_once.{pkg}")
        for name in module.__all__:
            assert getattr(module, name) is not None, f"exactly_once.{pkg}.{name}"


def test_the_top_level_api_names_the_pipeline_classes_without_loading_them_first():
    code = ("import sys, exactly_once\n"
            "assert 'exactly_once.protocol.pipeline' not in sys.modules\n"
            "from exactly_once import PipelineConfig, IntervalRun, BatchRun, Source\n"
            "from exactly_once.protocol.pipeline import IntervalRun as R\n"
            "assert IntervalRun is R and set(exactly_once.__all__) >= {'PipelineConfig', 'IntervalRun', 'BatchRun'}\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
