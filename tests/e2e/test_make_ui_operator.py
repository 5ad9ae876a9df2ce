"""A new operator on ``make ui`` (issue 47), in headless Chromium against the real stack ``python -m tools.ui``
starts - api-server, scheduler (LocalExecutor), dag-processor, triggerer on a fresh PostgreSQL metadata DB -
with a year of daily intervals of ``app_pv`` (``pv_pipeline``) in its data root. One stack for the module;
the last test stops it the way a supervisor does (SIGTERM to its process group, the reader of the pipe its
output goes to gone first) and checks that no component survives.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import date, timedelta
from pathlib import Path

import httpx
import pytest

from eo_testing import free_port, need
from exactly_once.ids import Interval

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PIPELINE, SINK = "pv_pipeline", "app_pv"
TABLE = f"/eo/dags/{PIPELINE}/tables/{SINK}"
DAYS = 365
LAST = date.today() - timedelta(days=1)             # the newest interval: yesterday (after the DAG's start date)
FIRST = LAST - timedelta(days=DAYS - 1)
FIGURES: dict[str, object] = {}


def _build_year(root: Path) -> str:
    """A stateful year of app_pv: each day read the day before's state; varying malformed and duplicate counts;
    the newest day committed twice (e1, then e2 live): what an operator may roll back."""
    from exactly_once.protocol.transaction import TwoPhaseCommitSink
    from ui_server import commit_day

    sink = TwoPhaseCommitSink.at(str(root / "warehouse" / SINK), pipeline=PIPELINE, sink=SINK,
                                 require_validation=True)
    fsync, os.fsync = os.fsync, lambda fd: None     # durability is not what this builds (twice as fast)
    try:
        prev = before_last = None
        for i in range(DAYS):
            day = str(FIRST + timedelta(days=i))
            before_last = prev
            prev = commit_day(sink, day, f"backfill__{day}", f"s{i}", prev,
                              counts={"records_rejected": i % 7, "records_deduplicated": (i * 3) % 11})
        commit_day(sink, str(LAST), "reprocess-last", f"s{DAYS}", before_last)
    finally:
        os.fsync = fsync
    return str(root / "warehouse" / SINK)


def _component_pids(out: Path) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"started (\S+) \(pid (\d+)\)", out.read_text())}


class Output:
    """The reader of ``make ui``'s output pipe (what a terminal, ``| tee`` or a supervisor is), copying it to a
    file until :meth:`close` - after which the pipe has no reader: a write to it fails (EPIPE)."""

    def __init__(self, proc: subprocess.Popen, path: Path) -> None:
        self.proc, self.path, self.done = proc, path, threading.Event()
        self.thread = threading.Thread(target=self._copy, daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        import select

        fd = self.proc.stdout.fileno()
        with open(self.path, "ab") as out:
            while not self.done.is_set():
                if select.select([fd], [], [], 0.2)[0]:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        return
                    out.write(chunk)
                    out.flush()

    def text(self) -> str:
        return self.path.read_text() if self.path.exists() else ""

    def close(self) -> None:
        self.done.set()
        self.thread.join(10)
        self.proc.stdout.close()


def _ours(home: Path) -> list[int]:
    """Every live process whose environment names this stack's AIRFLOW_HOME (components, workers, orphans)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if f"AIRFLOW_HOME={home}".encode() in (d / "environ").read_bytes().split(b"\0"):
                    found.append(int(d.name))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from cdp import CHROMIUM
    from tools.deployment import MetaDB, postgres_problem
    from tools.localrun import PROJECT_ROOT
    from ui_server import wait_healthy

    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    problem = postgres_problem()
    need(problem is None, problem or "")
    base = tmp_path_factory.mktemp("make-ui")
    home, root, out = base / "airflow-ui", base / "data", base / "make-ui.out"
    db = MetaDB(f"eo_ui_e2e_{uuid.uuid4().hex[:8]}")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "EO_"))}
    # the DAG starts with the year's first interval: a run dated before a task's start_date gets no task
    env.update({"EO_UI_DB_URL": db.url, "EO_UI_AIRFLOW_HOME": str(home), "EO_DATA_ROOT": str(root),
                "EO_PV_START": str(FIRST),
                "EO_UI_USERS": "admin:admin,viewer:viewer", "AIRFLOW_HOME": str(home)})
    proc = subprocess.Popen([sys.executable, "-m", "tools.ui", "--port", str(port)], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    output = Output(proc, out)
    started = time.time()
    try:
        table_url = _build_year(root)                                    # while the stack starts
        FIGURES["build a year (s)"] = round(time.time() - started, 1)
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, timeout=60)
        deadline = time.time() + 300
        while "Airflow UI:" not in output.text():
            assert proc.poll() is None and time.time() < deadline, output.text()
            time.sleep(0.5)
        wait_healthy(client, proc, deadline, output.text)
        FIGURES["make ui ready (s)"] = round(time.time() - started, 1)
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        tokens = {u: client.post("/auth/token", json={"username": u, "password": passwords[u]}).json()["access_token"]
                  for u in ("admin", "viewer")}
        yield {"proc": proc, "url": url, "client": client, "tokens": tokens, "home": home, "out": output,
               "table_url": table_url, "root": root, "port": port, "db": db}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _ours(home):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(30)
        if not output.done.is_set():
            output.close()
        db.drop()
        print(f"make ui figures: {FIGURES}")


