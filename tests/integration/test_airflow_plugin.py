"""The Airflow plugin: it loads, registers the report link, and serves the reports the link points to."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow


@pytest.fixture
def reports(tmp_path, monkeypatch):
    root = tmp_path / "reports"
    page = root / "data_docs" / "validations" / "app_pv" / "run1" / "page.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html><body>Status: Succeeded</body></html>")
    (root / "data_docs" / "index.html").write_text("<html>index</html>")
    monkeypatch.setenv("EO_REPORTS_DIR", str(root))
    return root, page


def test_plugin_is_loaded_by_airflow_with_its_link_and_views():
    """Airflow imports plugins/eo_plugin.py (and, thanks to .airflowignore, not the library's modules)."""
    from airflow import plugins_manager

    assert plugins_manager.get_import_errors() == {}
    info = {p["name"]: p for p in plugins_manager.get_plugin_info()}
    assert "exactly_once" in info
    assert any("ReportLink" in str(link) for link in plugins_manager.get_operator_extra_links())
    apps, _ = plugins_manager.get_fastapi_plugins()
    assert any(app["url_prefix"] == "/eo" for app in apps)


def test_report_link_points_at_the_served_page(reports):
    from exactly_once.airflow.operators import ReportLink, ValidateOperator
    from exactly_once.config import PipelineConfig
    from exactly_once.reports import report_link

    root, page = reports
    link = report_link(str(page))
    assert link == "/eo/reports/data_docs/validations/app_pv/run1/page.html"
    assert report_link("/elsewhere/x.html") == "/elsewhere/x.html"  # not under the reports root: unchanged
    op = ValidateOperator(task_id="v", config=PipelineConfig(pipeline="p", sink="s", source="x", application="a.py"))
    op.report_link = link
    assert ReportLink().get_link(op, ti_key=None) == link
    assert any(isinstance(lk, ReportLink) for lk in ValidateOperator.operator_extra_links)


def test_reports_app_serves_pages_and_refuses_escapes(reports):
    from fastapi.testclient import TestClient

    from exactly_once.airflow.plugin import _reports_app

    root, page = reports
    client = TestClient(_reports_app())
    ok = client.get("/reports/data_docs/validations/app_pv/run1/page.html")
    assert ok.status_code == 200 and "Status: Succeeded" in ok.text
    assert client.get("/reports/data_docs/index.html").status_code == 200
    assert client.get("/reports/../../etc/passwd").status_code == 404
    assert client.get("/reports/%2e%2e/%2e%2e/etc/passwd").status_code == 404
