"""The Airflow plugin: it loads, registers the report link, and reads report files safely (the HTTP side,
behind Airflow's login, is tested on a real API server in test_airflow_ui.py)."""
from __future__ import annotations

import os

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


def test_report_link_points_at_the_run_report_page(reports):
    from types import SimpleNamespace

    from exactly_once.airflow.operators import ReportLink, ValidateOperator
    from exactly_once.quality.reports import report_link

    root, page = reports
    assert report_link(str(page)) == "/eo/reports/data_docs/validations/app_pv/run1/page.html"
    assert report_link("/elsewhere/x.html") == "/elsewhere/x.html"  # not under the reports root: unchanged
    key = SimpleNamespace(dag_id="pv_pipeline", run_id="manual__2026-01-02T00:00:00+00:00")
    assert ReportLink().get_link(None, ti_key=key) == \
        "/dags/pv_pipeline/runs/manual__2026-01-02T00%3A00%3A00%2B00%3A00/plugin/eo-run-report"  # the run's tab
    assert any(isinstance(lk, ReportLink) for lk in ValidateOperator.operator_extra_links)


def test_report_files_are_read_without_symlinks_or_escapes(reports, tmp_path):
    from exactly_once.airflow.files import read_under
    from exactly_once.errors import UnsafeIdentifierError

    root, page = reports
    found = read_under(str(root), "data_docs/validations/app_pv/run1/page.html")
    assert b"Status: Succeeded" in found.content and found.media_type == "text/html"
    assert read_under(str(root), "data_docs/").content == b"<html>index</html>"
    assert read_under(str(root), "data_docs").directory
    (tmp_path / "secret").write_text("secret")
    (root / "data_docs" / "leak.html").symlink_to(tmp_path / "secret")
    (root / "data_docs" / "out").symlink_to(tmp_path)
    os.mkfifo(root / "data_docs" / "fifo")
    for rel in ("data_docs/leak.html", "data_docs/out/secret", "data_docs/fifo", "nothing.html"):
        with pytest.raises(FileNotFoundError):
            read_under(str(root), rel)
    for rel in ("../secret", "data_docs/../../secret", "data_docs/./index.html", "a//b", "a\\b", "/etc/passwd"):
        with pytest.raises(UnsafeIdentifierError):
            read_under(str(root), rel)
