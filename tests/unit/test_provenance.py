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


FORGED = ("late files\n  2026-01-01 00:00:00  2026-01-02 00:00:00  e7       COMMITTED  *     2026-01-01T00:00:00Z  2  "
          "1  reprocess by admin\r\x1b[2K\x1b]0;owned\x07\u202e" + "x" * 600)


def test_a_reason_sent_in_any_conf_is_recorded_and_printed_as_one_printable_line(tmp_path):
    """``eo_reason`` through Airflow's REST API / "Trigger w/ config" / CLI is not cleaned by the confirm step:
    the begin task records it as the page does (one printable line, at most 500 characters), and ``eo history``
    prints every cell as one printable line - also a record written raw before (an older version)."""
    from exactly_once.airflow.actions import reason_of
    from exactly_once.airflow.operators import _asked
    from exactly_once.airflow.rollback import provenance
    from exactly_once.ops.history import render

    clean = reason_of({"reason": FORGED})
    assert "\n" not in clean and "\x1b" not in clean and "\u202e" not in clean and len(clean) == 500
    dag_run = SimpleNamespace(run_id="manual__r1", dag_id="pv_pipeline", triggering_user_name="alice",
                              conf={"eo_action": "rollback", "to_version": "e1", "eo_reason": FORGED})
    assert provenance({"dag_run": dag_run}, "rollback", to="e1")["reason"] == clean
    assert _asked({"dag_run": dag_run}, {"reprocess": True, "eo_reason": FORGED})["reason"] == clean

    sink = TwoPhaseCommitSink.at(str(tmp_path / "t"), pipeline="pv_pipeline", sink="t")
    iv = Interval.daily("2026-01-01")
    sink.begin(iv, meta={"run": {"run_id": "manual__r1", "dag_id": "pv_pipeline", "by": "alice",
                                 "action": "reprocess", "reason": FORGED}})      # recorded raw (before the fix)
    sink.abort(sink.begin(iv, meta={"run": {"run_id": "r2"}}), reason="gate failed\n  forged row\x1b[2K")
    rows = history(sink)
    assert rows[0].asked.isprintable() and rows[0].asked.startswith('reprocess by alice because "late files 2026')
    out = render(sink, str(tmp_path / "t"), rows)
    assert len(out.splitlines()) == 4 and all(c.isprintable() for c in out.replace("\n", "")), repr(out)
    assert "gate failed forged row [2K" in out
    assert 'reprocess by alice because "late files 2026-01-01 00:00:00' in out
