"""Issue 46, the review of the recover's and RollbackOperator's announcements (session 18): each test was a
reproducer of a publish left unannounced, announced twice or under the wrong interval, or a run note that
lied - it failed before the fix. Same harness as ``test_publish_endings`` (real metadata DB, the Task SDK's
in-process runner, a stand-in write job)."""
from __future__ import annotations

from typing import Any

import pytest

from endings_helpers import decide_unpublished, ops_run, show
from test_interval_runs import land, month
from test_publish_endings import MONTHS, announced, pipe, session  # noqa: F401 - fixtures
from test_publish_endings_actions import chained, from_the_page  # noqa: F401 - the stateful pipeline fixture

pytestmark = pytest.mark.airflow


# r01_recover_seam_error_swallowed: found by the review of issue 46 (session 18); it reproduced before the fix
def test_recover_whose_seam_fails_still_announces(pipe, monkeypatch):
    from exactly_once.protocol.pipeline import IntervalRun

    pipe.run("single", MONTHS)
    events, lineage = announced(pipe)
    land(pipe.root, "2013-02", "b.csv", [100])
    decided = decide_unpublished(pipe, monkeypatch, 2, 1, from_page=True)

    real, failed = IntervalRun._write_report, []

    def flaky(self: Any, summary: dict[str, Any]) -> None:  # the reports storage answers once with an error
        if not failed:
            failed.append(summary["version"])
            raise OSError("reports storage: connection reset by peer")
        real(self, summary)

    monkeypatch.setattr(IntervalRun, "_write_report", flaky)
    status, fix = from_the_page(pipe, monkeypatch, "recover", {"reason": "the worker was lost"})
    assert status == 200 and fix is not None
    states = pipe.drive(fix)
    e2 = decided[0].name
    show(pipe, "after recover")
    print(f"recover run: {pipe.run_state(fix)}, states {states}, begin tries {pipe.tries(fix, 'begin')}; "
          f"note: {pipe.note(fix)!r}; report write failed for {failed}")
    print(f"e2 live: {pipe.live(2) == e2}, published record: {pipe.sink.status(month(2))[2].published}")
    assert pipe.live(2) == e2
    assert announced(pipe) == (sorted([*events, e2]), sorted([*lineage, e2])), \
        f"BREAK: {e2} is live but has no asset event / lineage output: {announced(pipe)}"


# r04_predecessor_publish_lost_on_retry: found by the review of issue 46 (session 18); it reproduced before the fix
def test_a_predecessor_publish_finished_by_a_begin_whose_try_failed_is_announced(chained, monkeypatch):
    from exactly_once.airflow import endings

    pipe = chained
    pipe.run("single", MONTHS)
    events, lineage = announced(pipe)
    land(pipe.root, "2013-02", "b.csv", [100])
    decided = decide_unpublished(pipe, monkeypatch, 2, 1)
    feb = decided[0].name

    real, failed = endings.leave_note, []

    def flaky(operator: Any, context: Any) -> None:  # begin's first try: the note's push gets no answer
        if operator.phase == "begin" and not failed:
            failed.append(context["ti"].run_id)
            raise ConnectionError("the execution API did not answer")
        real(operator, context)

    monkeypatch.setattr(endings, "leave_note", flaky)
    mar = pipe.manual(3, {"reprocess": True}, 1)
    states = pipe.drive(mar)
    show(pipe, "after March's run")
    print(f"March's run: {pipe.run_state(mar)} {states}; begin tries {pipe.tries(mar, 'begin')}; note {pipe.note(mar)!r}")
    st = pipe.sink.status(month(2))[decided[0].epoch]
    print(f"{feb}: published={st.published} by={(st.records.get('published') or {}).get('by')}; "
          f"live Feb = {pipe.live(2)}")
    assert failed and st.published and pipe.live(2) == feb
    ev, lin = announced(pipe)
    assert ev.count(feb) == 1 and lin.count(feb) == 1, \
        f"BREAK: {feb} is live (finished by March's begin) but announced {ev.count(feb)}x events, {lin.count(feb)}x lineage"


