"""The table page's actions on a real ``airflow api-server`` (one for the module): permission, confirmation,
CSRF, the DAG runs they trigger, and the provenance the table page and ``eo history`` show afterwards.

Users: ``admin`` (may edit every DAG), ``viewer`` (may read, not edit). The table ``app_pv`` of
``pv_pipeline``: day 1 committed twice (e1, then a reprocess e2 with another state), day 2 computed from
e1's state - so day 2 is stale. The api-server runs no scheduler: the tests run the triggered run's
``begin`` task (every action is a run of the pipeline's own DAG) in-process with that run's own conf,
data interval and triggering user, as a worker would.
"""
from __future__ import annotations

import os
import re
from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest

from exactly_once.ids import Interval
from ui_server import commit_day

pytestmark = pytest.mark.airflow

PIPELINE, SINK, D1, D2 = "pv_pipeline", "app_pv", "2026-01-01", "2026-01-02"
USERS = {"admin": ("admin", "admin-pw-actions"), "viewer": ("viewer", "viewer-pw-actions"),
         "editor": ("user", "editor-pw-actions")}                      # not an admin, may edit DAGs
TABLE = f"/eo/dags/{PIPELINE}/tables/{SINK}"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from ui_server import api_server

    from exactly_once.airflow import tables
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    base = tmp_path_factory.mktemp("actions")
    root = base / "data"
    (root / "landing" / "app_logs").mkdir(parents=True)
    url = str(root / "warehouse" / SINK)
    sink = TwoPhaseCommitSink.at(url, pipeline=PIPELINE, sink=SINK, require_validation=True)
    d1 = commit_day(sink, D1, "run-d1", "s1")
    commit_day(sink, D2, "run-d2", "s2", prev=d1)
    commit_day(sink, D1, "run-d1-reprocess", "s1-new")                     # day 2 read e1's state: stale
    saved = {k: os.environ.get(k) for k in ("EO_DATA_ROOT", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS")}
    with api_server(base, root, USERS) as server:
        # the worker's view (this process runs the triggered task): same data root, same users
        os.environ["EO_DATA_ROOT"] = str(root)
        os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = server["env"]["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
        tables._cache["stamp"] = None
        try:
            yield {**server, "root": root, "table_url": url, "sink": sink}
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
            tables._cache["stamp"] = None


def _as(ui, user: str, **extra) -> dict:
    return {"Authorization": f"Bearer {ui['tokens'][user]}", **extra}


def _runs(ui, dag_id: str) -> list[dict]:
    got = ui["client"].get(f"/api/v2/dags/{dag_id}/dagRuns", headers=_as(ui, "admin"))
    assert got.status_code == 200, got.text
    return got.json()["dag_runs"]


def _token(page: str) -> str:
    found = re.search(r'name="token" value="([0-9a-f]+)"', page)
    assert found, re.sub(r"<[^>]+>", " ", page.split("<body>")[-1])[:2000]   # a refusal: say why
    return found.group(1)


def _post(ui, user: str, action: str, form: dict, origin: str | None = "self") -> httpx.Response:
    headers = _as(ui, user)
    if origin:
        headers["Origin"] = ui["url"] if origin == "self" else origin
    return ui["client"].post(f"{TABLE}/actions/{action}", headers=headers, data=form)


def _settle(ui, state: str = "success") -> None:
    """End every queued run, as the scheduler would (there is none here; Airflow's REST API cannot end a run
    whose tasks were never scheduled): an action on an interval with a pending run is refused, and the
    tests that follow act on the same intervals."""
    import sqlite3

    with sqlite3.connect(ui["base"] / "airflow-home" / "airflow.db") as db:
        db.execute("update dag_run set state = ? where state in ('queued', 'running')", (state,))


def _note(ui, run_id: str, text: str) -> None:
    """The run's note, as the plugin's listener leaves it when the run ends (from its tasks' ``eo_note``)."""
    import sqlite3

    with sqlite3.connect(ui["base"] / "airflow-home" / "airflow.db") as db:
        [(pk,)] = db.execute("select id from dag_run where run_id = ?", (run_id,)).fetchall()
        db.execute("insert into dag_run_note (dag_run_id, content, created_at, updated_at) values "
                   "(?, ?, datetime('now'), datetime('now'))", (pk, text))


def _run_task(ui, dag_id: str, run_id: str):
    """Run the begin task of the table's group in-process for the DAG run ``run_id`` of the pipeline's DAG,
    with the run's conf, data interval and triggering user as Airflow recorded them (what a worker gets).
    Returns (the task's return value, the tasks it skipped, its XComs, the asset events it added)."""
    return run_begin(ui["client"].get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", headers=_as(ui, "admin")).json())


def run_begin(run: dict, config=None, team: str | None = None):
    """Run the begin task of ``config``'s group (default: the table's) in a DAG built like the pipeline's, for
    ``run`` (a DAG run as the REST API shows it), expecting it to carry out an action and skip the rest."""
    from collections import defaultdict
    from datetime import datetime, timezone

    from airflow.sdk import DAG, CronDataIntervalTimetable

    from exactly_once.airflow import exactly_once_group
    from exactly_once.airflow.compat import DownstreamTasksSkipped
    from exactly_once.airflow.tables import find_table

    config = config or find_table(PIPELINE, SINK).config
    with DAG(run["dag_id"], schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        exactly_once_group(config)
    begin = dag.get_task(f"{config.sink}.begin")
    xcoms, events = {}, defaultdict(list)
    ti = SimpleNamespace(run_id=run["dag_run_id"], try_number=1, dag_id=run["dag_id"], task_id=begin.task_id,
                         xcom_push=lambda key, value: xcoms.__setitem__(key, value), xcom_pull=lambda **k: None)
    dag_run = SimpleNamespace(run_id=run["dag_run_id"], dag_id=run["dag_id"], conf=run["conf"],
                              triggering_user_name=run["triggering_user_name"], team_name=team)
    context = {"ti": ti, "dag_run": dag_run, "dag": dag,
               "data_interval_start": datetime.fromisoformat(run["data_interval_start"].replace("Z", "+00:00")),
               "data_interval_end": datetime.fromisoformat(run["data_interval_end"].replace("Z", "+00:00")),
               "outlet_events": defaultdict(lambda: SimpleNamespace(add=lambda a, extra: events[a.uri].append(extra)))}
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        begin.execute(context)
    return xcoms["return_value"], sorted(skipped.value.tasks), xcoms, dict(events)


def test_actions_need_edit_permission_a_confirmation_and_a_same_origin_token(ui):
    client = ui["client"]
    iv = Interval.daily(D1).token
    viewer_page = client.get(TABLE, headers=_as(ui, "viewer")).text
    assert "/actions/" not in viewer_page and "need permission to edit" in viewer_page
    for action, query in (("rollback", {"interval": iv, "to": "e1"}), ("recover", {})):
        assert client.get(f"{TABLE}/actions/{action}", headers=_as(ui, "viewer"), params=query).status_code == 403
    admin_page = client.get(TABLE, headers=_as(ui, "admin")).text
    assert f"{TABLE}/actions/rollback?interval={iv}&amp;to=e1" in admin_page
    assert f"{TABLE}/actions/rerun-stale" in admin_page and f"{TABLE}/actions/recover" in admin_page
    confirm = client.get(f"{TABLE}/actions/rollback", headers=_as(ui, "admin"), params={"interval": iv, "to": "e1"})
    assert confirm.status_code == 200 and "Make version e1 of app_pv" in confirm.text
    assert "form-action 'self'" in confirm.headers["content-security-policy"]
    token = _token(confirm.text)
    good = {"token": token, "interval": iv, "to": "e1", "confirm": "yes"}
    viewer_token = _token(client.get(f"{TABLE}/actions/recover", headers=_as(ui, "admin")).text)
    refused = [
        _post(ui, "viewer", "rollback", good),                                  # may not edit the DAG
        _post(ui, "admin", "rollback", good, origin=None),                      # no Origin / Referer
        _post(ui, "admin", "rollback", good, origin="http://evil.example"),      # cross-site
        _post(ui, "admin", "rollback", {**good, "token": "0" * 64}),            # forged token
        _post(ui, "admin", "rollback", {**good, "token": viewer_token}),        # another action's token
        _post(ui, "admin", "rollback", {**good, "confirm": ""}),                # not confirmed
        _post(ui, "admin", "rollback", {**good, "to": "latest"}),               # not a version
        _post(ui, "admin", "rollback", {**good, "to": "e\u00b2"}),              # a digit, not an ASCII one
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403, 403, 400, 400, 400], [r.text for r in refused]
    assert _runs(ui, PIPELINE) == []                                          # nothing was triggered
    for to in ("e\u00b2", "e\u0661", "e\uff11"):                                # superscript, Arabic-Indic, fullwidth
        got = client.get(f"{TABLE}/actions/rollback", headers=_as(ui, "admin"), params={"interval": iv, "to": to})
        assert got.status_code == 400 and "not a version" in got.text and "give e.g. e2" in got.text, got.text


def test_rollback_action_runs_through_the_protocol_and_shows_who_did_it(ui, capsys):
    client, sink = ui["client"], ui["sink"]
    iv = Interval.daily(D1)
    confirm = client.get(f"{TABLE}/actions/rollback", headers=_as(ui, "admin"), params={"interval": iv.token, "to": "e1"})
    done = _post(ui, "admin", "rollback", {"token": _token(confirm.text), "interval": iv.token, "to": "e1",
                                           "confirm": "yes"})
    assert done.status_code == 200 and "Triggered" in done.text, done.text
    [run] = _runs(ui, PIPELINE)                     # a run of the pipeline's own DAG: no eo_rollback DAG needed
    assert run["triggering_user_name"] == "admin" and run["state"] == "queued"
    assert run["conf"] == {"to_version": "e1", "sinks": [SINK], "requested_by": "admin", "eo_action": "rollback"}
    assert (run["data_interval_start"][:10], run["data_interval_end"][:10]) == (D1, D2)
    assert f"/dags/{PIPELINE}/runs/{run['dag_run_id']}" in done.text
    result, skipped, xcoms, events = _run_task(ui, PIPELINE, run["dag_run_id"])
    assert result["version"] == sink.ref(iv, 3).name and result["rollback_of"] == sink.ref(iv, 1).name
    assert sink.committed(iv)[0].name == sink.ref(iv, 3).name
    assert skipped == [f"{SINK}.{t}" for t in ("abort", "commit", "pre_commit", "validate", "write")]
    assert xcoms["eo_note"] == "published e3: 2 rows, 1 file (rollback to e1)"
    [event] = events[f"file://{ui['table_url']}"]                          # the table's asset event, once
    assert event["version"] == sink.ref(iv, 3).name and event["interval"]["start"].startswith(D1)
    assert result["stale"] == []                                            # day 2 read e1: current again
    again, _, again_xcoms, again_events = _run_task(ui, PIPELINE, run["dag_run_id"])   # a retry, a clear
    assert again["already"] and again["version"] == result["version"] and again_events == {}
    assert sink.committed(iv)[0].name == sink.ref(iv, 3).name and len(sink.status(iv)) == 3
    page = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=_as(ui, "viewer")).json()
    [e3] = [e for row in page["intervals"] if row["start"].startswith(D1) for e in row["epochs"] if e["epoch"] == 3]
    assert e3["run_id"] == run["dag_run_id"] and e3["state"] == "COMMITTED"
    html = client.get(TABLE, headers=_as(ui, "viewer")).text
    assert "rollback to e1 by <b>admin</b>" in html
    assert f"/dags/{PIPELINE}/runs/{run['dag_run_id']}" in html
    from exactly_once.cli import main as eo

    assert eo(["history", ui["table_url"]]) == 0
    assert f"rollback to e1 by admin ({PIPELINE} run {run['dag_run_id']})" in capsys.readouterr().out
    # day 2 was computed on e1's state, live again: no longer stale (it was flagged stale after a rollback)
    assert client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=_as(ui, "admin")).json()["stale"] == []
    commit_day(sink, D1, "run-d1-again", "s1-newer")  # stale again, for the tests that follow
    _settle(ui)


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
    stale_page = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=_as(ui, "admin")).json()
    assert iv2.token in stale_page["stale"]

    def act(action: str, **form) -> httpx.Response:
        confirm = client.get(f"{TABLE}/actions/{action}", headers=_as(ui, "admin"), params=form)
        assert confirm.status_code == 200, confirm.text
        return _post(ui, "admin", action, {"token": _token(confirm.text), "confirm": "yes", **form})

    assert act("reprocess", interval=iv1.token, allow_shrinking="1").status_code == 200
    assert act("rerun-stale").status_code == 200
    runs = sorted((r for r in _runs(ui, PIPELINE) if r["conf"].get("reprocess")), key=lambda r: r["run_after"])
    assert [(r["data_interval_start"][:10], r["conf"]["eo_action"], r["conf"]["reprocess"], r["conf"]["sinks"],
             r["conf"].get("allow_shrinking"), r["triggering_user_name"]) for r in runs] == \
        [(D1, "reprocess", True, [SINK], True, "admin"), (D2, "rerun-stale", True, [SINK], None, "admin")]
    assert all(r["data_interval_end"][:10] == str(Interval.from_token(t).end.date())
               for r, t in zip(runs, (iv1.token, iv2.token)))
    assert act("recover").status_code == 200
    recover = [r for r in _runs(ui, PIPELINE) if r["conf"]["eo_action"] == "recover"]
    assert len(recover) == 1 and recover[0]["triggering_user_name"] == "admin"
    assert recover[0]["conf"]["sinks"] == [SINK] and recover[0]["data_interval_start"][:10] == D2  # newest interval
    result, skipped, xcoms, _ = _run_task(ui, PIPELINE, recover[0]["dag_run_id"])
    assert result["by"] == "admin" and isinstance(result["recover"], list) and len(skipped) == 5
    assert xcoms["eo_note"].startswith("recover by admin: ")
    _settle(ui)


def test_report_tabs_of_a_dag_without_an_exactly_once_group_say_so(ui):
    for path in ("/eo/dags/eo_rollback", "/eo/dags/eo_rollback/runs/manual__2026-01-01"):
        got = ui["client"].get(path, headers=_as(ui, "viewer"))
        assert got.status_code == 200 and "eo_rollback has no exactly-once group" in got.text, path
    assert "no exactly-once group" not in ui["client"].get(f"/eo/dags/{PIPELINE}", headers=_as(ui, "viewer")).text


def _served_data_docs(ui, run: str, html: str):
    """A GX Data Docs page of validation run ``run`` as GX wrote it, then fetched through the plugin."""
    page = ui["root"] / "reports" / "data_docs" / "validations" / "s" / f"{PIPELINE}.{run}" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(html)
    return ui["client"].get(f"/eo/reports/data_docs/validations/s/{PIPELINE}.{run}/index.html",
                            headers=_as(ui, "admin"))


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
    runs = len(_runs(ui, PIPELINE))
    confirm = client.get(f"{TABLE}/actions/rollback", headers=_as(ui, "admin"), params={"interval": iv1, "to": "e1"})
    good = {"token": _token(confirm.text), "interval": iv1, "to": "e1", "confirm": "yes"}
    shrink = client.get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"), params={"interval": iv1}).text
    refused = [_post(ui, "admin", "rollback", {**good, "interval": iv2}),           # another interval
               _post(ui, "admin", "rollback", {**good, "to": "e2"}),                # another version
               _post(ui, "admin", "reprocess", {"token": _token(shrink), "interval": iv1, "allow_shrinking": "1",
                                                "confirm": "yes"}),                 # confirmed without shrinking
               _post(ui, "admin", "recover", {"token": "\u00e9" * 88, "confirm": "yes"})]   # not ASCII
    assert [r.status_code for r in refused] == [403, 403, 403, 403], [r.text for r in refused]
    assert len(_runs(ui, PIPELINE)) == runs
    recover = _token(client.get(f"{TABLE}/actions/recover", headers=_as(ui, "admin")).text)
    first, again = (_post(ui, "admin", "recover", {"token": recover, "confirm": "yes"}) for _ in range(2))
    assert (first.status_code, again.status_code) == (200, 403) and "used already" in again.text
    assert len(_runs(ui, PIPELINE)) == runs + 1                                  # the replay triggered nothing
    _settle(ui)
    # expiry: a token issued more than TOKEN_TTL ago is refused (same key, checked in-process)
    req = actions.parse("recover", find_table(PIPELINE, SINK), {}, [])
    old = actions.form_token("admin", req, now=1_000_000)
    assert actions.token_ok(old, "admin", req, now=1_000_000 + actions.TOKEN_TTL)
    assert not actions.token_ok(old, "admin", req, now=1_000_001 + actions.TOKEN_TTL)


def test_only_intervals_of_the_tables_log_can_be_rolled_back_or_reprocessed(ui):
    week = "20270101T050000Z_20270108T050000Z"                                   # not in the log, off schedule
    for action, query in (("reprocess", {"interval": week}), ("rollback", {"interval": week, "to": "e1"})):
        got = ui["client"].get(f"{TABLE}/actions/{action}", headers=_as(ui, "admin"), params=query)
        assert got.status_code == 400 and "has no interval" in got.text, got.text
        posted = _post(ui, "admin", action, {**query, "token": "0" * 88, "confirm": "yes"})
        assert posted.status_code == 400
    assert all(not r["data_interval_start"].startswith("2027") for r in _runs(ui, PIPELINE))


def test_with_a_base_url_the_origin_must_be_it_whatever_the_host_header_says(ui):
    token = _token(ui["client"].get(f"{TABLE}/actions/recover", headers=_as(ui, "admin")).text)
    before = len(_runs(ui, PIPELINE))
    got = ui["client"].post(f"{TABLE}/actions/recover", data={"token": token, "confirm": "yes"},
                            headers=_as(ui, "admin", Origin="http://evil.example", Host="evil.example"))
    assert got.status_code == 403 and len(_runs(ui, PIPELINE)) == before


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


def test_an_action_on_one_table_runs_only_that_tables_group_of_the_dag(tmp_path, monkeypatch):
    """brk-actions reprocess_action_hits_every_sink_of_the_dag: in a DAG with two exactly-once groups,
    "Reprocess" / "Re-run the stale intervals" on sink A's page used to send ``{"reprocess": true}`` with no
    sink, so sink B's begin reprocessed B too. The conf names the sink; B's group is skipped (no epoch);
    a conf without ``sinks`` (``make run-interval REPROCESS=1``) still means every group."""
    from exactly_once.airflow import actions
    from exactly_once.airflow.compat import AirflowFailException, AirflowSkipException
    from exactly_once.airflow.operators import BeginOperator
    from exactly_once.airflow.tables import TableRef
    from exactly_once.protocol.config import PipelineConfig

    iv = Interval.daily(D1)
    (tmp_path / "landing" / "src" / f"dt={D1}").mkdir(parents=True)
    (tmp_path / "landing" / "src" / f"dt={D1}" / "a.json").write_text('{"x": 1}\n')
    a, b = (PipelineConfig(pipeline="two_sinks", sink=s, application="job.py", root=str(tmp_path), sources="src")
            for s in ("sink_a", "sink_b"))
    for cfg in (a, b):
        commit_day(cfg.sink_handle(), D1, "r1", f"{cfg.sink}-v1")
    created = []
    monkeypatch.setattr(actions, "_lock", lambda session, dag_id: None)
    monkeypatch.setattr(actions, "_unused", lambda session, dag_id, run_id: None)
    monkeypatch.setattr(actions, "_create", lambda session, dag_id, user, conf, interval=None, order=0, nonce="":
                        created.append(conf) or "run")
    for action, form, stale in (("reprocess", {"interval": iv.token}, []), ("rerun-stale", {}, [iv.token])):
        req = actions.parse(action, TableRef(a.pipeline, a.sink, a.table_url, a), form, stale)
        actions.trigger(req, "admin", actions.form_token("admin", req))
    assert [c["sinks"] for c in created] == [["sink_a"], ["sink_a"]]
    begins = {cfg.sink: BeginOperator(task_id="begin", config=cfg, begin_task_id=f"{cfg.sink}.begin") for cfg in (a, b)}
    dag = SimpleNamespace(dag_id="two_sinks", tasks=list(begins.values()))

    def begin(sink: str, conf: dict):
        ti = SimpleNamespace(run_id="manual__eo_x", try_number=1, dag_id="two_sinks", task_id=f"{sink}.begin",
                             xcom_pull=lambda **k: None)
        dag_run = SimpleNamespace(run_id=ti.run_id, dag_id="two_sinks", conf=conf, triggering_user_name=None)
        return begins[sink].execute({"ti": ti, "dag_run": dag_run, "dag": dag, "data_interval_start": iv.start,
                                     "data_interval_end": iv.end})

    def epochs(cfg):
        return {e: s.records["open"]["meta"].get("refresh_sources") for e, s in cfg.sink_handle().status(iv).items()}

    for conf in created:
        with pytest.raises(AirflowSkipException, match="this run is for sink_a .* not sink_b"):
            begin("sink_b", conf)
    assert epochs(b) == {1: None}                                          # B untouched
    assert begin("sink_a", created[0])["txn"]["epoch"] == 2 and epochs(a)[2] is True
    assert begin("sink_b", {"reprocess": True})["txn"]["epoch"] == 2 and epochs(b)[2] is True   # the CLI's conf
    with pytest.raises(AirflowFailException, match=r"names no exactly-once group of DAG two_sinks; its sinks are "
                                                   r"sink_a, sink_b"):
        begin("sink_b", {"reprocess": True, "sinks": ["sink_c"]})


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
        return [r for r in _runs(ui, PIPELINE) if r["conf"].get("eo_action") == action and "requested_by" not in r["conf"]]

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
        _settle(ui)                                  # it ran: the next reprocess of the interval goes ahead
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


def _server_token(ui, user: str, req) -> str:
    """A form token the api-server accepts (same secret), for a request its confirm page would not issue
    (an edited URL, posted directly)."""
    from exactly_once.airflow import actions
    from ui_server import JWT_SECRET

    saved = list(actions._KEY)
    actions._KEY[:] = [JWT_SECRET.encode()]
    try:
        return actions.form_token(user, req)
    finally:
        actions._KEY[:] = saved


def test_the_confirm_step_refuses_what_the_run_would_and_a_second_action_on_a_pending_interval(ui):
    """Issue 47: an edited URL (a version that does not exist, an aborted one, the live one) is refused at the
    confirm step with the reason, and so is its POST; a second action on an interval with a queued run is
    refused until that run ends. The reason typed at the confirm step is in the run's conf."""
    _settle(ui)                                      # the runs earlier tests left queued
    from exactly_once.airflow import actions
    from exactly_once.airflow.tables import find_table

    client, sink = ui["client"], ui["sink"]
    iv = Interval.daily(D2)
    live = f"e{sink.committed(iv)[0].epoch}"
    aborted = ui["sink"].begin(iv, meta={"run": {"run_id": "zombie"}})
    ui["sink"].abort(aborted)                                                  # e<n> ABORTED, newest
    before = len(_runs(ui, PIPELINE))
    for to, why in ((live, f"{live} is the live version of {iv.label} already"),
                    ("e9", f"interval {iv.label} has no version e9"),
                    (f"e{aborted.epoch}", f"e{aborted.epoch} of {iv.label} is ABORTED, not committed")):
        got = client.get(f"{TABLE}/actions/rollback", headers=_as(ui, "admin"), params={"interval": iv.token, "to": to})
        assert got.status_code == 409 and f"Refused: {why}" in got.text.replace("&#x27;", "'"), (to, got.text[-800:])
        assert 'name="token"' not in got.text                                     # no form to confirm
        req = actions.parse("rollback", find_table(PIPELINE, SINK), {"interval": iv.token, "to": to}, [])
        posted = _post(ui, "admin", "rollback", {"token": _server_token(ui, "admin", req), "interval": iv.token,
                                                  "to": to, "confirm": "yes"})
        assert posted.status_code == 409 and why in posted.text.replace("&#x27;", "'"), posted.text[-800:]
    assert len(_runs(ui, PIPELINE)) == before                                 # nothing was triggered

    confirm = client.get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"), params={"interval": iv.token})
    assert confirm.status_code == 200 and "attempts in flight" in confirm.text, confirm.text[-2000:]
    early = _token(client.get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"),
                              params={"interval": iv.token}).text)   # a second confirm page, open before the first runs
    done = _post(ui, "admin", "reprocess", {"token": _token(confirm.text), "interval": iv.token, "confirm": "yes",
                                            "reason": "late files\nfrom the partner feed\x00"})
    assert done.status_code == 200, done.text
    [run] = [r for r in _runs(ui, PIPELINE) if r["state"] == "queued"]
    assert run["conf"]["eo_reason"] == "late files from the partner feed"
    second = client.get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"), params={"interval": iv.token})
    assert second.status_code == 409 and f"is queued (run {run['dag_run_id']}" in second.text, second.text[-800:]
    raced = _post(ui, "admin", "reprocess", {"token": early, "interval": iv.token, "confirm": "yes"})
    assert raced.status_code == 409 and "is queued" in raced.text and "Error" not in raced.text.split("<body>")[1]
    assert len(_runs(ui, PIPELINE)) == before + 1
    page = client.get(TABLE, headers=_as(ui, "viewer")).text
    row = page[page.index(f'data-interval="{iv.token}"'):].split("</tr>")[0]
    assert f'data-run="{run["dag_run_id"]}" data-state="queued"' in row and "late files from the partner feed" in row
    other = client.get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"),
                       params={"interval": Interval.daily(D1).token})
    assert other.status_code == 200                                           # another interval: not blocked
    _settle(ui, "failed")
    _note(ui, run["dag_run_id"], "refused: InputsShrankError: 1 input file(s) ... reprocess with allow shrinking")
    page = client.get(TABLE, headers=_as(ui, "viewer")).text
    row = page[page.index(f'data-interval="{iv.token}"'):].split("</tr>")[0]
    assert f'data-run="{run["dag_run_id"]}" data-state="refused"' in row      # failed before it began anything
    assert "refused</span> reprocess by <b>admin</b> because &ldquo;late files from the partner feed&rdquo; - " \
           "InputsShrankError: 1 input file(s) ... reprocess with allow shrinking" in row, row   # and why
    assert client.get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"),
                      params={"interval": iv.token}).status_code == 200   # nothing pending any more


