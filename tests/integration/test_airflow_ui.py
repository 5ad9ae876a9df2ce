"""The plugin's pages on a real ``airflow api-server`` started the way ``make ui`` starts it.

One server for the module (SimpleAuthManager; users admin and viewer with known passwords), a table
``app_pv`` of ``pv_pipeline`` whose log holds every situation the table page must explain: a clean
commit with a late file, a failed check and a re-run, a reprocessed interval that makes the next one
stale, and an attempt fenced by a newer one that is pre-committed but not committed (recover would
commit it). Every route refuses anonymous and unauthorized requests; logged-in users see the facts.
"""
from __future__ import annotations

import http.server
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote, unquote

import httpx
import pytest

from eo_testing import need
from exactly_once.ids import Interval
from protocol_helpers import write_output
from ui_server import JWT_SECRET

pytestmark = pytest.mark.airflow

PIPELINE, SINK = "pv_pipeline", "app_pv"
D1, D2, D3, D4 = "2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"
PASSWORDS = {"admin": "admin-pw-for-tests", "viewer": "viewer-pw-for-tests"}


# ------------------------------------------------------------------------------------------ the data
def _summary(reports: Path, txn: str, ratio: float, passed: bool) -> dict:
    suites = {}
    for suite in ("app_pv", "app_pv.counts", "app_pv.checkpoint"):
        page = reports / "data_docs" / "validations" / suite / f"{PIPELINE}.{txn}" / "t" / "page.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<html><body>suite {suite} of {txn}</body></html>")
        suites[suite] = {"success": passed or suite != "app_pv.counts", "report": str(page)}
    failures = [] if passed else [f"expect_column_values_to_be_between(rejected_ratio): observed {ratio}, "
                                  "expected >= 0 and <= 0.05"]
    return {"rejected_ratio": ratio, "max_malformed_ratio": 0.05, "completeness_gap": 0, "suites": suites,
            "failures": failures, "measured": {"records_in": 1000, "records_rejected": round(ratio * 1000),
                                               "rejected_ratio": ratio, "completeness_gap": 0,
                                               "rows_written_gap": 0}}


def _attempt(sink, day: str, run_id: str, *, ratio: float = 0.02, verdict: bool | None = True,
             commit: bool = True, prev: str | None = None, fingerprint: str = "f") -> str:
    from exactly_once.ids import Interval
    from exactly_once.protocol.layout import Source, list_inputs

    source = Source("app_logs", format="json", path="dt={start:%Y-%m-%d}")
    sources = [dict(i.to_dict(), source="app_logs")
               for i in list_inputs(sink.storage, os.environ["EO_UI_LANDING"], source, Interval.daily(day))]
    reads = None
    if prev:
        from exactly_once.ids import parse_txn_name

        token, epoch = parse_txn_name(prev)
        reads = sink.ref(Interval.from_token(token), epoch)
    txn = sink.begin(Interval.daily(day), sources=sources, meta={"prev": prev, "run": {"run_id": run_id}},
                     reads=reads)
    write_output(sink, txn, {f"dt={day}": [[(1, "a"), (2, "b")], [(3, "c")]]})
    counts = {"records_in": 1000, "records_rejected": round(ratio * 1000), "records_deduplicated": 7,
              "rows_written": {f"dt={day}": 3}}
    sink.pre_commit(txn, extra={"counts": counts, "state_fingerprint": fingerprint})
    if verdict is not None:
        sink.record_validation(txn, verdict, _summary(Path(os.environ["EO_UI_REPORTS"]), txn.name, ratio, verdict))
    if verdict is False:
        sink.abort(txn)
    elif commit:
        sink.commit(txn)
    return txn.name


def build_table(root: Path, run_id: str) -> None:
    """The log of app_pv over four days (see the module docstring)."""
    from exactly_once.ids import Interval
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    landing = root / "landing" / "app_logs"
    for day in (D1, D2, D3, D4):
        (landing / f"dt={day}").mkdir(parents=True)
        (landing / f"dt={day}" / "part-0.jsonl").write_text('{"x": 1}\n')
    sink = TwoPhaseCommitSink.at(str(root / "warehouse" / SINK), pipeline=PIPELINE, sink=SINK,
                                 require_validation=True)
    d1 = _attempt(sink, D1, "run-d1")
    (landing / f"dt={D1}" / "late.jsonl").write_text('{"x": 2}\n')                # lands after the commit
    _attempt(sink, D2, run_id, ratio=0.081, verdict=False, prev=d1)                # fails the gate
    d2 = _attempt(sink, D2, "run-d2-rerun", prev=d1, fingerprint="s2")
    _attempt(sink, D3, "run-d3", prev=d2, fingerprint="s3")                         # reads d2's state
    _attempt(sink, D2, "run-d2-reprocess", prev=d1, fingerprint="s2-new")          # D3 is now stale
    sink.begin(Interval.daily(D4), meta={"prev": None, "run": {"run_id": "run-d4-zombie"}})  # never finishes
    _attempt(sink, D4, "run-d4", commit=False, fingerprint="s4")                   # fences it; not committed


