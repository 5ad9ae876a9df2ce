"""Provenance of an asked run: the begin task records who triggered it (Airflow's triggering user, not the
conf) and what was asked; the table page's data and ``eo history`` show it, with the run's own DAG."""
from __future__ import annotations

from types import SimpleNamespace

from exactly_once.ops.history import history
from exactly_once.ids import Interval
from exactly_once.ops.inspection import interval_view
from exactly_once.protocol.transaction import TwoPhaseCommitSink


def test_an_asked_reprocess_and_a_rollback_record_who_and_what(tmp_path):
    from exactly_once.airflow.operators import _asked
    from exactly_once.airflow.rollback import provenance

    dag_run = SimpleNamespace(run_id="manual__r1", dag_id="pv_pipeline", triggering_user_name="alice")
    conf = {"reprocess": True, "allow_shrinking": True, "requested_by": "mallory"}   # the conf cannot name the user
    asked = _asked({"dag_run": dag_run}, conf)
    assert asked == {"by": "alice", "action": "reprocess (allow shrinking)"}
    assert _asked({"dag_run": SimpleNamespace(triggering_user_name=None)}, {}) == {}      # a scheduled run

    sink = TwoPhaseCommitSink.at(str(tmp_path / "t"), pipeline="pv_pipeline", sink="t")
    iv = Interval.daily("2026-01-01")
    sink.begin(iv, meta={"run": {"run_id": "manual__r1", "dag_id": "pv_pipeline", **asked}})
    rb = SimpleNamespace(run_id="manual__r2", dag_id="eo_rollback", triggering_user_name="bob")
    sink.begin(iv, meta={"rollback_of": sink.ref(iv, 1).name,
                         "run": provenance({"dag_run": rb}, "rollback", to="e1")})
    e1, e2 = interval_view(sink, iv, with_recover=False).epochs
    assert (e1.action, e1.by, e1.run_dag) == ("reprocess (allow shrinking)", "alice", "pv_pipeline")
    assert (e2.action, e2.by, e2.run_dag, e2.run_id) == ("rollback to e1", "bob", "eo_rollback", "manual__r2")
    assert [r.asked for r in history(sink)] == ["reprocess (allow shrinking) by alice (pv_pipeline run manual__r1)",
                                                "rollback to e1 by bob (eo_rollback run manual__r2)"]
