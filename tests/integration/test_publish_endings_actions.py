"""Issue 46, parity of the table page's actions: an interval first published any of the three ways
(``test_publish_endings``' ``way``: a single run, a batched backfill, a range run), then acted on from the
table page, ends like every publish.

The action goes through the page's own code: ``webapp._act`` - what the page's POST calls once the request
is authenticated - with the confirmation form's token (``actions.form_token``), as the admin user of
Airflow's simple auth manager. It checks the action again under the DAG's row lock (``confirm.plan``: the
page's pending check among them) and creates the run of the pipeline's own DAG with the action's conf
(``actions.trigger``); the harness (``airflow_helpers.Pipeline.drive``) then runs that run the way the
scheduler would, on the module's real metadata DB. The only substitution: the table is looked up as the
harness declares it (its DAG is not in a DAGs folder). Posting through a real ``airflow api-server`` is
``tests/integration/table_actions``' job (permission, CSRF, tokens).
"""
from __future__ import annotations

from typing import Any

import pytest

from endings_helpers import decide_unpublished, ops_run
from test_interval_runs import land, month
from test_publish_endings import MONTHS, WAYS, Endings, announced, dag_id_of, pipe, session  # noqa: F401 - fixtures

pytestmark = pytest.mark.airflow
USER = "admin"


@pytest.fixture
def chained(session, tmp_path, request) -> Endings:  # noqa: F811 - the metadata DB fixture
    """``pipe``'s months, stateful: each month's state (the running total) is the one before's plus its rows."""
    for m in MONTHS:
        land(tmp_path, f"2013-{m:02d}", "a.csv", [m, 10 * m])
    return Endings(session, tmp_path, dag_id_of(request), stateful=True, start=month(1).start)


def from_the_page(pipe: Endings, monkeypatch: Any, action: str, form: dict[str, str]) -> tuple[int, Any]:
    """``action`` posted from the table page of ``pipe``'s table with ``form`` (the interval, the version, the
    reason), confirmed: the page's answer's status and the run it created (None if it created none)."""
    status, made = runs_from_the_page(pipe, monkeypatch, action, form)
    assert len(made) <= 1, made
    return status, (made[0] if made else None)


def runs_from_the_page(pipe: Endings, monkeypatch: Any, action: str, form: dict[str, str]) -> tuple[int, list[Any]]:
    """As :func:`from_the_page`: the status and every run the action created, in the order they start."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    from exactly_once.airflow import actions, views, webapp
    from exactly_once.airflow.tables import TableRef

    cfg = pipe.cfg
    table = TableRef(cfg.pipeline, cfg.sink, cfg.table_url, cfg)
    monkeypatch.setattr(webapp, "find_table", lambda dag_id, sink: table if (dag_id, sink) == table.key else None)
    create_auth_manager()
    user = SimpleAuthManagerUser(username=USER, role="admin")
    req = actions.parse(action, table, form, views.stale_of(table) if action == "rerun-stale" else [])
    before = set(pipe.session.scalars(select(DagRun.id).where(DagRun.dag_id == pipe.dag_id)))
    got = webapp._act(user, cfg.pipeline, cfg.sink, action,
                      {**form, "token": actions.form_token(USER, req), "confirm": "yes"})
    pipe.session.expire_all()
    made = [dr for dr in pipe.session.scalars(select(DagRun).where(DagRun.dag_id == pipe.dag_id))
            if dr.id not in before]
    return got.status_code, sorted(made, key=lambda dr: dr.run_after)


def asked_of(pipe: Endings, m: int, epoch: int) -> str:
    """What ``eo history`` says was asked of month ``m``'s epoch (its provenance)."""
    from exactly_once.ops.history import history

    [row] = [r for r in history(pipe.sink) if r.interval_start == month(m).start.isoformat() and r.epoch == epoch]
    return row.asked


