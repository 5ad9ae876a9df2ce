"""Issue 46 review finding 5: a commit task killed on its last try after its publish was recorded.

Airflow records a task's outlet (asset) events only when the task succeeds, and the OpenLineage provider
sends no event for a process that died. A commit killed after writing the ``published`` record (``by`` = its
task instance) on a try that has a retry left is re-announced by that retry (``endings.finished_before``); on
its last try the group's teardown announces it (``endings.lost_by_others``), through the one seam, once.

The DAG runs through Airflow's own code on a real metadata DB (the driver of ``airflow_helpers``: the
Task SDK's in-process runner, real XCom, task-state queries, outlets and asset events). The killed try is the
same in-process runner in a forked child that the failpoint ``commit.after_record=crash`` ends with
``os._exit(137)`` (as ``kill -9``) right after the record; the parent then does what the scheduler does when
a task's process dies (``TaskInstance.handle_failure``: failed with no try left, else up for retry).
"""
from __future__ import annotations

import faulthandler
import hashlib
import os
import sys
from typing import Any

import pytest

from airflow_helpers import Pipeline, session  # noqa: F401 - the module's metadata DB fixture
from test_interval_runs import land, month

from exactly_once.failpoints import CRASH_EXIT_CODE

pytestmark = pytest.mark.airflow


class Lost(Pipeline):
    """The monthly pipeline of ``airflow_helpers`` with its commit's retries as the test asks."""

    def events(self) -> list[str]:
        """The versions of the table's asset events (metadata DB ``asset_event``, the version in its extra)."""
        from airflow.models.asset import AssetEvent, AssetModel
        from sqlalchemy import select

        self.session.expire_all()
        query = (select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                 .where(AssetModel.uri == f"file://{self.cfg.table_url}").order_by(AssetEvent.id))
        return [e.extra["version"] for e in self.session.scalars(query)]

    def task_instance(self, dr: Any, task: str) -> Any:
        self.session.expire_all()
        [ti] = [t for t in dr.get_task_instances(session=self.session) if t.task_id == f"t.{task}"]
        return ti

    def kill_commit(self, dr: Any) -> int:
        """Run commit's next try in a forked child killed right after its publish is recorded; then fail the
        try as the scheduler does for a task whose process died. Returns the child's exit code."""
        from airflow import settings
        from airflow.sdk.definitions.dag import _run_task
        from airflow.sdk.execution_time import supervisor
        from airflow.utils.state import TaskInstanceState

        self.drive(dr, until="t.commit")
        schedulable, _ = dr.update_state(session=self.session)
        [ti] = [t for t in schedulable if t.task_id == "t.commit"]
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        self.session.commit()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            try:
                faulthandler.dump_traceback_later(300, exit=True, file=sys.__stderr__)  # a hang: fail, show where
                os.environ["EO_FAILPOINTS"] = "commit.after_record=crash"
                settings.engine.dispose(close=False)  # the parent's pooled connections stay the parent's
                supervisor.in_process_api_server.cache_clear()  # its event loop's thread is the parent's
                _run_task(ti=ti, task=self.dag.task_dict["t.commit"])
            finally:
                os._exit(1)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        ti = self.task_instance(dr, "commit")
        assert str(getattr(ti.state, "value", ti.state)) == "running"  # as the dead process left it
        ti.task = self.sdag.task_dict["t.commit"]
        ti.handle_failure("the task's process died (exit 137)", session=self.session)
        self.session.commit()
        return code


def fail_note_once(monkeypatch: Any, phase: str) -> list[int]:
    """The first try of ``phase`` fails after it announced (its note's XCom push: the execution API did not
    answer); returns the failed tries."""
    from exactly_once.airflow import endings

    real, failed = endings.leave_note, []

    def flaky(operator: Any, context: Any) -> None:
        if operator.phase == phase and not failed:
            failed.append(context["ti"].try_number)
            raise ConnectionError("the execution API did not answer")
        real(operator, context)

    monkeypatch.setattr(endings, "leave_note", flaky)
    return failed


@pytest.fixture
def pipe(session, tmp_path, request) -> Lost:  # noqa: F811 - the metadata DB fixture
    land(tmp_path, "2013-01", "a.csv", [1, 2])
    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    retries = {"t.commit": 1 if "retry_left" in name else 0}
    short = name if len(name) <= 48 else f"{name[:40]}_{hashlib.sha1(name.encode()).hexdigest()[:7]}"
    return Lost(session, tmp_path, short, retries=retries)  # the DAG id is the pipeline: short run names


def by_commit(pipe: Lost, dr: Any, epoch: int = 1) -> str:
    """The version ``epoch``, after asserting its ``published`` record names this run's commit (clear 0)."""
    st = pipe.sink.status(month(1))[epoch]
    assert st.published and st.records["published"]["by"] == f"{pipe.dag_id}/{dr.run_id}/t.commit/-1#0"
    return pipe.sink.ref(month(1), epoch).name


