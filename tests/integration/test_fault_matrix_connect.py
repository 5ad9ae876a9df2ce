"""The fault matrix's Spark Connect cells (see test_fault_matrix.py for the checks): the write task is a Spark
Connect client of the ONE shared server (tests/conftest.py ``spark_connect``) running the real pv job.

* a failpoint in the write (crash, error) or in the commit's publish, then Airflow's retries;
* the write task's process killed with SIGKILL while its query writes into the staging dir: the query
  outlives its client on the server until the write's retry, or the teardown, interrupts it.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from exactly_once.ops.maintenance import gc
from connect_jobs import SLOW_FIRST_JOB
from fault_helpers import APPLICATION, PHASES, Driver, sink_of, start_child, visible_rows
from fault_matrix_world import (D1, D2, IV2, LOCAL, PART2, assert_idle_and_consistent, assert_output,  # noqa: F401
                                count, fault_then_retry, figures, local_world, world)

from exactly_once.job.connect import interrupt_writes
from exactly_once.contracts import JobSpec
from exactly_once.records.txlog import State

pytestmark = pytest.mark.timeout(600)


# the Spark Connect path: the write task is a Spark Connect client of the shared server (the real pv job)
CONNECT_CELLS = [("write.partial", "crash"), ("write.partial", "error"), ("commit.mid_publish", "crash")]


@pytest.mark.spark
@pytest.mark.parametrize("kind,fp,action", [pytest.param("local", fp, a, id=f"connect-{fp}-{a}")
                                            for fp, a in CONNECT_CELLS])
def test_fault_over_spark_connect_then_airflow_retry_ends_like_a_clean_run(kind, world, fp, action,
                                                                             spark_connect):
    fault_then_retry(world, fp, action, spark_remote=spark_connect)


@pytest.mark.spark
@pytest.mark.parametrize("kind", [LOCAL])
@pytest.mark.parametrize("then", ["retry", "teardown"])
def test_client_killed_mid_write_over_spark_connect(kind, world, then, spark_connect, tmp_path):
    """The write task's process (a Spark Connect client) is killed with SIGKILL while its query writes
    into the staging dir; that query keeps running on the server. ``retry``: the write's retry interrupts
    it by tag before it writes again, and the run commits exactly the clean output. ``teardown``: the
    write fails for good and the teardown interrupts it before deleting the staging dir - nothing
    appears there afterwards, gc finds nothing, and a later run commits the clean output.

    Spark's task kill is cooperative: a task that ignored it (see ``connect_jobs.SLOW_FIRST_JOB``) could
    still create a file after the abort. Such a late file is simulated after the teardown: it lands under
    a committer's hidden ``_temporary`` name, no reader sees it, and gc deletes the staging dir again."""
    figures()["scenarios"] += 1
    first, started = tmp_path / "first", tmp_path / "started"
    job = tmp_path / "slow_first_job.py"
    job.write_text(SLOW_FIRST_JOB.format(job=APPLICATION, first=str(first), started=str(started)))
    setup = world.fresh(spark_remote=spark_connect, application=str(job))
    drv = Driver(setup)
    began = count(drv.task(D2, "begin", {}, child=True))
    xcom = {"txn": began.result["txn"], "spec": began.result["spec"]}
    spec = JobSpec.from_json(Path(xcom["spec"]).read_bytes())
    proc, _ = start_child(setup, D2, "write", xcom, attempt=1)
    temporary = Path(spec.data_dir) / PART2 / "_temporary"
    deadline = time.monotonic() + 180
    while not (started.exists() and temporary.is_dir()) and proc.is_alive():
        assert time.monotonic() < deadline, "the write never started"
        time.sleep(0.2)
    assert proc.is_alive(), f"the write ended early (exit {proc.exitcode})"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    figures()["kills"] += 1
    sink = sink_of(setup)
    if then == "retry":
        for phase in PHASES[1:]:
            out = count(drv.task(D2, phase, xcom, child=True, **({"attempt": 2} if phase == "write" else {})))
            assert out.ok, out
        assert count(drv.task(D2, "abort", xcom, child=True)).ok
        assert_output(setup, world.expected)
        assert {e: st.state for e, st in sink.status(IV2).items()} == {1: State.COMMITTED}
        assert_idle_and_consistent(setup, committed_epochs=1)
        return
    td = count(drv.task(D2, "abort", xcom, child=True))
    assert td.ok and td.result == "ABORTED", td
    staging = Path(spec.staging_dir)
    assert not staging.exists(), sorted(map(str, staging.rglob("*")))
    # the interrupted query is over: a second interrupt finds nothing, and nothing appeared late
    assert interrupt_writes(spark_connect, spec.txn, [1], scope=spec.session_scope) == []
    assert not staging.exists(), sorted(map(str, staging.rglob("*")))
    assert gc(sink, min_age=0)["staging"] == []
    late = Path(spec.data_dir) / PART2 / "_temporary" / "0" / "_temporary" / "attempt_x" / "part-00000.parquet"
    late.parent.mkdir(parents=True)
    late.write_bytes(b"PAR1 a zombie task's output")
    assert visible_rows(setup) == {D1: world.expected[D1]}
    report = gc(sink, min_age=0)  # its recover pass cleans the aborted transaction's leftovers up
    assert not staging.exists() and [r for r in report["recovered"] if r.startswith(spec.txn)], report
    assert_idle_and_consistent(setup, committed_epochs=0)
    Driver(setup.replace(application=APPLICATION)).clean_run(D2, child=True)
    assert_output(setup, world.expected)
    assert_idle_and_consistent(setup, committed_epochs=1)