# ------------------------------------------------------------------------------------------ the server
@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from ui_server import api_server

    base = tmp_path_factory.mktemp("ui")
    root = base / "data"
    os.environ["EO_UI_REPORTS"] = str(root / "reports")
    os.environ["EO_UI_LANDING"] = str(root / "landing" / "app_logs")
    users = {u: (u, pw) for u, pw in PASSWORDS.items()}
    try:
        with api_server(base, root, users) as server:
            client, tokens = server["client"], server["tokens"]
            admin = {"Authorization": f"Bearer {tokens['admin']}"}
            made = client.post(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=admin, json={
                "logical_date": f"{D2}T12:00:00Z", "data_interval_start": f"{D2}T00:00:00Z",
                "data_interval_end": f"{D3}T00:00:00Z"})
            assert made.status_code == 200, made.text
            run_id = made.json()["dag_run_id"]
            build_table(root, run_id)
            yield {**server, "run_id": run_id, "root": root}
    finally:
        os.environ.pop("EO_UI_REPORTS", None)
        os.environ.pop("EO_UI_LANDING", None)


def routes(run_id: str) -> list[str]:
    """Every kind of route the plugin serves (and some it does not)."""
    txn = "20260102T000000Z_20260103T000000Z.e000001"
    return ["/eo/", "/eo/tables", f"/eo/dags/{PIPELINE}", f"/eo/dags/{PIPELINE}/tables/{SINK}",
            f"/eo/api/dags/{PIPELINE}/tables/{SINK}", f"/eo/dags/{PIPELINE}/tables/{SINK}/versions/{txn}",
            f"/eo/dags/{PIPELINE}/runs/{run_id}", "/eo/reports/data_docs/index.html",
            f"/eo/reports/data_docs/validations/app_pv.counts/{PIPELINE}.{txn}/t/page.html",
            "/eo/reports/data_docs/_gx/runs.jsonl", f"/eo/reports/runs/{PIPELINE}/{txn}.json",
            "/eo/docs", "/eo/redoc", "/eo/openapi.json", "/eo/no-such-page"]


def test_every_route_refuses_anonymous_and_bad_tokens(ui):
    client = ui["client"]
    for path in routes(ui["run_id"]):
        for headers in ({}, {"Authorization": "Bearer not-a-jwt"}, {"Cookie": "_token=forged"}):
            got = client.get(path, headers=headers)
            assert got.status_code in (401, 403), (path, headers, got.status_code)
            assert "malformed" not in got.text and "suite" not in got.text
        assert client.post(path).status_code in (401, 403), path


def test_a_user_without_a_role_is_authenticated_but_not_authorized(ui, monkeypatch):
    """A valid token of a user the auth manager grants nothing: 403 on every page of the pipeline."""
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", JWT_SECRET)
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    token = SimpleAuthManager._get_token_signer().generate({"sub": "nobody", "role": None, "teams": None})
    headers = {"Authorization": f"Bearer {token}"}
    client = ui["client"]
    for path in routes(ui["run_id"])[2:11]:
        assert client.get(path, headers=headers).status_code == 403, path
    index = client.get("/eo/tables", headers=headers)
    assert index.status_code == 200 and f"/tables/{SINK}" not in index.text and "more table(s)" in index.text


