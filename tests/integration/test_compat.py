"""The compatibility matrix (``make compat``, tools/compat.py): one interval on each tested corner.

* airflow-oldest: the built wheel ``pip install``-ed into a fresh venv that already runs Airflow 3.1
  with the lower bound of every range (it must leave them installed), then the README's stateless DAG
  for one interval through ``airflow dags test``: the table holds the interval's rows, and Airflow
  loads the plugin once, from the entry point alone and beside the repo's plugins/eo_plugin.py; then the
  user path (tools/compat_user.py): a yearly PostgreSQL pipeline from 1952 under that Airflow's scheduler,
  a backfill killed mid-write once, ``eo reprocess`` by a non-admin through the REST API, ``eo rerun-stale``,
  the table page's rollback - each checked against a reference;
* airflow-newest: the same with the newest versions the ranges allow (Airflow 3.3);
* job-pyspark-3.5 / job-pyspark-4.1: exactly_once.job and .contracts import in a venv with only
  pyspark, pyarrow and fsspec (no Airflow), and the interval's write runs there by spark-submit with the
  wheel on --py-files.

Slow, so opt-in with ``EO_COMPAT=1`` (a venv per corner, cached under EO_COMPAT_CACHE; the oldest Airflow
corner is always built fresh).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tools.compat import CORNERS, build_wheel, check_corner

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.airflow,
              pytest.mark.skipif(os.environ.get("EO_COMPAT") != "1",
                                 reason="the compatibility matrix is opt-in (minutes per corner): EO_COMPAT=1, "
                                        "or `make compat`")]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.mark.parametrize("corner", CORNERS, ids=[c.name for c in CORNERS])
def test_corner(corner, wheel):
    if corner.name == "airflow-oldest":  # a fresh venv with only that Airflow, then pip install the wheel
        with tempfile.TemporaryDirectory(prefix="eo-compat-fresh-") as cache:
            result = check_corner(corner, wheel, Path(cache))
    else:
        result = check_corner(corner, wheel, Path(os.environ.get("EO_COMPAT_CACHE") or "~/.cache/eo-compat").expanduser())
    assert result["corner"] == corner.name