def test_a_reason_typed_at_confirm_is_in_the_provenance_and_eo_history(ui, capsys):
    _settle(ui)                                      # the runs earlier tests left queued
    client, sink = ui["client"], ui["sink"]
    iv = Interval.daily(D1)
    to = f"e{min(sink.status(iv))}"
    confirm = client.get(f"{TABLE}/actions/rollback", headers=_as(ui, "admin"), params={"interval": iv.token, "to": to})
    assert confirm.status_code == 200 and "later intervals that go stale" in confirm.text, confirm.text[-2000:]
    assert f"live version now</dt><dd>e{sink.committed(iv)[0].epoch} (2 rows, 1 file)" in confirm.text
    done = _post(ui, "admin", "rollback", {"token": _token(confirm.text), "interval": iv.token, "to": to,
                                           "confirm": "yes", "reason": "e3's <state> was wrong"})
    assert done.status_code == 200, done.text
    [run] = [r for r in _runs(ui, PIPELINE) if r["state"] == "queued"]
    assert run["conf"]["eo_reason"] == "e3's <state> was wrong"
    _run_task(ui, PIPELINE, run["dag_run_id"])
    _settle(ui)
    from exactly_once.cli import main as eo

    assert eo(["history", ui["table_url"]]) == 0
    assert (f"rollback to {to} by admin because \"e3's <state> was wrong\" ({PIPELINE} run {run['dag_run_id']})"
            in capsys.readouterr().out)
    html = client.get(TABLE, headers=_as(ui, "viewer")).text
    assert f"rollback to {to} by <b>admin</b> because &ldquo;e3&#x27;s &lt;state&gt; was wrong&rdquo;" in html
    commit_day(sink, D1, "run-d1-later", "s1-latest")


