"""The table page's actions on a real ``airflow api-server`` (one for the package: conftest.py's ``ui``):
permission, confirmation, CSRF, the DAG runs they trigger, and the provenance the table page and ``eo history``
show afterwards. The table page as an operator uses it is ``test_airflow_actions_page``'s.

Users: ``admin`` (may edit every DAG), ``viewer`` (may read, not edit). The table ``app_pv`` of
``pv_pipeline``: day 1 committed twice (e1, then a reprocess e2 with another state), day 2 computed from
e1's state - so day 2 is stale. The api-server runs no scheduler: the tests run the triggered run's
``begin`` task (every action is a run of the pipeline's own DAG) in-process with that run's own conf,
data interval and triggering user, as a worker would.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import httpx
import pytest

from actions_helpers import (D1, D2, PIPELINE, SINK, TABLE, USERS, as_user, dag_runs, post_as, run_begin, run_task,
                             settle, task_ids, token_in)
from exactly_once.ids import Interval
from ui_server import commit_day

pytestmark = pytest.mark.airflow


def test_actions_need_edit_permission_a_confirmation_and_a_same_origin_token(ui):
    client = ui["client"]
    iv = Interval.daily(D1).token
    viewer_page = client.get(TABLE, headers=as_user(ui, "viewer")).text
    assert "/actions/" not in viewer_page and "need permission to edit" in viewer_page
    for action, query in (("rollback", {"interval": iv, "to": "e1"}), ("recover", {})):
        assert client.get(f"{TABLE}/actions/{action}", headers=as_user(ui, "viewer"), params=query).status_code == 403
    admin_page = client.get(TABLE, headers=as_user(ui, "admin")).text
    assert f"{TABLE}/actions/rollback?interval={iv}&amp;to=e1" in admin_page
    assert f"{TABLE}/actions/rerun-stale" in admin_page and f"{TABLE}/actions/recover" in admin_page
    confirm = client.get(f"{TABLE}/actions/rollback", headers=as_user(ui, "admin"), params={"interval": iv, "to": "e1"})
    assert confirm.status_code == 200 and "Make version e1 of app_pv" in confirm.text
    assert "form-action 'self'" in confirm.headers["content-security-policy"]
    token = token_in(confirm.text)
    good = {"token": token, "interval": iv, "to": "e1", "confirm": "yes"}
    viewer_token = token_in(client.get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin")).text)
    refused = [
        post_as(ui, "viewer", "rollback", good),                                  # may not edit the DAG
        post_as(ui, "admin", "rollback", good, origin=None),                      # no Origin / Referer
        post_as(ui, "admin", "rollback", good, origin="http://evil.example"),      # cross-site
        post_as(ui, "admin", "rollback", {**good, "token": "0" * 64}),            # forged token
        post_as(ui, "admin", "rollback", {**good, "token": viewer_token}),        # another action's token
        post_as(ui, "admin", "rollback", {**good, "confirm": ""}),                # not confirmed
        post_as(ui, "admin", "rollback", {**good, "to": "latest"}),               # not a version
        post_as(ui, "admin", "rollback", {**good, "to": "e\u00b2"}),              # a digit, not an ASCII one
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403, 403, 400, 400, 400], [r.text for r in refused]
    assert dag_runs(ui, PIPELINE) == []                                          # nothing was triggered
    for to in ("e\u00b2", "e\u0661", "e\uff11"):                                # superscript, Arabic-Indic, fullwidth
        got = client.get(f"{TABLE}/actions/rollback", headers=as_user(ui, "admin"), params={"interval": iv, "to": to})
        assert got.status_code == 400 and "not a version" in got.text and "give e.g. e2" in got.text, got.text


def test_rollback_action_runs_through_the_protocol_and_shows_who_did_it(ui, capsys):
    client, sink = ui["client"], ui["sink"]
    iv = Interval.daily(D1)
    confirm = client.get(f"{TABLE}/actions/rollback", headers=as_user(ui, "admin"), params={"interval": iv.token, "to": "e1"})
    done = post_as(ui, "admin", "rollback", {"token": token_in(confirm.text), "interval": iv.token, "to": "e1",
                                           "confirm": "yes"})
    assert done.status_code == 200 and "Triggered" in done.text, done.text
    [run] = dag_runs(ui, PIPELINE)                     # a run of the pipeline's own DAG: no eo_rollback DAG needed
    assert run["triggering_user_name"] == "admin" and run["state"] == "queued"
    assert run["conf"] == {"to_version": "e1", "sinks": [SINK], "requested_by": "admin", "eo_action": "rollback"}
    assert (run["data_interval_start"][:10], run["data_interval_end"][:10]) == (D1, D2)
    assert f"/dags/{PIPELINE}/runs/{run['dag_run_id']}" in done.text
    result, skipped, xcoms, events = run_task(ui, PIPELINE, run["dag_run_id"])
    assert result["version"] == sink.ref(iv, 3).name and result["rollback_of"] == sink.ref(iv, 1).name
    assert sink.committed(iv)[0].name == sink.ref(iv, 3).name
    assert skipped == [f"{SINK}.{t}" for t in ("abort", "commit", "pre_commit", "validate", "write")]
    assert xcoms["eo_note"] == "published e3: 2 rows, 1 file (rollback to e1)"
    [event] = events[f"file://{ui['table_url']}"]                          # the table's asset event, once
    assert event["version"] == sink.ref(iv, 3).name and event["interval"]["start"].startswith(D1)
    assert result["stale"] == []                                            # day 2 read e1: current again
    again, _, again_xcoms, again_events = run_task(ui, PIPELINE, run["dag_run_id"])   # a retry, a clear
    assert again["already"] and again["version"] == result["version"] and again_events == {}
    assert sink.committed(iv)[0].name == sink.ref(iv, 3).name and len(sink.status(iv)) == 3
    page = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=as_user(ui, "viewer")).json()
    [e3] = [e for row in page["intervals"] if row["start"].startswith(D1) for e in row["epochs"] if e["epoch"] == 3]
    assert e3["run_id"] == run["dag_run_id"] and e3["state"] == "COMMITTED"
    html = client.get(TABLE, headers=as_user(ui, "viewer")).text
    assert "rollback to e1 by <b>admin</b>" in html
    assert f"/dags/{PIPELINE}/runs/{run['dag_run_id']}" in html
    from exactly_once.cli import main as eo

    assert eo(["history", ui["table_url"]]) == 0
    assert f"rollback to e1 by admin ({PIPELINE} run {run['dag_run_id']})" in capsys.readouterr().out
    # day 2 was computed on e1's state, live again: no longer stale (it was flagged stale after a rollback)
    assert client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=as_user(ui, "admin")).json()["stale"] == []
    commit_day(sink, D1, "run-d1-again", "s1-newer")  # stale again, for the tests that follow
    settle(ui)


def test_eo_rollback_refuses_tables_no_dag_owns_and_users_who_may_not_edit(ui, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from exactly_once.airflow.rollback import RollbackOperator
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    iv = Interval.daily(D2)
    stray = str(tmp_path / "elsewhere" / SINK)             # same pipeline and sink names, a path no DAG declares
    other = TwoPhaseCommitSink.at(stray, pipeline=PIPELINE, sink=SINK, require_validation=True)
    commit_day(other, D2, "r1", "x")
    commit_day(other, D2, "r2", "y")
    from exactly_once.airflow.tables import find_table

    declared = find_table("flights_hourly", "departures").url     # a DAG's table URL, owned by another pipeline
    squatter = TwoPhaseCommitSink.at(declared, pipeline="someone_else", sink="departures", require_validation=True)
    commit_day(squatter, D2, "r1", "x")
    commit_day(squatter, D2, "r2", "y")
    before = {url: dict(TwoPhaseCommitSink.open(url).status(iv)) for url in (stray, declared, ui["table_url"])}
    cases = [(stray, "admin", "no DAG of the DAGs folder declares the table"),
             (declared, "admin", "is owned by someone_else/departures, not by flights_hourly/departures"),
             (ui["table_url"], "viewer", "user 'viewer' (who triggered this run) may not edit DAG 'pv_pipeline'"),
             (ui["table_url"], "dag_test", "user 'dag_test'"),
             (ui["table_url"], None, "user None")]
    for url, user, message in cases:
        op = RollbackOperator(task_id="rollback", table_url=url, interval_start=D2, to_version="e1")
        dag_run = SimpleNamespace(run_id="manual__x", dag_id="eo_rollback", conf={}, triggering_user_name=user)
        with pytest.raises(AirflowFailException, match=re.escape(message)):
            op.execute({"dag_run": dag_run})
    after = {url: dict(TwoPhaseCommitSink.open(url).status(iv)) for url in (stray, declared, ui["table_url"])}
    assert {u: sorted(s) for u, s in after.items()} == {u: sorted(s) for u, s in before.items()}  # no new epoch


def test_reprocess_rerun_stale_and_recover_trigger_runs_as_the_user(ui):
    client = ui["client"]
    iv1, iv2 = Interval.daily(D1), Interval.daily(D2)
    stale_page = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=as_user(ui, "admin")).json()
    assert iv2.token in stale_page["stale"]

    def act(action: str, **form) -> httpx.Response:
        confirm = client.get(f"{TABLE}/actions/{action}", headers=as_user(ui, "admin"), params=form)
        assert confirm.status_code == 200, confirm.text
        return post_as(ui, "admin", action, {"token": token_in(confirm.text), "confirm": "yes", **form})

    assert act("reprocess", interval=iv1.token, allow_shrinking="1").status_code == 200
    assert act("rerun-stale").status_code == 200
    runs = sorted((r for r in dag_runs(ui, PIPELINE) if r["conf"].get("reprocess")), key=lambda r: r["run_after"])
    assert [(r["data_interval_start"][:10], r["conf"]["eo_action"], r["conf"]["reprocess"], r["conf"]["sinks"],
             r["conf"].get("allow_shrinking"), r["triggering_user_name"]) for r in runs] == \
        [(D1, "reprocess", True, [SINK], True, "admin"), (D2, "rerun-stale", True, [SINK], None, "admin")]
    assert all(r["data_interval_end"][:10] == str(Interval.from_token(t).end.date())
               for r, t in zip(runs, (iv1.token, iv2.token)))
    assert act("recover").status_code == 200
    recover = [r for r in dag_runs(ui, PIPELINE) if r["conf"]["eo_action"] == "recover"]
    assert len(recover) == 1 and recover[0]["triggering_user_name"] == "admin"
    assert recover[0]["conf"]["sinks"] == [SINK] and recover[0]["data_interval_start"][:10] == D2  # newest interval
    for run in (*runs, *recover):  # Airflow created the tasks (none for a run dated outside the DAG's dates)
        assert f"{SINK}.begin" in task_ids(ui, PIPELINE, run["dag_run_id"]), run
    result, skipped, xcoms, _ = run_task(ui, PIPELINE, recover[0]["dag_run_id"])
    assert result["by"] == "admin" and isinstance(result["recover"], list) and len(skipped) == 5
    assert xcoms["eo_note"].startswith("recover by admin: ")
    settle(ui)


def test_report_tabs_of_a_dag_without_an_exactly_once_group_say_so(ui):
    for path in ("/eo/dags/eo_rollback", "/eo/dags/eo_rollback/runs/manual__2026-01-01"):
        got = ui["client"].get(path, headers=as_user(ui, "viewer"))
        assert got.status_code == 200 and "eo_rollback has no exactly-once group" in got.text, path
    assert "no exactly-once group" not in ui["client"].get(f"/eo/dags/{PIPELINE}", headers=as_user(ui, "viewer")).text


def _served_data_docs(ui, run: str, html: str):
    """A GX Data Docs page of validation run ``run`` as GX wrote it, then fetched through the plugin."""
    page = ui["root"] / "reports" / "data_docs" / "validations" / "s" / f"{PIPELINE}.{run}" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(html)
    return ui["client"].get(f"/eo/reports/data_docs/validations/s/{PIPELINE}.{run}/index.html",
                            headers=as_user(ui, "admin"))


def test_data_docs_are_served_without_scripts_and_with_a_strict_csp(ui):
    got = _served_data_docs(ui, "x", (
        '<html><head><link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css">'
        '<link rel="stylesheet" href="//cdn.jsdelivr.net/x.css"><link rel="stylesheet" href="../static/local.css">'
        '<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script></head>'
        '<body><table><tr><td>expect_column_values_to_be_between</td></tr></table>'
        '<SCRIPT type="text/javascript">document.cookie</SCRIPT></body></html>'))
    assert got.status_code == 200, got.text
    csp = got.headers["content-security-policy"]
    assert "script-src 'none'" in csp and "default-src 'none'" in csp and "connect-src 'none'" in csp
    text = got.text.lower()
    assert "<script" not in text and "cdn" not in text and "document.cookie" not in text
    assert "../static/local.css" in got.text and "expect_column_values_to_be_between" in got.text
    assert "<style>" in got.text                                              # renders readably offline


def test_a_form_token_triggers_only_what_was_confirmed_once_and_a_malformed_one_is_refused(ui):
    """The token binds the action's parameters (interval, version, allow_shrinking), expires, and is used
    up by its run; a non-ASCII token is a 403, not a 500."""
    from exactly_once.airflow import actions
    from exactly_once.airflow.tables import find_table

    client = ui["client"]
    iv1, iv2 = Interval.daily(D1).token, Interval.daily(D2).token
    runs = len(dag_runs(ui, PIPELINE))
    confirm = client.get(f"{TABLE}/actions/rollback", headers=as_user(ui, "admin"), params={"interval": iv1, "to": "e1"})
    good = {"token": token_in(confirm.text), "interval": iv1, "to": "e1", "confirm": "yes"}
    shrink = client.get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"), params={"interval": iv1}).text
    refused = [post_as(ui, "admin", "rollback", {**good, "interval": iv2}),           # another interval
               post_as(ui, "admin", "rollback", {**good, "to": "e2"}),                # another version
               post_as(ui, "admin", "reprocess", {"token": token_in(shrink), "interval": iv1, "allow_shrinking": "1",
                                                "confirm": "yes"}),                 # confirmed without shrinking
               post_as(ui, "admin", "recover", {"token": "\u00e9" * 88, "confirm": "yes"})]   # not ASCII
    assert [r.status_code for r in refused] == [403, 403, 403, 403], [r.text for r in refused]
    assert len(dag_runs(ui, PIPELINE)) == runs
    recover = token_in(client.get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin")).text)
    first, again = (post_as(ui, "admin", "recover", {"token": recover, "confirm": "yes"}) for _ in range(2))
    assert (first.status_code, again.status_code) == (200, 403) and "used already" in again.text
    assert len(dag_runs(ui, PIPELINE)) == runs + 1                                  # the replay triggered nothing
    settle(ui)
    # expiry: a token issued more than TOKEN_TTL ago is refused (same key, checked in-process)
    req = actions.parse("recover", find_table(PIPELINE, SINK), {}, [])
    old = actions.form_token("admin", req, now=1_000_000)
    assert actions.token_ok(old, "admin", req, now=1_000_000 + actions.TOKEN_TTL)
    assert not actions.token_ok(old, "admin", req, now=1_000_001 + actions.TOKEN_TTL)


def test_only_intervals_of_the_tables_log_can_be_rolled_back_or_reprocessed(ui):
    week = "20270101T050000Z_20270108T050000Z"                                   # not in the log, off schedule
    for action, query in (("reprocess", {"interval": week}), ("rollback", {"interval": week, "to": "e1"})):
        got = ui["client"].get(f"{TABLE}/actions/{action}", headers=as_user(ui, "admin"), params=query)
        assert got.status_code == 400 and "has no interval" in got.text, got.text
        posted = post_as(ui, "admin", action, {**query, "token": "0" * 88, "confirm": "yes"})
        assert posted.status_code == 400
    assert all(not r["data_interval_start"].startswith("2027") for r in dag_runs(ui, PIPELINE))


def test_with_a_base_url_the_origin_must_be_it_whatever_the_host_header_says(ui):
    token = token_in(ui["client"].get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin")).text)
    before = len(dag_runs(ui, PIPELINE))
    got = ui["client"].post(f"{TABLE}/actions/recover", data={"token": token, "confirm": "yes"},
                            headers=as_user(ui, "admin", Origin="http://evil.example", Host="evil.example"))
    assert got.status_code == 403 and len(dag_runs(ui, PIPELINE)) == before


def test_the_failure_page_carries_the_csp(ui):
    from exactly_once.airflow import actions, webapp
    from exactly_once.airflow.tables import find_table

    got = webapp.failed_page(actions.parse("recover", find_table(PIPELINE, SINK), {}, []), RuntimeError("x"))
    assert got.status_code == 409 and "default-src 'none'" in got.headers["content-security-policy"]


def test_a_conf_reprocess_needs_edit_permission_and_its_label_comes_from_an_allow_list(ui):
    """A reprocess triggered through the REST API with conf {"reprocess": true} is checked in the begin task
    as the table page checks it; the conf cannot choose the label the table page shows."""
    from airflow.sdk.exceptions import AirflowFailException

    from exactly_once.airflow.operators import BeginOperator, _asked
    from exactly_once.airflow.tables import find_table

    iv = Interval.daily(D1)
    before = sorted(ui["sink"].status(iv))
    conf = {"reprocess": True, "allow_shrinking": True}
    begin = BeginOperator(task_id="begin", config=find_table(PIPELINE, SINK).config, begin_task_id="eo.begin")
    notes = {}
    ti = SimpleNamespace(run_id="manual__rest", try_number=1, dag_id=PIPELINE, task_id="eo.begin",
                         xcom_push=lambda key, value: notes.__setitem__(key, value))
    dag_run = SimpleNamespace(run_id="manual__rest", dag_id=PIPELINE, conf=conf, triggering_user_name="viewer")
    with pytest.raises(AirflowFailException, match="user 'viewer' .* may not edit DAG 'pv_pipeline'"):
        begin.execute({"ti": ti, "dag_run": dag_run, "data_interval_start": iv.start, "data_interval_end": iv.end})
    assert sorted(ui["sink"].status(iv)) == before                              # no epoch was opened
    assert notes["eo_note"].startswith("refused: PermissionDeniedError: user 'viewer' (who triggered this run")
    from exactly_once.airflow.operators import may_reprocess
    for shell_user in ("dag_test", "root"):  # `airflow dags test` / `dags trigger`: no login, a shell's run
        may_reprocess({"dag_run": SimpleNamespace(triggering_user_name=shell_user)}, PIPELINE)
    fake = {"reprocess": True, "eo_action": "rollback to e1 by admin"}
    assert _asked({"dag_run": dag_run}, fake) == {"by": "viewer", "action": "reprocess"}
    assert _asked({"dag_run": dag_run}, {"reprocess": True, "eo_action": "rerun-stale"})["action"] == "rerun-stale"


def test_data_docs_keep_only_allowed_tags_and_attributes(ui):
    """What regexes let through: a meta refresh (navigation, which CSP does not govern), a script rebuilt from
    the pieces a single pass leaves, a foreign link behind a space; and handlers, javascript: URLs, frames."""
    got = _served_data_docs(ui, "y", (
        '<html><head><meta http-equiv="refresh" content="0;url=https://evil.example/phish">'
        '<link rel="dns-prefetch" href=" //evil.example"><link rel="stylesheet" href=" https://evil.example/x.css">'
        '<link rel="stylesheet" href="../static/local.css"><base href="https://evil.example/"></head><body>'
        '<img src=x onerror=alert(1)><svg onload=alert(1)></svg><iframe src=https://evil.example></iframe>'
        '<a href="javascript:alert(1)">js</a><a href="#section">anchor</a><form action="https://evil.example">'
        '<input name="p"></form><div style="background:url(https://evil.example/p)">styled</div>'
        '<scr<script></script>ipt>alert(1)</script><table><tr><th>metric</th><td>a &amp; b</td></tr></table>'
        '</body></html>'))
    assert got.status_code == 200 and "script-src 'none'" in got.headers["content-security-policy"]
    text = got.text.lower()
    for gone in ("http-equiv", "refresh", "evil.example", "<script", "<iframe", "<svg", "<base", "<form", "onerror",
                 "onload", "javascript:", "url("):
        assert gone not in text, gone
    assert '<link rel="stylesheet" href="../static/local.css">' in got.text and '<a href="#section">' in got.text
    assert "<table><tr><th>metric</th><td>a &amp; b</td></tr></table>" in got.text and "<style>" in got.text


def test_under_multi_team_eo_rollback_refuses_and_a_reprocess_checks_the_dags_team(ui, monkeypatch):
    """brk-actions rollback_dag_ignores_teams: under ``[core] multi_team`` the eo_rollback task asked the auth
    manager without the owning DAG's team, so a team_a user rolled back team_b's table. A task cannot learn
    another DAG's team: eo_rollback refuses under multi_team (any user), and so does a team-less check. A
    conf reprocess - and the page's rollback and recover - run in the pipeline's own DAG, whose team the run
    carries: that one is checked."""
    from exactly_once.airflow.compat import AirflowFailException
    from exactly_once.airflow.operators import may_reprocess
    from exactly_once.airflow.owners import user_may_edit
    from exactly_once.airflow.rollback import RollbackOperator

    monkeypatch.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "alice:user:team_a,bob:user:team_b")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    iv = Interval.daily(D2)
    before = sorted(ui["sink"].status(iv))
    for user in ("alice", "bob"):
        op = RollbackOperator(task_id="rollback", table_url=ui["table_url"], interval_start=D2, to_version="e1")
        dag_run = SimpleNamespace(run_id=f"manual__{user}", dag_id="eo_rollback", conf={}, triggering_user_name=user,
                                  team_name="team_b")
        with pytest.raises(AirflowFailException, match=r"multi_team: a task cannot learn which team owns another "
                                                       r"DAG.*`eo rollback <table-url>"):
            op.execute({"dag_run": dag_run, "ti": SimpleNamespace(task_id="rollback", try_number=1)})
    assert sorted(ui["sink"].status(iv)) == before                              # nothing began
    assert user_may_edit("alice", PIPELINE) is False and user_may_edit("alice", PIPELINE, "team_a") is True
    run = SimpleNamespace(triggering_user_name="alice", team_name="team_b")
    with pytest.raises(AirflowFailException, match="user 'alice' .* may not edit DAG 'pv_pipeline'"):
        may_reprocess({"dag_run": run}, PIPELINE)
    may_reprocess({"dag_run": SimpleNamespace(triggering_user_name="bob", team_name="team_b")}, PIPELINE)
    asked = {"dag_run_id": "manual__eo_rollback_x", "dag_id": PIPELINE, "triggering_user_name": "alice",
             "conf": {"eo_action": "rollback", "to_version": "e1", "sinks": [SINK]},
             "data_interval_start": iv.start.isoformat(), "data_interval_end": iv.end.isoformat()}
    with pytest.raises(AirflowFailException, match=r"user 'alice' \(who triggered this run with conf eo_action "
                                                   r"rollback\) may not edit DAG 'pv_pipeline'"):
        run_begin(asked, team="team_b")                           # the page's rollback, in team_b's DAG
    assert sorted(ui["sink"].status(iv)) == before


def test_eo_reprocess_and_rerun_stale_start_correctly_dated_runs_through_the_rest_api(ui, monkeypatch, capsys):
    """``eo reprocess`` / ``eo rerun-stale`` as a user runs them against their own Airflow: a run of the table's
    DAG with the interval as its data interval and a logical date inside it (the interval's start would be
    409 next to the scheduled run; twice in a row works once the first ran, and is refused while it is queued,
    the table page's rule), conf reprocess + sinks, triggered by the login; a
    non-admin who may edit the DAG passes the begin task's check; a viewer is refused by the API; what the
    command started is printed. rerun-stale queues the table page's stale list, oldest first."""
    from datetime import datetime

    from exactly_once.airflow.operators import may_reprocess
    from exactly_once.cli import main as eo
    from exactly_once.ops.inspection import stale_intervals

    iv1 = Interval.daily(D1)
    monkeypatch.delenv("EO_AIRFLOW_TOKEN", raising=False)
    base = ["--api-url", ui["url"], "--user"]

    def runs_of(action):
        return [r for r in dag_runs(ui, PIPELINE) if r["conf"].get("eo_action") == action and "requested_by" not in r["conf"]]

    monkeypatch.delenv("EO_AIRFLOW_USER", raising=False)
    monkeypatch.setenv("EO_AIRFLOW_PASSWORD", USERS["editor"][1])
    assert eo(["reprocess", ui["table_url"], "--interval", D1, *base[:2]]) == 1   # no user: says so, asks nothing
    assert "no Airflow login: give --user (or EO_AIRFLOW_USER)" in capsys.readouterr().err
    monkeypatch.setenv("EO_AIRFLOW_PASSWORD", USERS["viewer"][1])
    assert eo(["reprocess", ui["table_url"], "--interval", D1, *base, "viewer"]) == 1
    assert "may not trigger runs of pv_pipeline" in capsys.readouterr().err and runs_of("reprocess") == []
    monkeypatch.setenv("EO_AIRFLOW_PASSWORD", USERS["editor"][1])
    out = ""
    for _ in range(2):
        assert eo(["reprocess", ui["table_url"], "--interval", f"{D1}T00:00:00Z", *base, "editor"]) == 0
        out += capsys.readouterr().out
        [pending] = [r for r in runs_of("reprocess") if r["state"] == "queued"]
        # the table page's rule: not twice while the first is queued (a retyped command, a retried script)
        assert eo(["reprocess", ui["table_url"], "--interval", D1, *base, "editor"]) == 1
        err = capsys.readouterr().err
        assert (f"ActionPendingError: a reprocess by editor of {SINK} {iv1.label} is queued (run "
                f"{pending['dag_run_id']} of {PIPELINE}): nothing started" in err), err
        settle(ui)                                  # it ran: the next reprocess of the interval goes ahead
    runs = runs_of("reprocess")
    assert len(runs) == 2 and out.count("started manual__eo_reprocess_") == 2
    for run in runs:
        assert run["triggering_user_name"] == "editor" and run["conf"] == {"reprocess": True, "sinks": [SINK],
                                                                          "eo_action": "reprocess"}
        assert (run["data_interval_start"][:19], run["data_interval_end"][:19]) == (f"{D1}T00:00:00", f"{D2}T00:00:00")
        logical = datetime.fromisoformat(run["logical_date"].replace("Z", "+00:00"))
        assert iv1.start < logical < iv1.end                           # inside: never the scheduled run's date
        assert f"{ui['url']}/dags/{PIPELINE}/runs/{run['dag_run_id']}" in out
    may_reprocess({"dag_run": SimpleNamespace(triggering_user_name="editor")}, PIPELINE)   # its begin goes ahead
    assert eo(["reprocess", ui["table_url"], "--interval", "2027-01-01", *base, "editor"]) == 1
    assert "no interval of" in capsys.readouterr().err                   # only an interval of the table's log
    stale = stale_intervals(ui["sink"])
    assert stale, "the fixture's day 2 is stale"
    assert eo(["rerun-stale", ui["table_url"], *base, "editor"]) == 0
    queued = sorted(runs_of("rerun-stale"), key=lambda r: r["run_after"])
    assert [Interval(datetime.fromisoformat(r["data_interval_start"].replace("Z", "+00:00")),
                     datetime.fromisoformat(r["data_interval_end"].replace("Z", "+00:00"))).token for r in queued] == stale
    assert "run(s) queued in interval order" in capsys.readouterr().out
    for run in (*runs, *queued):     # dated within the DAG's dates: Airflow created the tasks
        assert f"{SINK}.begin" in task_ids(ui, PIPELINE, run["dag_run_id"]), run
    assert eo(["rerun-stale", ui["table_url"], *base, "editor"]) == 1            # they are queued: not again
    assert f"is queued (run {queued[0]['dag_run_id']} of {PIPELINE}): nothing started" in capsys.readouterr().err
    assert len(runs_of("rerun-stale")) == len(stale)
    monkeypatch.setenv("EO_AIRFLOW_PASSWORD", "Wr0ng-pw-7q")
    proxied = ui["url"].replace("://", "://ops:proxy-secret@", 1)              # a URL with a proxy's login
    assert eo(["reprocess", ui["table_url"], "--interval", D1, "--api-url", proxied, "--user", "editor"]) == 1
    said = capsys.readouterr()
    assert "refused the login of 'editor'" in said.err
    assert "Wr0ng-pw-7q" not in said.err + said.out                      # the password is never printed
    assert ui["url"].replace("://", "://***@", 1) + "/auth/token refused" in said.err
    assert "proxy-secret" not in said.err + said.out