@pytest.mark.parametrize("way", WAYS)
def test_a_reprocess_and_a_rollback_from_the_table_page_end_like_every_publish(pipe, way, monkeypatch):
    """The months published ``way`` (e1 each); February lands another file. The page's reprocess of February
    is a run of the pipeline's DAG that publishes e2 with the new rows; the page's rollback of February to
    e1 then publishes e3 with e1's rows. Each: the new version live with the expected rows, exactly one more
    asset event and one more lineage output, both for the new version (none re-sent for the older ones), a
    run summary of it, the run's note naming what it published and the action, and ``eo history`` saying
    who asked what, why, through which run."""
    pipe.run(way, [1, 2, 3])
    first = {r["month"]: (r["n"], r["total"]) for r in pipe.rows()}
    events, lineage = announced(pipe)
    assert events == lineage == pipe.versions() and len(events) == 3

    land(pipe.root, "2013-02", "b.csv", [100])
    status, run = from_the_page(pipe, monkeypatch, "reprocess",
                                {"interval": month(2).token, "reason": "late files from the partner feed"})
    assert status == 200 and run is not None and run.conf["eo_action"] == "reprocess", status
    states = pipe.drive(run)
    assert pipe.run_state(run) == "success", states
    e2 = pipe.sink.committed(month(2))[0]
    assert e2.epoch == 2 and pipe.sink.live_version("month=2013-02") == e2.name
    assert {r["month"]: (r["n"], r["total"]) for r in pipe.rows()} == {**first, "2013-02": (3, 122)}
    events, lineage = sorted([*events, e2.name]), sorted([*lineage, e2.name])
    assert announced(pipe) == (events, lineage), pipe.lineage
    assert e2.name in pipe.summaries()
    assert pipe.note(run) == "published e2: 1 row, 1 file (reprocess)"
    assert asked_of(pipe, 2, 2) == (f'reprocess by {USER} because "late files from the partner feed" '
                                    f"({pipe.dag_id} run {run.run_id})")

    status, run = from_the_page(pipe, monkeypatch, "rollback",
                                {"interval": month(2).token, "to": "e1", "reason": "b.csv was a test file"})
    assert status == 200 and run is not None and run.conf["eo_action"] == "rollback", status
    states = pipe.drive(run)
    assert states["begin"] == "success" and pipe.run_state(run) == "success", states
    e3 = pipe.sink.committed(month(2))[0]
    assert e3.epoch == 3 and pipe.sink.live_version("month=2013-02") == e3.name
    assert {r["month"]: (r["n"], r["total"]) for r in pipe.rows()} == first
    assert announced(pipe) == (sorted([*events, e3.name]), sorted([*lineage, e3.name])), pipe.lineage
    assert e3.name in pipe.summaries()
    assert pipe.note(run) == "published e3: 1 row, 1 file (rollback to e1)"
    assert asked_of(pipe, 2, 3).startswith(f'rollback to e1 by {USER} because "b.csv was a test file"'), \
        asked_of(pipe, 2, 3)


@pytest.mark.parametrize("way", WAYS)
def test_a_reprocess_from_the_table_page_of_a_month_a_pending_run_covers_is_refused(pipe, way, monkeypatch):
    """The months published (manual runs), then January to March asked again ``way`` and not yet ended: the
    single run of February, the backfill's runs, or the range run of January whose batch reaches to March.
    The page's reprocess of February is refused (409, no run created) - the month would be written by two
    runs at once - and once they ended, the same reprocess goes ahead. (Before, a range run counted only for
    its own first month: February's reprocess was triggered beside it.)"""
    for m in (1, 2, 3):
        pipe.drive(pipe.manual(m, {}, 5))  # logical dates no scheduled, backfill or range run of the test has
    assert len(pipe.versions()) == 3
    if way == "single":
        runs = [pipe.create_run(2)]
    elif way == "backfill":
        runs = pipe.backfill([1, 2, 3], "none")
    else:
        runs = [pipe.range_run(1, 3)]
    assert {pipe.run_state(dr) for dr in runs} <= {"queued", "running"}
    assert from_the_page(pipe, monkeypatch, "reprocess", {"interval": month(2).token}) == (409, None)
    for dr in runs:
        pipe.drive(dr)
    assert {pipe.run_state(dr) for dr in runs} == {"success"}
    status, run = from_the_page(pipe, monkeypatch, "reprocess", {"interval": month(2).token})
    assert status == 200 and run is not None and run.conf["eo_action"] == "reprocess"