def test_a_paused_dag_is_said_and_unpaused_from_the_table_page(ui):
    _settle(ui)                                      # the runs earlier tests left queued
    client = ui["client"]
    got = client.patch(f"/api/v2/dags/{PIPELINE}", headers=_as(ui, "admin"), json={"is_paused": True})
    assert got.status_code == 200, got.text
    viewer = client.get(TABLE, headers=_as(ui, "viewer")).text
    assert f"DAG {PIPELINE} is paused" in viewer and "Unpause" not in viewer
    page = client.get(TABLE, headers=_as(ui, "admin")).text
    token = _token(page[page.index('id="paused"'):])
    assert _post(ui, "viewer", "unpause", {"token": token, "confirm": "yes"}).status_code == 403
    assert _post(ui, "admin", "unpause", {"token": token, "confirm": "yes"}, origin="http://evil.example").status_code == 403
    assert client.get(f"/api/v2/dags/{PIPELINE}", headers=_as(ui, "admin")).json()["is_paused"] is True
    done = _post(ui, "admin", "unpause", {"token": token, "confirm": "yes"})
    assert done.status_code == 200 and f"Unpaused {PIPELINE}" in done.text, done.text
    assert client.get(f"/api/v2/dags/{PIPELINE}", headers=_as(ui, "admin")).json()["is_paused"] is False
    assert f"DAG {PIPELINE} is paused" not in client.get(TABLE, headers=_as(ui, "admin")).text