def test_logged_in_users_see_every_page_and_no_symlink_or_escape(ui):
    client, root = ui["client"], ui["root"]
    reports = root / "reports"
    (reports / "data_docs" / "_gx").mkdir(parents=True, exist_ok=True)
    (reports / "data_docs" / "_gx" / "runs.jsonl").write_text('{"run_name": "x"}\n')
    (reports / "data_docs" / "index.html").write_text("<html>index</html>")
    (reports / "runs" / PIPELINE).mkdir(parents=True, exist_ok=True)
    (reports / "runs" / PIPELINE / "20260102T000000Z_20260103T000000Z.e000001.json").write_text("{}")
    secret = root / "secret.txt"
    secret.write_text("outside the reports root")
    (reports / "link.html").symlink_to(secret)
    (reports / "linked-dir").symlink_to(root)
    cookie = {"Cookie": f"_token={ui['tokens']['admin']}"}
    bearer = {"Authorization": f"Bearer {ui['tokens']['viewer']}"}
    browser_like = httpx.Client(base_url=ui["url"], cookies={"_token": ui["tokens"]["admin"]}, timeout=60)
    for path in routes(ui["run_id"])[:11]:
        for got in (browser_like.get(path, follow_redirects=True),
                    client.get(path, headers=bearer, follow_redirects=True)):
            assert got.status_code == 200, (path, got.status_code, got.text[:300])
    for path in ("/eo/docs", "/eo/openapi.json", "/eo/no-such-page", "/eo/reports/link.html",
                 "/eo/reports/linked-dir/secret.txt", "/eo/reports/%2e%2e/secret.txt",
                 "/eo/reports/..%2fsecret.txt", "/eo/reports/data_docs/%2e%2e/%2e%2e/secret.txt"):
        got = client.get(path, headers=cookie)
        assert got.status_code == 404 and "outside the reports root" not in got.text, path
    directory = browser_like.get("/eo/reports/data_docs", follow_redirects=True)
    assert directory.status_code == 200 and directory.text.endswith("<html>index</html>")


def test_table_page_explains_every_interval(ui):
    client = ui["client"]
    headers = {"Authorization": f"Bearer {ui['tokens']['viewer']}"}
    page = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=headers).json()
    by_day = {iv["start"][:10]: iv for iv in page["intervals"]}
    assert list(by_day) == [D4, D3, D2, D1] and page["intervals_total"] == 4
    d1, d2, d3, d4 = (by_day[d] for d in (D1, D2, D3, D4))
    assert d1["state"] == "COMMITTED" and d1["rows"] == 3 and d1["files"] == 2
    assert d1["late"] == {"new": [f"dt={D1}/late.jsonl"], "changed": [], "missing": []}
    assert [e["state"] for e in d2["epochs"]] == ["ABORTED", "COMMITTED", "COMMITTED"]
    assert d2["epochs"][0]["reason"] == "failed check: rejected_ratio 0.081 > 0.05"
    assert d2["epochs"][0]["run_id"] == ui["run_id"]
    assert d2["epochs"][1]["reason"] == "superseded by e3" and d2["live"].endswith(".e000003")
    assert page["stale"] == [Interval.daily(D3).token] and d3["stale"] and not d2["stale"]
    assert [e["state"] for e in d4["epochs"]] == ["ABORTED", "PRE_COMMITTED"]
    assert d4["epochs"][0]["reason"] == "fenced by e2" and d4["live"] is None
    assert d4["recover"] == ["e2: would commit it (pre-committed, validated)"]
    assert d1["recover"] == d2["recover"] == d3["recover"] == []

    def days(**query) -> list[str]:
        got = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=headers, params=query)
        assert got.status_code == 200, got.text
        return [iv["start"][:10] for iv in got.json()["intervals"]]

    assert days(state="ABORTED") == [D4, D2]
    assert days(state="PRE_COMMITTED") == [D4]
    assert days(since=D2, until=D3) == [D3, D2]
    assert days(state="attention") == [D4, D3, D1]   # not committed / stale / late file
    assert days(limit=1) == [D4]
    bad = client.get(f"/eo/api/dags/{PIPELINE}/tables/{SINK}", headers=headers, params={"since": "yesterday"})
    assert bad.status_code == 400 and "YYYY-MM-DD" in bad.text
    html = client.get(f"/eo/dags/{PIPELINE}/tables/{SINK}", headers=headers).text
    for text in ("failed check: rejected_ratio 0.081 &gt; 0.05", "fenced by e2", "would commit it",
                 "Stale", "1 new (dt=2026-01-01/late.jsonl)", "/eo/reports/data_docs/validations/app_pv.counts/"):
        assert text in html, text
    stale = html[html.index("Stale (their"):].split("</li>")[0]
    assert D3 in stale and Interval.daily(D3).token not in stale  # dates, not tokens