def _as(stack, user: str) -> dict:
    return {"Authorization": f"Bearer {stack['tokens'][user]}"}


def _browser(stack, user: str = "admin"):
    from cdp import Browser

    b = Browser()
    b.__enter__()
    b.cookie(stack["url"], "_token", stack["tokens"][user])
    return b


def _click(browser, selector: str) -> None:
    """A user's click (an SVG element has no ``click()``: dispatch the event)."""
    browser.evaluate(f"document.querySelector({json.dumps(selector)})"
                     ".dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, view: window}))")


def _loaded(browser, url: str, needle: str) -> float:
    """Open ``url``, wait for ``needle``; the page's load time in ms (navigation start to load event)."""
    browser.open(url)
    deadline = time.time() + 60
    while time.time() < deadline:
        got = browser.evaluate("(() => { const n = performance.getEntriesByType('navigation')[0];"
                               f" return n && n.loadEventEnd > 0 && location.href === {json.dumps(url)} &&"
                               f" document.body.innerText.includes({json.dumps(needle)}) ? n.loadEventEnd : null }})()")
        if got:
            return float(got)
        time.sleep(0.2)
    raise AssertionError(f"{needle!r} never showed at {url}: {browser.text()[:2000]}")


def _run_state(browser, run_id: str) -> str | None:
    return browser.evaluate(f"(() => {{ const li = document.querySelector('li.run[data-run={json.dumps(run_id)}]');"
                            " return li && li.dataset.state })()")


def test_make_ui_starts_every_dag_unpaused_and_schedules_nothing_by_itself(stack):
    dags = stack["client"].get("/api/v2/dags", headers=_as(stack, "admin")).json()["dags"]
    assert dags and all(not d["is_paused"] for d in dags), [(d["dag_id"], d["is_paused"]) for d in dags]
    for d in dags:                                # no run for "today" (or any day) that nobody asked for
        runs = stack["client"].get(f"/api/v2/dags/{d['dag_id']}/dagRuns", headers=_as(stack, "admin")).json()
        assert runs["dag_runs"] == [], (d["dag_id"], runs)