def test_localhost_and_127_0_0_1_are_the_same_server_and_a_refusal_says_where_to_go(ui):
    _settle(ui)                                      # the runs earlier tests left queued
    port = ui["url"].rsplit(":", 1)[1]
    token = _token(ui["client"].get(f"{TABLE}/actions/recover", headers=_as(ui, "admin")).text)
    refused = _post(ui, "admin", "recover", {"token": token, "confirm": "yes"}, origin=f"http://localhost:{int(port) + 1}")
    assert refused.status_code == 403 and f"this server, {ui['url']} - open Airflow" in refused.text
    got = _post(ui, "admin", "recover", {"token": token, "confirm": "yes"}, origin=f"http://localhost:{port}")
    assert got.status_code == 200, got.text
    _settle(ui)


def test_a_double_submit_of_one_confirmation_makes_one_run_and_no_raw_error(ui):
    """Issue 47: a double click on "Trigger the run" gave a 409 page with the raw IntegrityError and SQL."""
    _settle(ui)                                      # the runs earlier tests left queued
    import concurrent.futures

    before = len(_runs(ui, PIPELINE))
    token = _token(ui["client"].get(f"{TABLE}/actions/recover", headers=_as(ui, "admin")).text)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: _post(ui, "admin", "recover", {"token": token, "confirm": "yes"}), range(2)))
    assert sorted(r.status_code for r in got) == [200, 403], [r.text[-500:] for r in got]
    for r in got:
        assert "IntegrityError" not in r.text and "INSERT" not in r.text
    assert "used already" in next(r.text for r in got if r.status_code == 403)
    assert len(_runs(ui, PIPELINE)) == before + 1
    _settle(ui)