def test_run_report_shows_measured_values_next_to_limits(ui):
    client = ui["client"]
    headers = {"Authorization": f"Bearer {ui['tokens']['admin']}"}
    html = client.get(f"/eo/dags/{PIPELINE}/runs/{ui['run_id']}", headers=headers).text
    assert "ABORTED" in html and "failed check: rejected_ratio 0.081 &gt; 0.05" in html
    row = html[html.index("malformed ratio"):].split("</tr>")[0]
    assert "0.081" in row and "&lt;= 0.05" in row and "VIOLATED" in row
    for label, value in (("records read", "1000"), ("malformed records", "81"), ("duplicates dropped", "7"),
                         ("rows written", "3"), ("completeness gap", "0")):
        assert value in html[html.index(label):].split("</tr>")[0], label
    for suite in ("app_pv", "app_pv.counts", "app_pv.checkpoint"):
        link = f"/eo/reports/data_docs/validations/{suite}/{PIPELINE}.20260102T000000Z_20260103T000000Z.e000001/"
        assert link in html, suite
    other = client.get(f"/eo/dags/{PIPELINE}/runs/no-such-run", headers=headers)
    assert other.status_code == 200 and "Airflow has no DAG run with this id" in other.text
    assert "began no transaction" not in other.text  # an unknown run: nothing is claimed about it


def test_the_ui_lists_the_plugin_and_shows_the_table_page_in_chromium(ui, tmp_path):
    client = ui["client"]
    headers = {"Authorization": f"Bearer {ui['tokens']['admin']}"}
    plugins = client.get("/api/v2/plugins", headers=headers).json()["plugins"]
    by_name = {p["name"]: p for p in plugins}
    # ours, and the OpenLineage provider's (installed with the [openlineage] extra); no example plugins
    assert set(by_name) == {"exactly_once", "OpenLineageProviderPlugin"}
    routes_ = {v["url_route"] for v in by_name["exactly_once"]["external_views"]}
    assert {"eo-tables", "eo-dag-tables", "eo-run-report"} <= routes_
    dags = client.get("/api/v2/dags", headers=headers).json()["dags"]
    assert sorted(d["dag_id"] for d in dags) == ["eo_rollback", "flights_hourly", "pv_pipeline", "pv_to_db"]  # no examples
    from cdp import CHROMIUM, Browser

    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    shot = tmp_path / "eo-tables.png"
    with Browser() as browser:
        browser.cookie(ui["url"], "_token", ui["tokens"]["admin"])
        browser.open(f"{ui['url']}/plugin/eo-tables")               # the UI's navigation entry (an iframe)
        browser.wait_for_text(SINK)
        browser.screenshot(tmp_path / "airflow-ui-nav.png")
        browser.open(f"{ui['url']}/dags/{PIPELINE}/plugin/eo-dag-tables")
        browser.wait_for_text(SINK)
        browser.open(f"{ui['url']}/eo/dags/{PIPELINE}/tables/{SINK}")
        text = browser.wait_for_text("fenced by e2")
        browser.screenshot(shot)
    assert "failed check: rejected_ratio 0.081 > 0.05" in text and "would commit it" in text
    assert shot.stat().st_size > 20_000
    print(f"screenshots: {shot} {tmp_path / 'airflow-ui-nav.png'}")
    if os.environ.get("EO_KEEP_SCREENSHOT"):
        Path(os.environ["EO_KEEP_SCREENSHOT"]).write_bytes(shot.read_bytes())


def _store_report_link(ui, run_id: str) -> str:
    """What the validate task stores when it ends: ``ReportLink.get_link`` as the XCom the UI reads the
    link from (put through Airflow's REST API here: the test runs no task)."""
    from exactly_once.airflow.operators import ReportLink

    link = ReportLink().get_link(None, ti_key=SimpleNamespace(dag_id=PIPELINE, run_id=run_id))
    got = ui["client"].post(f"/api/v2/dags/{PIPELINE}/dagRuns/{run_id}/taskInstances/{SINK}.validate/xcomEntries",
                            headers={"Authorization": f"Bearer {ui['tokens']['admin']}"},
                            json={"key": ReportLink().xcom_key, "value": link})
    assert got.status_code == 201, got.text
    return link


def _framing_page(report_url: str, control_url: str):
    """A server on another origin (another port) whose page frames ``report_url`` and ``control_url``."""
    body = f'<iframe name="report" src="{report_url}"></iframe><iframe name="control" src="{control_url}"></iframe>'

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)


