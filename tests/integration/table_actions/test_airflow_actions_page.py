"""The table page as an operator uses it (issue 47), on the package's ``airflow api-server`` (conftest.py's ``ui``,
after ``test_airflow_actions``' tests): the confirm step applies the run's own refusals and refuses a second
action on an interval with a pending run; the reason typed there is kept; a paused DAG is said and unpaused;
a double submit makes one run; no page shows a raw exception; "Needs attention", shrunk inputs and the runs on
an interval as the page lists them. And an action on one table of a DAG with two exactly-once groups runs
only that table's group."""
from __future__ import annotations

import re
from datetime import timedelta
from types import SimpleNamespace

import pytest

from actions_helpers import (D1, D2, END, PIPELINE, SINK, TABLE, USERS, as_user, dag_runs, post_as, run_task,
                             set_run_note, settle, task_ids, token_in)
from exactly_once.ids import Interval
from ui_server import commit_day

pytestmark = pytest.mark.airflow


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
    monkeypatch.setattr(actions, "_dag", lambda session, dag_id: SimpleNamespace(
        dag_id=dag_id, start_date=None, end_date=None, task_dict={}))
    monkeypatch.setattr(actions, "_create", lambda session, dag, dates, user, conf, interval=None, order=0, nonce="":
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
    settle(ui)                                      # the runs earlier tests left queued
    from exactly_once.airflow import actions
    from exactly_once.airflow.tables import find_table

    client, sink = ui["client"], ui["sink"]
    iv = Interval.daily(D2)
    live = f"e{sink.committed(iv)[0].epoch}"
    aborted = ui["sink"].begin(iv, meta={"run": {"run_id": "zombie"}})
    ui["sink"].abort(aborted)                                                  # e<n> ABORTED, newest
    before = len(dag_runs(ui, PIPELINE))
    for to, why in ((live, f"{live} is the live version of {iv.label} already"),
                    ("e9", f"interval {iv.label} has no version e9"),
                    (f"e{aborted.epoch}", f"e{aborted.epoch} of {iv.label} is ABORTED, not committed")):
        got = client.get(f"{TABLE}/actions/rollback", headers=as_user(ui, "admin"), params={"interval": iv.token, "to": to})
        assert got.status_code == 409 and f"Refused: {why}" in got.text.replace("&#x27;", "'"), (to, got.text[-800:])
        assert 'name="token"' not in got.text                                     # no form to confirm
        req = actions.parse("rollback", find_table(PIPELINE, SINK), {"interval": iv.token, "to": to}, [])
        posted = post_as(ui, "admin", "rollback", {"token": _server_token(ui, "admin", req), "interval": iv.token,
                                                  "to": to, "confirm": "yes"})
        assert posted.status_code == 409 and why in posted.text.replace("&#x27;", "'"), posted.text[-800:]
    assert len(dag_runs(ui, PIPELINE)) == before                                 # nothing was triggered

    confirm = client.get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"), params={"interval": iv.token})
    assert confirm.status_code == 200 and "attempts in flight" in confirm.text, confirm.text[-2000:]
    early = token_in(client.get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"),
                              params={"interval": iv.token}).text)   # a second confirm page, open before the first runs
    done = post_as(ui, "admin", "reprocess", {"token": token_in(confirm.text), "interval": iv.token, "confirm": "yes",
                                            "reason": "late files\nfrom the partner feed\x00"})
    assert done.status_code == 200, done.text
    [run] = [r for r in dag_runs(ui, PIPELINE) if r["state"] == "queued"]
    assert run["conf"]["eo_reason"] == "late files from the partner feed"
    second = client.get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"), params={"interval": iv.token})
    assert second.status_code == 409 and f"is queued (run {run['dag_run_id']}" in second.text, second.text[-800:]
    raced = post_as(ui, "admin", "reprocess", {"token": early, "interval": iv.token, "confirm": "yes"})
    assert raced.status_code == 409 and "is queued" in raced.text and "Error" not in raced.text.split("<body>")[1]
    assert len(dag_runs(ui, PIPELINE)) == before + 1
    page = client.get(TABLE, headers=as_user(ui, "viewer")).text
    row = page[page.index(f'data-interval="{iv.token}"'):].split("</tr>")[0]
    assert f'data-run="{run["dag_run_id"]}" data-state="queued"' in row and "late files from the partner feed" in row
    other = client.get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"),
                       params={"interval": Interval.daily(D1).token})
    assert other.status_code == 200                                           # another interval: not blocked
    settle(ui, "failed")
    set_run_note(ui, run["dag_run_id"], "refused: InputsShrankError: 1 input file(s) ... reprocess with allow shrinking")
    page = client.get(TABLE, headers=as_user(ui, "viewer")).text
    row = page[page.index(f'data-interval="{iv.token}"'):].split("</tr>")[0]
    assert f'data-run="{run["dag_run_id"]}" data-state="refused"' in row      # failed before it began anything
    assert "refused</span> reprocess by <b>admin</b> because &ldquo;late files from the partner feed&rdquo; - " \
           "InputsShrankError: 1 input file(s) ... reprocess with allow shrinking" in row, row   # and why
    assert client.get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"),
                      params={"interval": iv.token}).status_code == 200   # nothing pending any more