def test_an_unexpected_error_is_a_page_that_says_what_to_do_never_the_exception(monkeypatch, tmp_path):
    """Issue 47: no page shows raw exception text (SQL, parameters); the error id leads to the server's log."""
    from fastapi.testclient import TestClient

    from exactly_once.airflow import auth, webapp

    monkeypatch.setenv("EO_DATA_ROOT", str(tmp_path))
    app = webapp.create_app()
    app.dependency_overrides[auth.get_user] = lambda: SimpleNamespace(get_name=lambda: "admin")

    def broken():
        raise RuntimeError("(psycopg2.IntegrityError) INSERT INTO dag_run ... password=hunter2")

    monkeypatch.setattr(webapp, "known_tables", broken)
    monkeypatch.setattr(webapp, "find_table", lambda *a: broken())
    monkeypatch.setattr(webapp, "authorize_dag", lambda *a: None)
    # raises what leaves the app: mounted in Airflow's API server, an error raised after its page was sent
    # (an app-wide exception handler re-raises) cut the page - the browser got a dropped connection
    client = TestClient(app)
    for path in ("/tables", "/data-docs", f"{TABLE[3:]}/actions/rollback?interval=x&to=e1"):
        got = client.get(path)
        assert got.status_code == 500 and got.headers["content-type"].startswith("text/html"), got.text
        assert "INSERT" not in got.text and "hunter2" not in got.text and "RuntimeError" not in got.text
        assert re.search(r"could not be made \(error [0-9a-f]{8}\): reload it", got.text)
        assert "default-src 'none'" in got.headers["content-security-policy"]


