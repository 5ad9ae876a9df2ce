"""An on-call engineer rolls an interval back from the table page in headless Chromium: the link, the
confirmation page (nothing happens until the box is ticked), the triggered run - and a viewer, who may
not edit the DAG, sees no action and is refused the confirmation page. One api-server for the module."""
from __future__ import annotations

import os

import pytest

from eo_testing import need
from exactly_once.ids import Interval
from ui_server import api_server, commit_day

pytestmark = pytest.mark.airflow

PIPELINE, SINK, DAY = "pv_pipeline", "app_pv", "2026-01-01"
TABLE = f"/eo/dags/{PIPELINE}/tables/{SINK}"
USERS = {"admin": ("admin", "admin-pw-e2e"), "viewer": ("viewer", "viewer-pw-e2e")}


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    base = tmp_path_factory.mktemp("actions-e2e")
    root = base / "data"
    sink = TwoPhaseCommitSink.at(str(root / "warehouse" / SINK), pipeline=PIPELINE, sink=SINK,
                                 require_validation=True)
    commit_day(sink, DAY, "run-1", "s1")
    commit_day(sink, DAY, "run-2", "s2")
    with api_server(base, root, USERS) as server:
        yield server


def _click(browser, selector: str) -> None:
    browser.call("Runtime.evaluate", expression=f"document.querySelector({selector!r}).click()")


def test_roll_back_from_the_table_page_with_confirmation_and_a_viewer_is_refused(ui, tmp_path):
    from cdp import CHROMIUM, Browser

    need(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    url, client = ui["url"], ui["client"]
    admin = {"Authorization": f"Bearer {ui['tokens']['admin']}"}
    with Browser() as browser:
        browser.cookie(url, "_token", ui["tokens"]["admin"])
        browser.open(f"{url}{TABLE}")
        browser.wait_for_text("roll back to e1")
        _click(browser, 'a[href*="/actions/rollback"]')
        browser.wait_for_text("I confirm")
        _click(browser, "#confirm")                                    # box not ticked: the form is not sent
        assert "Make version e1" in browser.wait_for_text("I confirm")
        assert client.get(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=admin).json()["dag_runs"] == []
        _click(browser, 'input[name="confirm"]')
        _click(browser, "#confirm")
        done = browser.wait_for_text("Triggered: Roll back an interval")
        browser.screenshot(tmp_path / "triggered.png")
        assert "Asked by admin" in done
        [run] = client.get(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=admin).json()["dag_runs"]
        assert run["triggering_user_name"] == "admin" and run["conf"]["to_version"] == "e1"
        assert run["conf"]["eo_action"] == "rollback" and run["conf"]["sinks"] == [SINK]   # the pipeline's own DAG
        assert run["data_interval_start"].startswith(DAY) and run["data_interval_end"].startswith("2026-01-02")

        browser.cookie(url, "_token", ui["tokens"]["viewer"])
        browser.open(f"{url}{TABLE}")
        text = browser.wait_for_text("need permission to edit this DAG")
        assert "roll back to" not in text and "Recover now" not in text
        browser.open(f"{url}{TABLE}/actions/rollback?interval={Interval.daily(DAY).token}&to=e1")
        assert "may not edit DAG 'pv_pipeline'" in browser.wait_for_text("may not edit")
    assert len(client.get(f"/api/v2/dags/{PIPELINE}/dagRuns", headers=admin).json()["dag_runs"]) == 1
