"""The pipeline-level fault matrix (test_fault_matrix.py) on a Delta table: ``pv_pipeline``'s phases driven
the way Airflow runs them, with ``table_format="delta"``, every failpoint x {crash, error} locally and
every failpoint with ``crash`` on S3 (``error`` too where the publish is the Delta commit itself).

The same checks end every scenario, read the Delta way: the rows a Delta reader (delta-rs, newest
snapshot) sees equal the exact reader's and the clean run's, at the fault a reader saw the previous
snapshot or the complete new one, one ``<table>/<txn>/`` dir per committed epoch (gc removes the
superseded one by our log), no uncommitted transaction dir or checkpoint left, and the log consistent.
A commit outcome left unknown by a kill is resolved by a third party (``eo recover``) from our log and
the Delta table's application transaction (``txn`` appId/version).
"""
from __future__ import annotations

import pytest

from fault_matrix_world import (FULL, UNKNOWN, delta_local_world, delta_s3_world, fault_then_retry,  # noqa: F401
                                matrix, third_party_resolves, world)

pytest.importorskip("deltalake")
pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("kind,fp,action", matrix("delta-local", "delta-s3"))
def test_fault_then_airflow_retry_ends_like_a_clean_run_on_a_delta_table(kind, world, fp, action):
    fault_then_retry(world, fp, action)


@pytest.mark.parametrize("kind,case", [
    pytest.param(kind, c, id=f"{kind}-{c}", marks=[pytest.mark.s3] if kind.endswith("s3") else [])
    for kind in ("delta-local", "delta-s3") for c in UNKNOWN
    if FULL or kind == "delta-local" or c in ("decided-then-killed", "killed-before-deciding-gate-failed")])
def test_commit_outcome_unknown_on_a_delta_table_is_resolved_by_a_third_party(kind, world, case):
    third_party_resolves(world, case)