def test_a_reason_typed_at_confirm_is_in_the_provenance_and_eo_history(ui, capsys):
    settle(ui)                                      # the runs earlier tests left queued
    client, sink = ui["client"], ui["sink"]
    iv = Interval.daily(D1)
    to = f"e{min(sink.status(iv))}"
    confirm = client.get(f"{TABLE}/actions/rollback", headers=as_user(ui, "admin"), params={"interval": iv.token, "to": to})
    assert confirm.status_code == 200 and "later intervals that go stale" in confirm.text, confirm.text[-2000:]
    assert f"live version now</dt><dd>e{sink.committed(iv)[0].epoch} (2 rows, 1 file)" in confirm.text
    done = post_as(ui, "admin", "rollback", {"token": token_in(confirm.text), "interval": iv.token, "to": to,
                                           "confirm": "yes", "reason": "e3's <state> was wrong"})
    assert done.status_code == 200, done.text
    [run] = [r for r in dag_runs(ui, PIPELINE) if r["state"] == "queued"]
    assert run["conf"]["eo_reason"] == "e3's <state> was wrong"
    run_task(ui, PIPELINE, run["dag_run_id"])
    settle(ui)
    from exactly_once.cli import main as eo

    assert eo(["history", ui["table_url"]]) == 0
    assert (f"rollback to {to} by admin because \"e3's <state> was wrong\" ({PIPELINE} run {run['dag_run_id']})"
            in capsys.readouterr().out)
    html = client.get(TABLE, headers=as_user(ui, "viewer")).text
    assert f"rollback to {to} by <b>admin</b> because &ldquo;e3&#x27;s &lt;state&gt; was wrong&rdquo;" in html
    commit_day(sink, D1, "run-d1-later", "s1-latest")


def test_a_paused_dag_is_said_and_unpaused_from_the_table_page(ui):
    settle(ui)                                      # the runs earlier tests left queued
    client = ui["client"]
    got = client.patch(f"/api/v2/dags/{PIPELINE}", headers=as_user(ui, "admin"), json={"is_paused": True})
    assert got.status_code == 200, got.text
    viewer = client.get(TABLE, headers=as_user(ui, "viewer")).text
    assert f"DAG {PIPELINE} is paused" in viewer and "Unpause" not in viewer
    page = client.get(TABLE, headers=as_user(ui, "admin")).text
    token = token_in(page[page.index('id="paused"'):])
    assert post_as(ui, "viewer", "unpause", {"token": token, "confirm": "yes"}).status_code == 403
    assert post_as(ui, "admin", "unpause", {"token": token, "confirm": "yes"}, origin="http://evil.example").status_code == 403
    assert client.get(f"/api/v2/dags/{PIPELINE}", headers=as_user(ui, "admin")).json()["is_paused"] is True
    done = post_as(ui, "admin", "unpause", {"token": token, "confirm": "yes"})
    assert done.status_code == 200 and f"Unpaused {PIPELINE}" in done.text, done.text
    assert client.get(f"/api/v2/dags/{PIPELINE}", headers=as_user(ui, "admin")).json()["is_paused"] is False
    assert f"DAG {PIPELINE} is paused" not in client.get(TABLE, headers=as_user(ui, "admin")).text