def test_an_operator_rolls_back_and_watches_it_run_with_refusals_at_the_confirm_step(stack, capsys):
    client, url = stack["client"], stack["url"]
    last = Interval.daily(str(LAST))
    # paused (as a deployment may have it): the action waits, visibly, until the operator unpauses it here
    assert client.patch(f"/api/v2/dags/{PIPELINE}", headers=_as(stack, "admin"),
                        json={"is_paused": True}).status_code == 200
    b = _browser(stack)
    try:
        FIGURES["table page at 365 intervals, first load (ms)"] = _loaded(b, f"{url}{TABLE}", f"DAG {PIPELINE} is paused")
        _click(b, f'a[href*="/actions/rollback?interval={last.token}&to=e1"]')
        b.wait_for_text("I confirm")
        plan = b.evaluate("[...document.querySelectorAll('dl.plan dt, dl.plan dd')].map(e => e.innerText)")
        facts = dict(zip(plan[::2], plan[1::2]))
        assert facts["live version now"] == "e2 (2 rows, 1 file)" and facts["will be live"] == "e1 (2 rows, 1 file)"
        assert facts["later intervals that go stale"] == "none", facts          # the newest interval
        b.fill("textarea[name=reason]", "e2 read a partial feed")
        _click(b, 'input[name="confirm"]')
        _click(b, "#confirm")
        b.wait_for_text("Triggered: Roll back an interval")
        [run] = client.get(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=_as(stack, "admin")).json()["dag_runs"]
        _loaded(b, f"{url}{TABLE}", f"DAG {PIPELINE} is paused")
        assert _run_state(b, run["dag_run_id"]) == "queued"
        row = b.evaluate(f"document.querySelector('tr[data-interval=\"{last.token}\"]').innerText")
        assert "queued rollback to e1 by admin because “e2 read a partial feed”" in row, row
        # a second action on that interval is refused at its confirm step, with the reason
        _click(b, f'tr[data-interval="{last.token}"] a[href*="/actions/reprocess"]')
        text = b.wait_for_text("Refused:")
        assert f"a rollback to e1 by admin of interval {last.label} is queued (run {run['dag_run_id']}" in text
        # an edited URL: the live version is refused before any click
        b.open(f"{url}{TABLE}/actions/rollback?interval={last.token}&to=e2")
        assert f"Refused: e2 is the live version of {last.label} already" in b.wait_for_text("Refused:")
        _loaded(b, f"{url}{TABLE}", f"DAG {PIPELINE} is paused")
        _click(b, "#unpause")
        b.wait_for_text(f"Unpaused {PIPELINE}")
        seen, deadline = [], time.time() + 240
        while time.time() < deadline:                 # the page while the run goes on (a reload a second)
            b.open(f"{url}{TABLE}?limit=3")
            b.wait_for_text("Intervals")
            state = _run_state(b, run["dag_run_id"])
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in ("success", "failed", "refused"):
                break
            time.sleep(1)
        FIGURES["run states the page showed"] = seen
        assert seen[-1] == "success", (seen, stack["out"].text()[-3000:])
        text = b.text()
        assert f"DAG {PIPELINE} is paused" not in text
        assert "rollback to e1 by admin because “e2 read a partial feed”" in text
    finally:
        b.__exit__(None, None, None)
    from exactly_once.cli import main as eo
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    sink = TwoPhaseCommitSink.open(stack["table_url"])
    assert sink.committed(last)[0].epoch == 3 and sorted(sink.status(last)) == [1, 2, 3]    # once, exactly
    assert eo(["history", stack["table_url"]]) == 0
    assert (f"rollback to e1 by admin because \"e2 read a partial feed\" ({PIPELINE} run {run['dag_run_id']})"
            in capsys.readouterr().out)


def test_two_confirmations_at_once_cannot_both_start_work_on_one_interval(stack):
    """The trigger decides under a row lock of the pipeline's DAG (PostgreSQL): forced interleaving - another
    decision holds the lock (here: this test's transaction), the page's POST waits on it; meanwhile a run of
    the same interval is created; once the lock is released the POST sees it and refuses, creating nothing."""
    import psycopg2

    from tools.deployment import PG

    client, url = stack["client"], stack["url"]
    day = Interval.daily(str(FIRST + timedelta(days=10)))
    admin = _as(stack, "admin")
    assert client.patch(f"/api/v2/dags/{PIPELINE}", headers=admin, json={"is_paused": True}).status_code == 200
    confirm = client.get(f"{TABLE}/actions/reprocess", headers=admin, params={"interval": day.token})
    assert confirm.status_code == 200, confirm.text[-1500:]
    token = re.search(r'name="token" value="([0-9a-f]+)"', confirm.text).group(1)
    held = psycopg2.connect(dbname=stack["db"].name, **PG)
    try:
        with held.cursor() as cur:        # NO KEY UPDATE: blocks the page's FOR UPDATE, not a run's insert
            cur.execute("select dag_id from dag where dag_id = %s for no key update", (PIPELINE,))
            got: dict = {}
            post = threading.Thread(target=lambda: got.update(r=client.post(
                f"{TABLE}/actions/reprocess", headers={**admin, "Origin": url},
                data={"token": token, "interval": day.token, "confirm": "yes"})))
            post.start()
            deadline = time.time() + 60
            with psycopg2.connect(dbname=stack["db"].name, **PG) as watch, watch.cursor() as w:
                while True:                       # the POST's decision waits on the held row
                    w.execute("select count(*) from pg_stat_activity where datname = %s and wait_event_type = 'Lock'",
                              (stack["db"].name,))
                    if w.fetchone()[0]:
                        break
                    assert time.time() < deadline and post.is_alive(), got
                    time.sleep(0.1)
            other = client.post(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=admin, json={
                "dag_run_id": "manual__another_decision", "logical_date": (day.start + timedelta(hours=1)).isoformat(),
                "data_interval_start": day.start.isoformat(), "data_interval_end": day.end.isoformat()})
            assert other.status_code == 200, other.text
            assert post.is_alive()
        held.commit()
    finally:
        held.close()
    post.join(60)
    refused = got["r"]
    assert refused.status_code == 409 and "is queued (run manual__another_decision" in refused.text, refused.text[-800:]
    runs = client.get(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=admin).json()["dag_runs"]
    assert [r["dag_run_id"] for r in runs if r["data_interval_start"].startswith(str(day.start.date()))] == \
        ["manual__another_decision"]                                             # the page's run was never made


