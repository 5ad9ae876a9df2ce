"""commit skips the idle teardown (``CommitOperator.teardown_idle``) - and only then: task instances run through
the Task SDK's in-process runner (real XCom, task-state queries and the skip-downstream API), the write a
stand-in that pushes the real write's XCom (``{"spark": "submit", "attempt": try}``). The forced interleavings
are review 32's reproducers: a Clear of ``write`` or ``begin`` (Downstream not selected) while commit runs
re-arms the teardown for the new attempt begin opens; the skip must not take it away."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_helpers import Pipeline, session  # noqa: F401 - the module's metadata DB fixture
from test_interval_runs import land, month

from exactly_once.protocol.pipeline import IntervalRun

pytestmark = pytest.mark.airflow


class RealWrite(Pipeline):
    """``Pipeline`` whose stand-in write clears its XCom at its start and pushes the real write's on success."""

    def _stand_in_write(self, ti: Any, dr: Any) -> None:
        from airflow.models.xcom import XComModel
        from airflow.utils.state import TaskInstanceState

        XComModel.clear(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index,
                        session=self.session)  # what the execution API does when a new try starts
        self.session.commit()
        super()._stand_in_write(ti, dr)
        self.session.expire_all()
        if self.states(dr)["write"] == "success":
            XComModel.set(key="return_value", value={"spark": "submit", "attempt": ti.try_number},
                          dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index,
                          serialize=False, session=self.session)
            self.session.commit()


@pytest.fixture
def pipe(session, tmp_path, request) -> RealWrite:  # noqa: F811
    land(tmp_path, "2013-01", "a.csv", [1, 2])
    return RealWrite(session, tmp_path, "skip_" + request.node.name.replace("[", "_").replace("]", ""))


def staged(pipe: RealWrite) -> list[str]:
    staging = Path(pipe.sink.staging_dir(pipe.sink.ref(month(1), 1))).parent
    return sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()) if staging.exists() else []


def test_a_clean_run_skips_the_teardown_and_leaves_nothing(pipe):
    dr = pipe.create_run(1)
    states = pipe.drive(dr)
    assert states == {"begin": "success", "write": "success", "pre_commit": "success", "validate": "success",
                      "commit": "success", "abort": "skipped"}
    assert pipe.run_state(dr) == "success" and pipe.epochs() == {1: "COMMITTED"} and staged(pipe) == []
    assert pipe.note(dr) == "published e1: 1 row, 1 file"


@pytest.mark.parametrize("cleared", ["t.write", "t.begin"])
def test_a_clear_of_begin_or_write_while_commit_runs_keeps_the_teardown_for_the_new_attempt(pipe, monkeypatch,
                                                                                             cleared):
    """Airflow adds the setup and the teardown to a clear: begin, (write,) abort are reset while commit runs.
    Commit publishes e1 and must not skip the re-armed teardown: it ends e2, which begin opens next. Before
    the fix the run ended "success" with e2 OPEN and its files staged."""
    dr = pipe.create_run(1)
    pipe.drive(dr, until="t.commit")
    real = IntervalRun.commit

    def the_user_clears_meanwhile(self: IntervalRun, txn: Any) -> Any:
        from airflow import settings

        ui = settings.NonScopedSession()  # the API server's own session
        pipe.sdag.clear(task_ids=[cleared], run_id=dr.run_id, session=ui)
        ui.commit()
        ui.close()
        return real(self, txn)

    monkeypatch.setattr(IntervalRun, "commit", the_user_clears_meanwhile)
    pipe.drive(dr, until="t.begin")  # commit runs (and the clear with it); begin is next
    monkeypatch.setattr(IntervalRun, "commit", real)
    assert pipe.states(dr)["abort"] is None  # re-armed, not skipped
    states = pipe.drive(dr)
    assert states["abort"] == "success" and pipe.run_state(dr) == "success", states
    assert pipe.epochs() == {1: "COMMITTED", 2: "ABORTED"} and staged(pipe) == []
    assert pipe.live() == pipe.sink.ref(month(1), 1).name
