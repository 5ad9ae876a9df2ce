"""One real ``airflow api-server`` for the table page's action tests (``ui``, package-scoped: the tests of both
modules run against it, in file order - a module's tests continue from the state the earlier ones left).

Users: ``admin`` (may edit every DAG), ``viewer`` (may read, not edit), ``editor`` (not an admin, may edit DAGs).
The table ``app_pv`` of ``pv_pipeline``: day 1 committed twice (e1, then a reprocess e2 with another state), day
2 computed from e1's state - so day 2 is stale. The DAG ends at day 8 (``EO_PV_END``: its ``end_date``)."""
from __future__ import annotations

import os

import pytest

from actions_helpers import D1, D2, END, PIPELINE, SINK, USERS
from ui_server import commit_day


@pytest.fixture(scope="package")
def ui(tmp_path_factory):
    from ui_server import api_server

    from exactly_once.airflow import tables
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    base = tmp_path_factory.mktemp("actions")
    root = base / "data"
    (root / "landing" / "app_logs").mkdir(parents=True)
    url = str(root / "warehouse" / SINK)
    sink = TwoPhaseCommitSink.at(url, pipeline=PIPELINE, sink=SINK, require_validation=True)
    d1 = commit_day(sink, D1, "run-d1", "s1")
    commit_day(sink, D2, "run-d2", "s2", prev=d1)
    commit_day(sink, D1, "run-d1-reprocess", "s1-new")                     # day 2 read e1's state: stale
    saved = {k: os.environ.get(k) for k in ("EO_DATA_ROOT", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS")}
    # pv_pipeline ends at day 8 (its end_date: a DAG that ended): actions on its last interval get their tasks
    with api_server(base, root, USERS, {"EO_PV_END": END}) as server:
        # the worker's view (this process runs the triggered task): same data root, same users
        os.environ["EO_DATA_ROOT"] = str(root)
        os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = server["env"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
        tables._cache["stamp"] = None
        try:
            yield {**server, "root": root, "table_url": url, "sink": sink}
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
            tables._cache["stamp"] = None