def test_the_quality_chart_and_the_data_docs_index_at_a_year_of_intervals(stack):
    url = stack["url"]
    b = _browser(stack, "viewer")
    try:
        FIGURES["table page at 365 intervals (ms)"] = _loaded(b, f"{url}{TABLE}", "Quality over time")
        links = b.evaluate("[...document.querySelectorAll('svg.chart a')].map(a => a.getAttribute('href'))")
        assert len(links) == DAYS and all("/versions/" in h for h in links), len(links)
        tips = b.evaluate("[...document.querySelectorAll('svg.chart a title')].map(t => t.textContent)")
        assert tips[0].startswith(f"{FIRST} e1: 2 rows, 0 duplicates dropped, 0 malformed lines; passed"), tips[0]
        assert tips[9].startswith(f"{FIRST + timedelta(days=9)} e1: 2 rows, 5 duplicates dropped, 2 malformed"), tips[9]
        _click(b, "svg.chart a:nth-of-type(10) rect")                    # a point opens its report
        deadline = time.time() + 30
        while "/versions/" not in (b.evaluate("location.pathname") or "") and time.time() < deadline:
            time.sleep(0.2)
        text = b.wait_for_text("malformed records")
        assert str(FIRST + timedelta(days=9)) in text and "malformed records" in text
        FIGURES["Data Docs index, page 1 of a year (ms)"] = _loaded(b, f"{url}/eo/data-docs", "page 1 of 13")
        assert b.evaluate("document.querySelectorAll('td[id^=iv-]').length") == 30
        _click(b, "p.pager a:last-of-type")
        b.wait_for_text("page 2 of 13")
        FIGURES["Data Docs index, last page (ms)"] = _loaded(b, f"{url}/eo/data-docs?page=13", "page 13 of 13")
        assert str(FIRST) in b.text()
        # Airflow's look, in its light and dark mode (the UI keeps the choice in localStorage.theme)
        for mode, background in (("dark", "rgb(11, 13, 18)"), ("light", "rgb(255, 255, 255)")):
            b.evaluate(f"localStorage.setItem('theme', '{mode}')")
            _loaded(b, f"{url}{TABLE}?limit=1", "Quality over time")
            assert b.evaluate("document.documentElement.dataset.theme") == mode
            assert b.evaluate("getComputedStyle(document.body).backgroundColor") == background
        assert b.evaluate("getComputedStyle(document.body).fontFamily").startswith("Inter")
        # inside Airflow's UI the frame follows the UI's mode, also when it changes
        b.evaluate("localStorage.setItem('theme', 'dark')")
        b.open(f"{url}/plugin/eo-tables")
        frame = ("(() => { const f = document.querySelector('iframe'); const d = f && f.contentDocument;"
                 " return d && d.body && d.body.innerText.includes('app_pv') ? d.documentElement.dataset.theme : null })()")
        deadline = time.time() + 60
        while time.time() < deadline and b.evaluate(frame) is None:
            time.sleep(0.3)
        assert b.evaluate("document.documentElement.classList.contains('dark')") and b.evaluate(frame) == "dark"
        b.evaluate("document.documentElement.classList.replace('dark', 'light')")
        deadline = time.time() + 10
        while time.time() < deadline and b.evaluate(frame) != "light":
            time.sleep(0.2)
        assert b.evaluate(frame) == "light"
    finally:
        b.__exit__(None, None, None)
    print(f"page loads in Chromium: {FIGURES}")


def test_sigterm_to_the_process_group_of_make_ui_stops_every_component(stack):
    """Issue 47: stopped with SIGTERM to its process group (a supervisor, a terminal multiplexer, CI), the
    api-server, scheduler, dag processor and triggerer - each in a process group of its own - kept running:
    make ui printed before stopping them, into a pipe whose reader was gone (``make ui | tee`` ended by the
    same signal), and died of the BrokenPipeError. Here the reader goes first, then the signal."""
    proc, home = stack["proc"], stack["home"]
    pids = _component_pids(stack["out"].path)
    assert set(pids) == {"api-server", "scheduler", "dag-processor", "triggerer"}, pids
    assert all(os.getpgid(p) == p != proc.pid for p in pids.values())       # each its own group
    stack["out"].close()                                                    # the pipe has no reader now
    started = time.time()
    os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.time() + 90
    while time.time() < deadline and _ours(home):
        time.sleep(0.5)
    FIGURES["stop after SIGTERM (s)"] = round(time.time() - started, 1)
    left = _ours(home)
    assert left == [], [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left if Path(f"/proc/{p}").exists()]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{stack['url']}/api/v2/monitor/health", timeout=5)