def test_needs_attention_lists_what_the_index_counts_and_runs_made_elsewhere_are_not_links(ui):
    """Issue 47: "Needs attention" omitted an interval whose only attempt aborted (the index counted it);
    epochs of runs this Airflow does not know (``airflow dags test`` elsewhere) linked to a 404."""
    d5 = Interval.daily("2026-01-05")
    txn = ui["sink"].begin(d5, meta={"run": {"run_id": "manual__dags_test_elsewhere"}})
    ui["sink"].abort(txn, reason="failed check: rejected_ratio 0.2 > 0.05")
    page = ui["client"].get(TABLE, headers=_as(ui, "viewer")).text
    attention = page[page.index("<h2>Needs attention</h2>"):].split("</ul>")[0]
    assert "2026-01-05 00:00 - 2026-01-06 00:00</b>: no version is live - e1 ABORTED (" in attention, attention
    assert "fix the cause, then reprocess the interval" in attention
    index = ui["client"].get("/eo/tables", headers=_as(ui, "viewer")).text
    assert "not committed" in index
    assert "/runs/manual__dags_test_elsewhere" not in page and "/runs/run-d1\"" not in page   # no 404 links
    assert page.count("(not a run of this Airflow)") >= 2
    version = ui["client"].get(f"{TABLE}/versions/{txn.name}", headers=_as(ui, "viewer")).text
    assert "manual__dags_test_elsewhere" in version and "/runs/manual__dags_test_elsewhere" not in version