# r10_batched_run_finishes_own_publish_then_notes_it_before: found by the review of issue 46 (session 18); it reproduced before the fix
@pytest.mark.parametrize("way", ["backfill", "range"])
def test_a_batched_run_that_finishes_its_own_decided_publish_announces_it(pipe, way, monkeypatch):
    from airflow.utils.state import DagRunState

    dr = pipe.create_run(2)
    monkeypatch.setenv("EO_FAILPOINTS", "commit.before_publish=error")
    pipe.drive(dr, until="t.abort")
    monkeypatch.delenv("EO_FAILPOINTS")
    dr.set_state(DagRunState.FAILED)
    pipe.session.commit()
    decided = pipe.sink.committed(month(2))
    assert decided is not None and not decided[1].published and pipe.events() == []
    runs = pipe.backfill([2], "failed") if way == "backfill" else [pipe.range_run(2, 3)]
    for r in runs:
        states = pipe.drive(r)
        print(f"{way} run {r.run_id}: {pipe.run_state(r)} {states}; note {pipe.note(r)!r}")
    show(pipe, way)
    st = pipe.sink.status(month(2))[decided[0].epoch]
    feb = decided[0].name
    print(f"{feb}: published={st.published} by={(st.records.get('published') or {}).get('by')}")
    assert st.published and pipe.live(2) == feb
    ev, lin = announced(pipe)
    assert ev.count(feb) == 1 and lin.count(feb) == 1, \
        f"BREAK: {feb} went live (finished by the {way} run's begin) - announced {ev.count(feb)}x events, " \
        f"{lin.count(feb)}x lineage"


# r11_recreated_run_id_recover_reannounces: found by the review of issue 46 (session 18); it reproduced before the fix
def test_a_recreated_recover_run_does_not_reannounce(pipe, monkeypatch):
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    pipe.run("single", MONTHS)
    land(pipe.root, "2013-02", "b.csv", [100])
    feb = decide_unpublished(pipe, monkeypatch, 2, 1)[0].name
    conf = {"eo_action": "recover", "sinks": [pipe.cfg.sink]}
    first = pipe.manual(3, conf, 7)
    pipe.drive(first)
    show(pipe, "first recover run")
    assert announced(pipe)[0].count(feb) == 1 and pipe.run_state(first) == "success"

    # `airflow dags test` again for the same date: the run is deleted and created anew (same run id, clear 0)
    run_id = first.run_id
    pipe.session.delete(first)  # the ORM's cascade removes its task instances, as dags test's delete does
    pipe.session.commit()
    pipe.session.expire_all()
    again = pipe.manual(3, conf, 7)
    assert again.run_id == run_id
    recover, lost = TwoPhaseCommitSink.recover, []

    def flaky(sink: Any, *a: Any, **k: Any) -> list[str]:  # the first try of the new run's begin fails once
        if not lost:
            lost.append(1)
            raise ConnectionError("storage did not answer")
        return recover(sink, *a, **k)

    monkeypatch.setattr(TwoPhaseCommitSink, "recover", flaky)
    states = pipe.drive(again)
    show(pipe, "re-created recover run")
    print(f"re-created run: {pipe.run_state(again)} {states}, begin tries {pipe.tries(again, 'begin')}, "
          f"note {pipe.note(again)!r}")
    ev, lin = announced(pipe)
    assert ev.count(feb) == 1 and lin.count(feb) == 1, \
        f"BREAK: {feb} announced {ev.count(feb)}x (asset events), {lin.count(feb)}x (lineage)"


# r03_rollback_operator_user_outlets: found by the review of issue 46 (session 18); it reproduced before the fix
def test_rollback_operator_with_user_outlets_still_announces_the_table(pipe, monkeypatch, tmp_path):
    from airflow.sdk import Asset

    pipe.run("single", MONTHS)
    land(pipe.root, "2013-02", "b.csv", [100])
    pipe.drive(pipe.manual(2, {"reprocess": True}, 1))
    events, lineage = announced(pipe)
    audit = Asset(uri=f"file://{tmp_path}/ops_audit", name="ops_audit")
    got = ops_run(pipe, monkeypatch, 1, op_kwargs={"outlets": [audit]},
                  interval_start=month(2).start.isoformat(), to_version="e1")
    e3 = pipe.sink.committed(month(2))[0]
    show(pipe, "rollback with user outlets")
    print(f"run {got['state']}, tries {got['tries']}")
    assert got["state"] == "success" and e3.epoch == 3 and pipe.live(2) == e3.name
    assert sorted(e["version"] for e in pipe.events()) == sorted([*events, e3.name]), \
        f"BREAK: {e3.name} is live, lineage {got['tries']}, but the table's Asset got no event: {announced(pipe)[0]}"