def test_the_quality_link_opens_the_report_inside_airflows_navigation(ui, tmp_path):
    """A viewer logs in through Airflow's login, opens the validate task instance and follows its "Data
    quality report" link: the run's page in Airflow's UI (navigation, breadcrumbs, the run's tabs) with the
    plugin's report framed in it. Another origin cannot frame the report (frame-ancestors 'self')."""
    from cdp import CHROMIUM, Browser

    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    url, run_id, client = ui["url"], ui["run_id"], ui["client"]
    tab = f"/dags/{PIPELINE}/runs/{quote(run_id, safe='')}/plugin/eo-run-report"
    report = f"/eo/dags/{PIPELINE}/runs/{quote(run_id, safe='')}"
    assert _store_report_link(ui, run_id) == tab
    viewer = {"Authorization": f"Bearer {ui['tokens']['viewer']}"}
    links = client.get(f"/api/v2/dags/{PIPELINE}/dagRuns/{run_id}/taskInstances/{SINK}.validate/links",
                       headers=viewer).json()["extra_links"]
    assert links == {"Data quality report": tab}
    headers = client.get(report, headers=viewer).headers
    assert "frame-ancestors 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "SAMEORIGIN"
    task = f"{url}/dags/{PIPELINE}/runs/{quote(run_id, safe='')}/tasks/{SINK}.validate/details"
    with Browser() as browser:
        browser.open(task)                                              # no login yet: Airflow's login page
        assert "VIOLATED" not in browser.wait_for_text("Sign in")
        browser.fill("input[name=username]", "viewer")
        browser.fill("input[name=password]", PASSWORDS["viewer"])
        browser.evaluate("document.querySelector('button[type=submit]').click()")
        browser.wait_for_text("Data quality report")                    # back on the task instance
        browser.evaluate("[...document.querySelectorAll('a')].find(a => a.innerText.trim() == "
                         "'Data quality report').click()")
        browser.wait_for_text("VIOLATED")
        browser.screenshot(tmp_path / "quality-link.png")
        assert browser.evaluate("location.pathname") == tab
        outside = browser.evaluate("document.body.innerText")            # Airflow's UI around the frame
        anchors = browser.evaluate("Object.fromEntries([...document.querySelectorAll('a')]"
                                   ".map(a => [a.innerText.trim(), a.getAttribute('href')]))")
        assert anchors["Dags"] == "/dags" and anchors["Assets"] == "/assets" and anchors[PIPELINE] == f"/dags/{PIPELINE}"
        assert anchors["Exactly-once report"] == unquote(tab)                        # the run's tabs, ours among them
        assert anchors["Task Instances"] == f"/dags/{PIPELINE}/runs/{run_id}"
        assert run_id in outside and "VIOLATED" not in outside
        frame = browser.evaluate("(() => { const f = document.querySelector('iframe[title=\"Exactly-once report\"]');"
                                 " return [f.getAttribute('src'), f.contentDocument.body.innerText] })()")
        assert frame[0] == report and "failed check: rejected_ratio 0.081 > 0.05" in frame[1], frame

        other = _framing_page(f"{url}{report}", f"{url}/api/v2/monitor/health")
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            browser.open(f"http://127.0.0.1:{other.server_address[1]}/")
            deadline, frames = time.time() + 30, {}
            while time.time() < deadline and any(frames.get(name, {}).get("url", "") in ("", "about:blank")
                                                 for name in ("report", "control")):   # until both have loaded
                time.sleep(0.3)
                tree = browser.call("Page.getFrameTree")["frameTree"]
                frames = {f["frame"].get("name"): f["frame"] for f in tree.get("childFrames", [])}
        finally:
            other.shutdown()
    assert frames["control"]["url"] == f"{url}/api/v2/monitor/health"       # Airflow's API: framable elsewhere
    assert frames["report"]["url"].startswith("chrome-error:"), frames["report"]   # the report: refused
    assert frames["report"]["unreachableUrl"] == f"{url}{report}"