@pytest.mark.parametrize("way", WAYS)
def test_a_rerun_of_the_stale_months_from_the_table_page_ends_like_every_publish(chained, way, monkeypatch):
    """A stateful pipeline's months published ``way`` (running totals 11, 33, 66); January lands another file
    and the page's reprocess publishes its e2 (total 111), which leaves February and March stale (their state
    was read from January's e1). The page's re-run of the stale months creates one run per month, oldest
    first; driven in that order they publish February's and March's e2 on the new state (133, 166). Each new
    version: exactly one asset event and one lineage output (none re-sent for an older one), its run summary,
    its run's note naming the action, ``eo history`` saying who asked; nothing is stale after."""
    pipe = chained
    pipe.run(way, MONTHS)
    assert {r["month"]: r["total"] for r in pipe.rows()} == {"2013-01": 11, "2013-02": 33, "2013-03": 66}
    land(pipe.root, "2013-01", "b.csv", [100])
    status, run = from_the_page(pipe, monkeypatch, "reprocess", {"interval": month(1).token})
    assert status == 200 and run is not None
    states = pipe.drive(run)
    assert pipe.run_state(run) == "success", states
    events, lineage = announced(pipe)
    assert len(events) == len(lineage) == 4

    from exactly_once.protocol.ordering import stale_from

    assert stale_from(pipe.sink, month(1)) == [month(2).token, month(3).token]
    status, runs = runs_from_the_page(pipe, monkeypatch, "rerun-stale", {"reason": "January was short"})
    assert status == 200 and [dr.conf["eo_action"] for dr in runs] == ["rerun-stale"] * 2, (status, runs)
    assert [dr.data_interval_start for dr in runs] == [month(2).start, month(3).start]
    for dr in runs:
        states = pipe.drive(dr)
        assert pipe.run_state(dr) == "success", states
    assert {r["month"]: r["total"] for r in pipe.rows()} == {"2013-01": 111, "2013-02": 133, "2013-03": 166}
    fresh = [pipe.sink.committed(month(m))[0] for m in (2, 3)]
    assert [t.epoch for t in fresh] == [2, 2]
    assert announced(pipe) == (sorted([*events, *(t.name for t in fresh)]),
                               sorted([*lineage, *(t.name for t in fresh)])), pipe.lineage
    assert {t.name for t in fresh} <= set(pipe.summaries())
    assert [pipe.note(dr) for dr in runs] == ["published e2: 1 row, 1 file (rerun-stale)"] * 2
    assert asked_of(pipe, 3, 2).startswith(f'rerun-stale by {USER} because "January was short"'), asked_of(pipe, 3, 2)
    assert stale_from(pipe.sink, month(1)) == []


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("killed", [False, True], ids=["first-try", "retried"])
def test_a_recover_from_the_table_page_announces_the_publish_it_finishes(pipe, way, killed, monkeypatch):
    """The months published ``way``; February's reprocess (from the page) decided COMMITTED and its commit
    died before publishing, its teardown lost with its worker. The page's "Recover now" is a run of the
    newest month that rolls February's publish forward: e2 goes live with its rows and is announced exactly
    once, as February's (its asset event's interval, one lineage output), the run's note says what the
    recover did. ``retried``: the recover's first try dies right after recording the publish (its events
    dropped with it); its retry, which has nothing left to do, announces it. (Before, the recover announced
    it as the newest month's - an asset event naming March for February's version - with no lineage.)"""
    pipe.run(way, MONTHS)
    events, lineage = announced(pipe)
    land(pipe.root, "2013-02", "b.csv", [100])
    decided = decide_unpublished(pipe, monkeypatch, 2, 1, from_page=True)
    assert decided[0].epoch == 2 and announced(pipe) == (events, lineage)

    status, fix = from_the_page(pipe, monkeypatch, "recover", {"reason": "the worker was lost"})
    assert status == 200 and fix is not None and fix.conf["eo_action"] == "recover"
    if killed:  # the first try's worker is lost once the recover returned: the try fails, its events with it
        from exactly_once.protocol.transaction import TwoPhaseCommitSink

        recover, lost = TwoPhaseCommitSink.recover, []

        def recover_then_die(sink: Any, *args: Any, **kwargs: Any) -> list[str]:
            done = recover(sink, *args, **kwargs)
            if not lost:
                lost.append(done)
                raise RuntimeError("the worker was lost")
            return done

        monkeypatch.setattr(TwoPhaseCommitSink, "recover", recover_then_die)
    states = pipe.drive(fix)
    assert pipe.run_state(fix) == "success" and pipe.tries(fix, "begin") == 1 + killed, states
    assert pipe.sink.status(month(2))[2].published and pipe.live(2) == decided[0].name
    assert {r["month"]: r["n"] for r in pipe.rows()}["2013-02"] == 3
    assert announced(pipe) == (sorted([*events, decided[0].name]), sorted([*lineage, decided[0].name])), pipe.lineage
    assert pipe.events()[-1]["interval"]["start"] == month(2).start.isoformat()
    assert decided[0].name in pipe.summaries()
    assert pipe.note(fix).startswith(f"recover by {USER}: ") and \
        pipe.note(fix).endswith(f"; published e2 of {month(2).start.isoformat()}"), pipe.note(fix)


def test_the_rollback_operator_of_a_users_ops_dag_announces_what_it_publishes(pipe, monkeypatch):
    """``RollbackOperator`` in an operations DAG (given the table's URL): its rollback of February to e1
    publishes e3, and its recover finishes a decided publish of March - each announced once as its own
    month's (the table's asset event through the operator's alias, a lineage output of the version), with
    its run summary. (Before, the operator published both and announced neither.)"""
    pipe.run("single", MONTHS)
    land(pipe.root, "2013-02", "b.csv", [100])
    pipe.drive(pipe.manual(2, {"reprocess": True}, 1))
    events, _ = announced(pipe)
    assert pipe.sink.committed(month(2))[0].epoch == 2 and len(events) == 4

    [(state, outputs)] = ops_run(pipe, monkeypatch, 1, interval_start=month(2).start.isoformat(),
                                 to_version="e1")["tries"]
    e3 = pipe.sink.committed(month(2))[0]
    assert state == "success" and e3.epoch == 3 and outputs == [e3.name]
    assert pipe.events()[-1]["version"] == e3.name and len(pipe.events()) == 5
    assert pipe.events()[-1]["interval"]["start"] == month(2).start.isoformat() and e3.name in pipe.summaries()

    land(pipe.root, "2013-03", "b.csv", [7])
    decided = decide_unpublished(pipe, monkeypatch, 3, 2)[0]
    [(state, outputs)] = ops_run(pipe, monkeypatch, 2, action="recover")["tries"]
    assert state == "success" and pipe.live(3) == decided.name and outputs == [decided.name]
    assert [e["version"] for e in pipe.events()][5:] == [decided.name]
    assert pipe.events()[-1]["interval"]["start"] == month(3).start.isoformat()