# r02_rollback_operator_note: found by the review of issue 46 (session 18); it reproduced before the fix
def test_rollback_operator_notes_what_it_published(pipe, monkeypatch):
    pipe.run("single", MONTHS)
    land(pipe.root, "2013-02", "b.csv", [100])
    pipe.drive(pipe.manual(2, {"reprocess": True}, 1))
    got = ops_run(pipe, monkeypatch, 1, interval_start=month(2).start.isoformat(), to_version="e1")
    e3 = pipe.sink.committed(month(2))[0]
    show(pipe, "rollback")
    print(f"rollback: run {got['state']}, tries {got['tries']}, eo_note {got['eo_note']!r}, run note {got['note']!r}")
    assert e3.epoch == 3 and got["state"] == "success"
    bad = []
    if "of the range" in (got["note"] or "") or "e3" not in (got["note"] or ""):
        bad.append(f"rollback note: {got['note']!r}")

    land(pipe.root, "2013-03", "b.csv", [7])
    land(pipe.root, "2013-01", "b.csv", [5])
    decide_unpublished(pipe, monkeypatch, 1, 2)
    decide_unpublished(pipe, monkeypatch, 3, 2)
    got = ops_run(pipe, monkeypatch, 2, action="recover")
    show(pipe, "recover")
    print(f"recover: run {got['state']}, tries {got['tries']}, eo_note {got['eo_note']!r}, run note {got['note']!r}")
    if "of the range" in (got["note"] or "") or "recover" not in (got["note"] or ""):
        bad.append(f"recover note: {got['note']!r}")
    assert not bad, "BREAK: " + " | ".join(bad)


# r08_rollback_operator_retries: found by the review of issue 46 (session 18); it reproduced before the fix
def test_rollback_operator_retry_announces_once(pipe, monkeypatch):
    from exactly_once.airflow import rollback as airflow_rollback
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    pipe.run("single", MONTHS)
    land(pipe.root, "2013-02", "b.csv", [100])
    pipe.drive(pipe.manual(2, {"reprocess": True}, 1))
    events, lineage = announced(pipe)

    real = airflow_rollback.rollback

    def patch_rollback(try_number: int) -> None:
        def dying(*a: Any, **k: Any) -> Any:
            out = real(*a, **k)
            if try_number == 1:
                raise RuntimeError("the worker was lost")
            return out
        monkeypatch.setattr(airflow_rollback, "rollback", dying)

    got = ops_run(pipe, monkeypatch, 1, retries=1, patch=patch_rollback,
                  interval_start=month(2).start.isoformat(), to_version="e1")
    e3 = pipe.sink.committed(month(2))[0].name
    show(pipe, "rollback retried")
    print(f"rollback: {got['state']} tries {got['tries']} note {got['note']!r}")
    bad = []
    ev = [e["version"] for e in pipe.events()]
    lin = [v for _, vs in got["tries"] for v in vs]
    if ev.count(e3) != 1 or lin.count(e3) != 1 or got["state"] != "success":
        bad.append(f"rollback {e3}: events {ev.count(e3)}, lineage {lin.count(e3)} ({got['tries']}), {got['state']}")
    monkeypatch.setattr(airflow_rollback, "rollback", real)

    land(pipe.root, "2013-01", "b.csv", [5])
    land(pipe.root, "2013-03", "b.csv", [7])
    jan = decide_unpublished(pipe, monkeypatch, 1, 2)[0].name
    mar = decide_unpublished(pipe, monkeypatch, 3, 2)[0].name
    publish = TwoPhaseCommitSink._publish

    def patch_publish(try_number: int) -> None:
        def dying(sink: Any, txn: Any) -> Any:
            result = publish(sink, txn)
            if try_number == 1 and result.finished:
                raise RuntimeError("the worker was lost")
            return result
        monkeypatch.setattr(TwoPhaseCommitSink, "_publish", dying)

    before = len(pipe.events())
    got = ops_run(pipe, monkeypatch, 2, retries=1, patch=patch_publish, action="recover")
    show(pipe, "recover retried")
    print(f"recover: {got['state']} tries {got['tries']} note {got['note']!r}")
    new = pipe.events()[before:]
    lin = [v for _, vs in got["tries"] for v in vs]
    if sorted(e["version"] for e in new) != sorted([jan, mar]) or sorted(lin) != sorted([jan, mar]):
        bad.append(f"recover: events {[e['version'] for e in new]}, lineage {got['tries']}")
    if {e["version"]: e["interval"]["start"] for e in new} != {jan: month(1).start.isoformat(),
                                                               mar: month(3).start.isoformat()}:
        bad.append(f"recover intervals {[(e['version'], e['interval']) for e in new]}")
    assert pipe.live(1) == jan and pipe.live(3) == mar
    assert not bad, "BREAK: " + " | ".join(bad)