def test_localhost_and_127_0_0_1_are_the_same_server_and_a_refusal_says_where_to_go(ui):
    settle(ui)                                      # the runs earlier tests left queued
    port = ui["url"].rsplit(":", 1)[1]
    token = token_in(ui["client"].get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin")).text)
    refused = post_as(ui, "admin", "recover", {"token": token, "confirm": "yes"}, origin=f"http://localhost:{int(port) + 1}")
    assert refused.status_code == 403 and f"this server, {ui['url']} - open Airflow" in refused.text
    got = post_as(ui, "admin", "recover", {"token": token, "confirm": "yes"}, origin=f"http://localhost:{port}")
    assert got.status_code == 200, got.text
    settle(ui)


def test_a_double_submit_of_one_confirmation_makes_one_run_and_no_raw_error(ui):
    """Issue 47: a double click on "Trigger the run" gave a 409 page with the raw IntegrityError and SQL. Here
    the second submit follows the first (the page's 403); the interleavings of two at once, each forced, are
    ``test_action_lock_postgres.py::test_a_double_submit_of_one_confirmation_*``."""
    settle(ui)                                      # the runs earlier tests left queued
    before = len(dag_runs(ui, PIPELINE))
    token = token_in(ui["client"].get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin")).text)
    got = [post_as(ui, "admin", "recover", {"token": token, "confirm": "yes"}) for _ in range(2)]
    assert [r.status_code for r in got] == [200, 403], [r.text[-500:] for r in got]
    for r in got:
        assert "IntegrityError" not in r.text and "INSERT" not in r.text
    assert "used already" in got[1].text
    assert len(dag_runs(ui, PIPELINE)) == before + 1
    settle(ui)


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
    page = ui["client"].get(TABLE, headers=as_user(ui, "viewer")).text
    attention = page[page.index("<h2>Needs attention</h2>"):].split("</ul>")[0]
    assert "2026-01-05 00:00 - 2026-01-06 00:00</b>: no version is live - e1 ABORTED (" in attention, attention
    assert "fix the cause, then reprocess the interval" in attention
    index = ui["client"].get("/eo/tables", headers=as_user(ui, "viewer")).text
    assert "not committed" in index
    assert "/runs/manual__dags_test_elsewhere" not in page and "/runs/run-d1\"" not in page   # no 404 links
    assert page.count("(not a run of this Airflow)") >= 2
    version = ui["client"].get(f"{TABLE}/versions/{txn.name}", headers=as_user(ui, "viewer")).text
    assert "manual__dags_test_elsewhere" in version and "/runs/manual__dags_test_elsewhere" not in version


def test_a_plain_reprocess_of_shrunk_inputs_is_refused_at_confirm_and_the_page_says_allow_shrinking(ui):
    """Issue 47: "1 missing - reprocess the interval to take them in" (a plain reprocess is refused: allow
    shrinking is needed); the confirm step now refuses the plain one and lists what allow shrinking drops."""
    from exactly_once.protocol.layout import Source, list_inputs

    settle(ui)
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
    page = ui["client"].get(TABLE, headers=as_user(ui, "admin")).text
    attention = page[page.index("<h2>Needs attention</h2>"):].split("</ul>")[0]
    assert (f"1 missing ({'dt=' + day}/b.jsonl) - input files the live version read are gone: a plain reprocess "
            "is refused; reprocess with allow shrinking to drop their data, or put them back") in attention, attention
    plain = ui["client"].get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"), params={"interval": iv.token})
    assert plain.status_code == 409 and "1 input file(s) the live version read are gone" in plain.text
    assert f"actions/reprocess?interval={iv.token}&amp;allow_shrinking=1\">Reprocess with allow shrinking" in plain.text
    shrink = ui["client"].get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"),
                              params={"interval": iv.token, "allow_shrinking": "1"})
    assert shrink.status_code == 200 and f"input files it drops</dt><dd>dt={day}/b.jsonl</dd>" in shrink.text


def test_the_page_lists_plain_runs_and_recover_runs_with_their_state_and_a_fenced_attempt_says_nothing_to_do(ui):
    settle(ui)
    recover = token_in(ui["client"].get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin")).text)
    assert post_as(ui, "admin", "recover", {"token": recover, "confirm": "yes"}).status_code == 200
    settle(ui)                                                                # the scheduler ran it
    iv = Interval.daily(D1)
    made = ui["client"].post(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=as_user(ui, "admin"), json={
        "dag_run_id": "manual__plain", "logical_date": (iv.start + timedelta(hours=3)).isoformat(),
        "data_interval_start": iv.start.isoformat(), "data_interval_end": iv.end.isoformat()})
    assert made.status_code == 200, made.text
    page = ui["client"].get(TABLE, headers=as_user(ui, "viewer")).text
    row = page[page.index(f'data-interval="{iv.token}"'):].split("</tr>")[0]
    assert 'data-run="manual__plain" data-state="queued"' in row and "queued</span> manual" in row, row
    table_wide = page[page.index("<h2>Runs on the whole table</h2>"):].split("</ul>")[0]
    assert 'data-state="success"' in table_wide and "recover by <b>admin</b>" in table_wide, table_wide
    settle(ui)
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


def test_the_ended_dags_last_interval_gets_its_tasks_and_one_after_its_end_is_refused_at_confirm(ui, monkeypatch,
                                                                                                capsys):
    """The fixture's DAG ends at day 8 (its end_date: the start of its last interval). A reprocess of day 8 -
    from the page, and by `eo reprocess` through the REST API - is dated in the minute before the interval's
    start (after it, Airflow would create no task and the run would do nothing) and gets its tasks. A logged
    interval after the end (day 9) can be dated nowhere: the confirm page refuses it (409) naming the dates and
    both ways out, its POST creates no run, and so does the CLI. Recover's run carries day 8, the newest
    interval within the DAG's dates."""
    from datetime import datetime

    from exactly_once.airflow import actions
    from exactly_once.airflow.tables import find_table
    from exactly_once.cli import main as eo

    last, after = Interval.daily(END), Interval.daily("2026-01-09")
    commit_day(ui["sink"], END, "r8", "s8")
    commit_day(ui["sink"], "2026-01-09", "r9", "s9")
    settle(ui)

    def runs_total() -> int:  # every run, not the API's first page
        got = ui["client"].get(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=as_user(ui, "admin"), params={"limit": 1})
        return got.json()["total_entries"]

    def queued_run(iv) -> dict:
        [run] = [r for r in dag_runs(ui, PIPELINE) if r["state"] == "queued"]
        logical = datetime.fromisoformat(run["logical_date"].replace("Z", "+00:00"))
        assert run["data_interval_start"][:10] == str(iv.start.date()), run
        assert iv.start - timedelta(minutes=1) < logical < iv.start, run              # before the end
        assert f"{SINK}.begin" in task_ids(ui, PIPELINE, run["dag_run_id"]), run
        settle(ui)
        return run

    confirm = ui["client"].get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"),
                               params={"interval": last.token})
    assert confirm.status_code == 200 and f"(a run of {PIPELINE} with reprocess).</p>" in confirm.text, confirm.text
    assert post_as(ui, "admin", "reprocess", {"token": token_in(confirm.text), "interval": last.token,
                                              "confirm": "yes"}).status_code == 200
    queued_run(last)
    monkeypatch.delenv("EO_AIRFLOW_TOKEN", raising=False)
    monkeypatch.setenv("EO_AIRFLOW_PASSWORD", USERS["editor"][1])
    cli = [ui["table_url"], "--api-url", ui["url"], "--user", "editor"]
    assert eo(["reprocess", *cli[:1], "--interval", END, *cli[1:]]) == 0
    assert queued_run(last)["triggering_user_name"] == "editor"

    before = runs_total()
    refused = ui["client"].get(f"{TABLE}/actions/reprocess", headers=as_user(ui, "admin"),
                               params={"interval": after.token})
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", refused.text)).replace("&#x27;", "'")
    assert refused.status_code == 409 and 'name="token"' not in refused.text, text
    assert "the end_date 2026-01-08 00:00:00+00:00 of every task the group needs (the DAG's date" in text, text
    assert "no date for a run of 2026-01-09" in text, text
    assert (f"--dag-id {PIPELINE} --from-date 2026-01-09T00:00:00+00:00 --to-date 2026-01-09T00:00:00+00:00 "
            f"--reprocess-behavior completed --dag-run-conf '{{\"reprocess\": true, \"sinks\": [\"{SINK}\"]}}'") \
        in text.replace("&quot;", '"'), text
    req = actions.parse("reprocess", find_table(PIPELINE, SINK), {"interval": after.token}, [])
    posted = post_as(ui, "admin", "reprocess", {"token": _server_token(ui, "admin", req), "interval": after.token,
                                                "confirm": "yes"})
    assert posted.status_code == 409 and "no date for a run of 2026-01-09" in posted.text, posted.text[-800:]
    capsys.readouterr()
    assert eo(["reprocess", *cli[:1], "--interval", "2026-01-09", *cli[1:]]) == 1
    assert "ConfigError" in capsys.readouterr().err and runs_total() == before
    from exactly_once.ops import inspection

    # a stale list of day 2 and day 9 (stale intervals are found along an unbroken chain; this log has gaps)
    monkeypatch.setattr(inspection, "stale_intervals", lambda sink: [Interval.daily(D2).token, after.token])
    assert eo(["rerun-stale", *cli]) == 1                  # day 9 cannot be dated: day 2's run does not start either
    assert "no date for a run of 2026-01-09" in capsys.readouterr().err
    assert runs_total() == before
    recover = ui["client"].get(f"{TABLE}/actions/recover", headers=as_user(ui, "admin"))
    assert post_as(ui, "admin", "recover", {"token": token_in(recover.text), "confirm": "yes"}).status_code == 200
    queued_run(last)
