"""The fault matrix at the PIPELINE level: every failpoint x {crash, error} x {local, S3}.

``pv_pipeline``'s phases (:class:`exactly_once.protocol.pipeline.IntervalRun`: begin -> write -> pre_commit ->
validate -> commit, abort as the teardown) are driven the way Airflow runs them, one task at a time,
handing on only what XCom carries. The write task is ``fault_helpers.stage_write`` (the Spark job's
output contract computed by ``tests/reference_pv.py``, with ``failpoint("write.partial")`` where the job
has it), so S3 needs no JVM.

* ``crash``: every task of the first attempt runs in its own child process with
  ``EO_FAILPOINTS=<name>=crash``; the failpoint kills it (``os._exit(137)``, like ``kill -9``).
* ``error``: the tasks run in this process and the failpoint raises out of the task.

Then the retry Airflow would run, in fresh processes without failpoints: the failed task again and the
rest of the run (a crash in ``begin``: a new begin; a failed teardown: the teardown again). A task that
fails with an error no retry can fix (a failed quality gate) aborts in the task, like the operators do.

Checked after every scenario: the visible table equals the clean run's (row set and a checksum over the
sorted rows; locally through ``pyarrow.dataset`` with hive partitioning *and* the exact reader, on S3
through ``sink.live_files``), one physical version per committed epoch, no staging leftovers, and the
log is consistent (each epoch ended COMMITTED+published or ABORTED; the live version is the newest
committed epoch). At the moment of the fault a reader sees the previous state or the complete new
version, never a part.

The interval under test is day 2 of a stateful pipeline (it reads day 1's committed checkpoint). Day 1
is committed once per storage into a template root that every scenario copies, to keep the runtime low
(tests/fault_matrix_world.py: the world, the driver, the checks). The Spark Connect cells are in
test_fault_matrix_connect.py, the same matrix on a Delta table in test_fault_matrix_delta.py.
"""
from __future__ import annotations

import pytest

from fault_helpers import Driver, sink_of, visible_rows
from fault_matrix_world import (D1, D2, FULL, IV2, LOCAL, S3, UNKNOWN,  # noqa: F401
                                assert_idle_and_consistent, third_party_resolves,
                                assert_output, count, fault_then_retry, figures, local_world, matrix, s3_world, world)

from exactly_once.failpoints import CRASH_EXIT_CODE
from exactly_once.records.txlog import State

pytestmark = pytest.mark.timeout(600)


# ------------------------------------------------------------------------------------------ the matrix
@pytest.mark.parametrize("kind,fp,action", matrix())
def test_fault_then_airflow_retry_ends_like_a_clean_run(kind, world, fp, action):
    fault_then_retry(world, fp, action)


@pytest.mark.parametrize("kind", [LOCAL] + ([S3] if FULL else []))
def test_teardown_abort_crashing_halfway_is_finished_by_its_retry(kind, world):
    """The teardown itself (not the gate's in-task abort) dies halfway: the write task fails for good
    (``write.partial=error`` on every attempt), the teardown crashes at ``abort.mid``; its retry finishes
    the abort, and a later run of the interval publishes the clean version."""
    figures()["scenarios"] += 1
    setup = world.fresh()
    drv = Driver(setup)
    spec = "write.partial=error,abort.mid=crash"
    began = count(drv.task(D2, "begin", {}, child=True, failpoints=spec))
    xcom = {"txn": began.result["txn"], "spec": began.result["spec"]}
    for _ in range(2):  # the write and its retry both fail
        out = count(drv.task(D2, "write", xcom, child=True, failpoints=spec))
        assert out.error == "FailpointError", out
    td = count(drv.task(D2, "abort", xcom, child=True, failpoints=spec))
    assert td.exit == CRASH_EXIT_CODE, td
    assert visible_rows(setup) == {D1: world.expected[D1]}
    sink = sink_of(setup)
    assert sink.status(IV2)[1].state is State.ABORTED  # decided before the crash
    assert sink.storage.list_names(sink.storage.join(sink.home, "_staging")), "the crash left staging behind"
    td = count(drv.task(D2, "abort", xcom, child=True))
    assert td.ok and td.result == "ABORTED", td
    assert_idle_and_consistent(setup, committed_epochs=0)
    Driver(setup).clean_run(D2, child=True)
    assert_output(setup, world.expected)
    assert_idle_and_consistent(setup, committed_epochs=1)


# ------------------------------------------------------------------------- commit outcome unknown
@pytest.mark.parametrize("kind,case", [pytest.param("local", c, id=f"local-{c}") for c in UNKNOWN] + [
    pytest.param("s3", c, id=f"s3-{c}", marks=pytest.mark.s3) for c in UNKNOWN
    if FULL or c in ("decided-then-killed", "killed-before-deciding-gate-failed")])
def test_commit_outcome_unknown_is_resolved_by_a_third_party(kind, world, case):
    third_party_resolves(world, case)