def test_a_plain_reprocess_of_shrunk_inputs_is_refused_at_confirm_and_the_page_says_allow_shrinking(ui):
    """Issue 47: "1 missing - reprocess the interval to take them in" (a plain reprocess is refused: allow
    shrinking is needed); the confirm step now refuses the plain one and lists what allow shrinking drops."""
    from exactly_once.protocol.layout import Source, list_inputs

    _settle(ui)
    day = "2026-01-06"
    iv, sink = Interval.daily(day), ui["sink"]
    landing = ui["root"] / "landing" / "app_logs" / f"dt={day}"
    landing.mkdir(parents=True)
    for name in ("a.jsonl", "b.jsonl"):
        (landing / name).write_text('{"x": 1}\n')
    sources = [dict(i.to_dict(), source="app_logs") for i in list_inputs(
        sink.storage, str(ui["root"] / "landing" / "app_logs"), Source("app_logs", format="json",
                                                                       path="dt={start:%Y-%m-%d}"), iv)]
    txn = sink.begin(iv, sources=sources, meta={"run": {"run_id": "r6"}})
    from protocol_helpers import write_output

    write_output(sink, txn, {f"dt={day}": [[(1, "a")]]})
    sink.pre_commit(txn, extra={"counts": {"records_in": 2, "rows_written": {f"dt={day}": 1}}})
    sink.record_validation(txn, True, {"failures": []})
    sink.commit(txn)
    (landing / "b.jsonl").unlink()                                            # deleted on purpose, or by mistake
    page = ui["client"].get(TABLE, headers=_as(ui, "admin")).text
    attention = page[page.index("<h2>Needs attention</h2>"):].split("</ul>")[0]
    assert (f"1 missing ({'dt=' + day}/b.jsonl) - input files the live version read are gone: a plain reprocess "
            "is refused; reprocess with allow shrinking to drop their data, or put them back") in attention, attention
    plain = ui["client"].get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"), params={"interval": iv.token})
    assert plain.status_code == 409 and "1 input file(s) the live version read are gone" in plain.text
    assert f"actions/reprocess?interval={iv.token}&amp;allow_shrinking=1\">Reprocess with allow shrinking" in plain.text
    shrink = ui["client"].get(f"{TABLE}/actions/reprocess", headers=_as(ui, "admin"),
                              params={"interval": iv.token, "allow_shrinking": "1"})
    assert shrink.status_code == 200 and f"input files it drops</dt><dd>dt={day}/b.jsonl</dd>" in shrink.text


