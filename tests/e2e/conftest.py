"""The e2e DAG runs send their write phase to the ONE shared Spark Connect server (``spark_connect`` in
tests/conftest.py) through ``EO_SPARK_REMOTE``, so a DAG run pays no JVM start. A test marked
``spark_submit`` keeps spark-submit (one e2e run does, so that path stays tested through Airflow)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def e2e_spark(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """``EO_SPARK_REMOTE`` for the test's DAG runs: the shared server, or unset under ``spark_submit``."""
    if request.node.get_closest_marker("spark_submit"):
        monkeypatch.delenv("EO_SPARK_REMOTE", raising=False)
        return None
    remote = request.getfixturevalue("spark_connect")
    monkeypatch.setenv("EO_SPARK_REMOTE", remote)
    return remote