def test_the_tables_index_shows_each_tables_status(ui):
    """Status from the log alone: D3 stale, D4 not committed (D1's late file is the table page's business)."""
    headers = {"Authorization": f"Bearer {ui['tokens']['viewer']}"}
    html = ui["client"].get("/eo/tables", headers=headers).text
    assert "<th>status</th><th>last commit</th><th>stale intervals</th>" in html
    row = html[html.index(f"/tables/{SINK}\""):].split("</tr>")[0]
    cells = row.split("<td")
    assert "needs attention</span>: " in cells[2] and "2 of 4 interval(s)</a> (1 stale, 1 not committed)" in cells[2]
    assert f"/tables/{SINK}?state=attention" in cells[2], row
    assert "/versions/20260102T000000Z_20260103T000000Z.e000003" in cells[3], row   # the reprocess of D2
    assert cells[4] == " class=\"n\">1</td>", row


def test_errors_are_pages_for_the_browser_and_json_for_the_api(ui):
    client = ui["client"]
    headers = {"Authorization": f"Bearer {ui['tokens']['admin']}"}
    table = f"/eo/dags/{PIPELINE}/tables/{SINK}"
    for path, params, code, text in ((f"/eo/dags/{PIPELINE}/tables/%3Cb%3Enope", {}, 404, "&lt;b&gt;nope"),
                                     (table, {"since": "yesterday"}, 400, "YYYY-MM-DD"),
                                     (table, {"limit": "1000"}, 422, "limit: "),
                                     ("/eo/no-such-page", {}, 404, "Not Found"),
                                     (f"{table}/versions/20260102T000000Z_20260101T000000Z.e000001", {}, 404,
                                      "no version")):   # a reversed interval: not a 500
        got = client.get(path, headers=headers, params=params)
        assert got.status_code == code and got.headers["content-type"].startswith("text/html"), (path, got.text)
        assert text in got.text and "<b>nope" not in got.text and "href=\"/eo/tables\"" in got.text, path
        assert "frame-ancestors 'self'" in got.headers["content-security-policy"], path
    api = f"/eo/api/dags/{PIPELINE}/tables"
    for path, params, code in ((f"{api}/nope", {}, 404), (f"{api}/{SINK}", {"limit": "1000"}, 422)):
        got = client.get(path, headers=headers, params=params)
        assert got.status_code == code and "detail" in got.json(), (path, got.text)
    runs = client.get(f"/eo/reports/runs/{PIPELINE}/", headers=headers)
    assert runs.status_code in (302, 307) and runs.headers["location"] == f"/eo/dags/{PIPELINE}"
    assert f"/tables/{SINK}\"" in client.get(runs.headers["location"], headers=headers).text


def test_links_to_airflow_pages_work_inside_airflows_sandboxed_frame(ui):
    """Issue 28: Airflow embeds the plugin's pages in an iframe sandboxed without allow-top-navigation, so a
    plain ``target=_top`` link does nothing there. A click on the tables index's DAG link must take the UI
    itself to the DAG's page (Airflow's navigation around it), not leave the frame where it was."""
    from cdp import CHROMIUM, Browser

    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    frame = "document.querySelector('iframe')"
    with Browser() as browser:
        browser.cookie(ui["url"], "_token", ui["tokens"]["admin"])
        browser.open(f"{ui['url']}/plugin/eo-tables")
        deadline, found = time.time() + 60, None
        while time.time() < deadline and not found:  # the frame's page has loaded and lists the DAG's link
            found = browser.evaluate(f"(() => {{ const f = {frame}; const d = f && f.contentDocument;"
                                     f" return d && [...d.querySelectorAll('a[target=_top]')]"
                                     f".some(a => a.getAttribute('href') == '/dags/{PIPELINE}') }})()")
            time.sleep(0.3)
        assert found, browser.text()[:2000]
        assert browser.evaluate(f"{frame}.getAttribute('sandbox')").split() and "allow-top-navigation" not in \
            browser.evaluate(f"{frame}.getAttribute('sandbox')")          # Airflow's sandbox, as shipped
        browser.evaluate(f"[...{frame}.contentDocument.querySelectorAll('a[target=_top]')]"
                         f".find(a => a.getAttribute('href') == '/dags/{PIPELINE}').click()")
        deadline = time.time() + 30
        while time.time() < deadline and browser.evaluate("location.pathname") != f"/dags/{PIPELINE}":
            time.sleep(0.3)
        assert browser.evaluate("location.pathname") == f"/dags/{PIPELINE}"
        browser.wait_for_text("Runs")  # Airflow's own DAG page rendered in place (its tabs), not our frame
        assert browser.evaluate("document.querySelector('iframe') === null")
