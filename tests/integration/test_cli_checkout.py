"""``eo status --dag pv_pipeline`` as the README writes it, in a fresh checkout's root: no AIRFLOW_HOME,
no Airflow configuration (but plugins loaded at import), nothing run yet. The DAG is found in the checkout's
``dags/``."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import ROOT


def test_status_of_a_dag_works_from_a_fresh_checkouts_root(tmp_path):
    checkout = tmp_path / "checkout"
    for folder in ("dags", "expectations", "spark_jobs"):
        shutil.copytree(ROOT / folder, checkout / folder)
    (tmp_path / "home").mkdir()
    # plugins loaded when Airflow is imported (as many deployments set it): the package's own plugin, from its
    # entry point, must not find eo's modules half-imported ("Failed to import plugin exactly_once ...")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT / "plugins"),
           "GX_ANALYTICS_ENABLED": "false", "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False"}
    done = subprocess.run([sys.executable, "-m", "exactly_once.cli", "status", "--dag", "pv_pipeline"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Failed to import plugin" not in done.stdout + done.stderr, done.stderr[-2000:]
    assert f"pv_pipeline/app_pv: {checkout / 'data' / 'warehouse' / 'app_pv'}" in done.stdout.splitlines()
    assert (checkout / ".airflow").is_dir() and not (tmp_path / "home" / "airflow").exists()  # the checkout's home
