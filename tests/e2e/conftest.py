"""End-to-end fixtures: whole DAG runs through ``airflow dags test`` on an isolated data root."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import need


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    """A fresh ``EO_DATA_ROOT``; Airflow retries are fast but real (1 s base delay)."""
    need(os.path.exists("/usr/bin/java") or bool(os.environ.get("JAVA_HOME")), "Java is not installed")
    root = tmp_path / "data"
    monkeypatch.setenv("EO_DATA_ROOT", str(root))
    monkeypatch.setenv("EO_RETRY_DELAY_SECONDS", "1")
    monkeypatch.setenv("EO_RETRIES", "0")
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    return Path(root)