def test_the_page_lists_plain_runs_and_recover_runs_with_their_state_and_a_fenced_attempt_says_nothing_to_do(ui):
    _settle(ui)
    recover = _token(ui["client"].get(f"{TABLE}/actions/recover", headers=_as(ui, "admin")).text)
    assert _post(ui, "admin", "recover", {"token": recover, "confirm": "yes"}).status_code == 200
    _settle(ui)                                                                # the scheduler ran it
    iv = Interval.daily(D1)
    made = ui["client"].post(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=_as(ui, "admin"), json={
        "dag_run_id": "manual__plain", "logical_date": (iv.start + timedelta(hours=3)).isoformat(),
        "data_interval_start": iv.start.isoformat(), "data_interval_end": iv.end.isoformat()})
    assert made.status_code == 200, made.text
    page = ui["client"].get(TABLE, headers=_as(ui, "viewer")).text
    row = page[page.index(f'data-interval="{iv.token}"'):].split("</tr>")[0]
    assert 'data-run="manual__plain" data-state="queued"' in row and "queued</span> manual" in row, row
    table_wide = page[page.index("<h2>Runs on the whole table</h2>"):].split("</ul>")[0]
    assert 'data-state="success"' in table_wide and "recover by <b>admin</b>" in table_wide, table_wide
    _settle(ui)
    # an attempt a newer one fenced: its error no longer advises re-running the interval (that would undo
    # what the newer attempt - a rollback, a reprocess - did)
    from exactly_once.airflow.tables import find_table
    from exactly_once.errors import TransactionAbortedError
    from exactly_once.protocol.pipeline import IntervalRun

    d7 = Interval.daily("2026-01-07")
    old = ui["sink"].begin(d7, meta={"run": {"run_id": "old"}})
    ui["sink"].begin(d7, meta={"run": {"run_id": "new"}})
    ui["sink"].abort(old, reason="fenced: epoch 2 of the interval began")
    with pytest.raises(TransactionAbortedError) as fenced:
        IntervalRun(find_table(PIPELINE, SINK).config, d7).counts(old)
    assert "re-run the interval" not in str(fenced.value) and "Nothing to do: the newer attempt decides" in str(fenced.value)