@pytest.mark.parametrize("teardown", ["ok", "retried", "blind"])
def test_a_commit_killed_after_its_publish_on_its_last_try_is_announced_once_by_the_teardown(pipe, teardown,
                                                                                            monkeypatch):
    """commit (no retries) is killed after its ``published`` record: no asset event, no lineage. The
    teardown announces the version: one asset event and one lineage output, from the teardown. ``retried``:
    the teardown's first try fails after announcing (Airflow drops that try's events; its FAIL event leaves
    the version to the retry) - still one of each. ``blind``: the teardown cannot read commit's state -
    it announces nothing and fails, naming the version (a duplicate would start consumers twice; the
    docstring of ``lost_by_others``).
    ``ok`` then clears the whole run: its new version is announced by its commit, the first not again."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    dr = pipe.create_run(1)
    assert pipe.kill_commit(dr) == CRASH_EXIT_CODE
    e1 = by_commit(pipe, dr)
    assert pipe.states(dr)["commit"] == "failed" and pipe.events() == [] and pipe.lineage == []
    if teardown == "retried":
        fail_note_once(monkeypatch, "abort")
    if teardown == "blind":
        def unavailable(**kwargs: Any) -> Any:
            raise ConnectionError("the execution API did not answer")

        monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(unavailable))
    states = pipe.drive(dr)
    if teardown == "blind":  # it fails, saying so (its retry would ask again), and guesses nothing
        assert states["abort"] == "failed" and pipe.events() == [] and pipe.lineage == [], states
        return
    assert states["abort"] == "success" and pipe.run_state(dr) == "failed", states
    assert pipe.tries(dr, "abort") == (2 if teardown == "retried" else 1)
    assert pipe.events() == [e1] and pipe.lineage == [("t.abort", [e1])], (pipe.events(), pipe.lineage)
    assert pipe.note(dr) == "published e1: 1 row, 1 file (publish finished by t.commit, which ended failed: " \
                            "announced by t.abort)"
    if teardown == "ok":
        pipe.sdag.clear(run_id=dr.run_id, session=pipe.session)  # Clear the run: everything re-runs
        pipe.session.commit()
        assert set(pipe.drive(dr).values()) == {"success"}
        e2 = pipe.sink.ref(month(1), 2).name
        assert pipe.live() == e2 and pipe.events() == [e1, e2]
        assert pipe.lineage == [("t.abort", [e1]), ("t.commit", [e2])]
    assert pipe.rows() == [{"n": 2, "total": 3, "month": "2013-01"}]


def test_a_commit_that_succeeded_leaves_its_teardown_nothing_to_announce(pipe):
    """The contrast: commit publishes and succeeds (Airflow recorded its event); the teardown runs (the write
    stand-in leaves no XCom, so commit does not skip it) and announces nothing."""
    dr = pipe.create_run(1)
    states = pipe.drive(dr)
    assert set(states.values()) == {"success"}, states
    e1 = by_commit(pipe, dr)
    assert pipe.events() == [e1] and pipe.lineage == [("t.commit", [e1])]


def test_a_commit_killed_after_its_publish_with_a_retry_left_is_announced_once_by_its_retry(pipe):
    """commit (one retry) is killed after its ``published`` record: its retry re-announces the version
    (``finished_before``), succeeds, and the teardown then announces nothing: still one of each."""
    dr = pipe.create_run(1)
    assert pipe.kill_commit(dr) == CRASH_EXIT_CODE
    e1 = by_commit(pipe, dr)
    assert pipe.states(dr)["commit"] == "up_for_retry" and pipe.events() == []
    states = pipe.drive(dr)
    assert set(states.values()) == {"success"} and pipe.tries(dr, "commit") == 2, states
    assert pipe.events() == [e1] and pipe.lineage == [("t.commit", [e1])]


def test_a_commit_failing_after_its_publish_on_its_last_try_is_in_one_lineage_event_the_teardowns(pipe, monkeypatch):
    """commit (no retries) publishes, announces and then fails with an error (its note's XCom push: the
    execution API did not answer): Airflow drops its asset event; its FAIL event must leave the version to
    the teardown, which announces both - one asset event, one lineage output. (Before, the FAIL event
    reported it and nobody sent the asset event.)"""
    failed = fail_note_once(monkeypatch, "commit")
    dr = pipe.create_run(1)
    states = pipe.drive(dr)
    assert failed == [1] and states["commit"] == "failed" and states["abort"] == "success", states
    e1 = by_commit(pipe, dr)
    assert pipe.events() == [e1] and pipe.lineage == [("t.abort", [e1])], (pipe.events(), pipe.lineage)


def test_a_run_id_created_again_never_takes_the_earlier_runs_publish_for_its_own(pipe):
    """Review 5 #4: ``airflow dags test`` twice for one date deletes the run and creates it again (same run id,
    clear 0). The first run's commit succeeded and announced e1; in the second the write fails, commit ends
    upstream_failed and the teardown runs: e1's ``by`` names this run id and clear, but it was published
    before this DAG run started - not this run's to announce (it was: a second asset event and lineage)."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import delete

    dr = pipe.create_run(1)
    assert set(pipe.drive(dr).values()) == {"success"}
    e1 = by_commit(pipe, dr)
    pipe.session.execute(delete(DagRun).where(DagRun.dag_id == pipe.dag_id, DagRun.run_id == dr.run_id))
    pipe.session.commit()
    again = pipe.create_run(1)
    assert again.run_id == dr.run_id and (again.clear_number or 0) == 0
    pipe.broken.add("2013-01")  # the write job fails this time
    states = pipe.drive(again)
    assert states["commit"] == "upstream_failed" and states["abort"] == "success", states
    assert pipe.live() == e1 and pipe.events() == [e1] and pipe.lineage == [("t.commit", [e1])]
