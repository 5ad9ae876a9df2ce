"""pytest plugin of ``make mutants`` (:mod:`tools.mutants`): which test runs which line of the package.

Loaded with ``-p tools.mutants_cov`` in the coverage pass only. Coverage starts when this module is
imported (before any conftest imports the package, so module-level lines count as executed at import)
and every test's lines are recorded under the test's node id (a coverage *context*); each test's wall
time goes to ``$EO_MUTANTS_COVERAGE.durations.json``, so that a mutant runs its fastest tests first.
Child processes (the crash tests' ``run_child``) record their lines under the test's context too
(``tools/mutants_site/sitecustomize.py``); the runner combines every data file.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Iterator

import coverage
import pytest

_COV = coverage.Coverage(data_file=os.environ["EO_MUTANTS_COVERAGE"], data_suffix=True,
                         include=["*/exactly_once/*"], branch=False, config_file=False)
_COV.start()
_DURATIONS: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    _COV.switch_context(item.nodeid)
    os.environ["EO_MUTANTS_CONTEXT"] = item.nodeid  # the child processes it starts (tools/mutants_site)
    start = time.monotonic()
    yield
    os.environ.pop("EO_MUTANTS_CONTEXT", None)
    _DURATIONS[item.nodeid] = round(time.monotonic() - start, 3)
    _COV.switch_context("")


def pytest_unconfigure(config: Any) -> None:
    _COV.stop()
    _COV.save()
    with open(os.environ["EO_MUTANTS_COVERAGE"] + ".durations.json", "w") as f:
        json.dump(_DURATIONS, f, indent=0, sort_keys=True)
