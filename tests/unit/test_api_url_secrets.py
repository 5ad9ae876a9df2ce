"""No secret printed: an Airflow API URL with user-info (``EO_AIRFLOW_URL=http://ops:<password>@host``, a
proxy's login) is shown as ``http://***@host:port`` in every line ``eo reprocess`` / ``eo rerun-stale`` print:
the "cannot reach" error, the login refusal, the 404 advice, the "follow it at" run page."""
from __future__ import annotations

import socket

from exactly_once.airflow import rest
from exactly_once.storage import redact

SECRET = "Sup3r/S3cret pw"
QUOTED = "Sup3r%2FS3cret%20pw"


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_eo_reprocess_that_cannot_reach_the_api_prints_no_password(tmp_path, monkeypatch, capsys):
    from exactly_once.cli import main as eo
    from exactly_once.protocol.transaction import TwoPhaseCommitSink
    from ui_server import commit_day

    url = str(tmp_path / "warehouse" / "app_pv")
    commit_day(TwoPhaseCommitSink.at(url, pipeline="p", sink="app_pv", require_validation=True), "2026-01-01", "r", "s")
    port = _refused_port()
    monkeypatch.setenv("EO_AIRFLOW_TOKEN", "x.y.z")
    monkeypatch.setenv("EO_AIRFLOW_URL", f"http://ops:{QUOTED}@127.0.0.1:{port}")
    for argv in (["reprocess", url, "--interval", "2026-01-01"], ["reprocess", url, "--interval", "2026-01-01",
                                                                    "--api-url", f"http://ops:{QUOTED}@127.0.0.1:{port}/"]):
        assert eo(argv) == 1
        out = "".join(capsys.readouterr())
        assert f"cannot reach Airflow's API server at http://***@127.0.0.1:{port} (" in out, out
        assert QUOTED not in out and SECRET not in out and "ops:" not in out, out


def test_every_url_the_client_shows_is_without_its_user_info():
    api = rest.Api(f"https://ops:{QUOTED}@airflow.example:8443", "the-token")
    assert api.run_url("d", "r") == "https://***@airflow.example:8443/dags/d/runs/r"
    assert QUOTED not in repr(api) and "the-token" not in repr(api)
    missing = rest._refusal(type("R", (), {"status_code": 404, "json": lambda self: {"detail": "no"}})(), "d", api.url)
    assert "the deployment at https://***@airflow.example:8443 has no DAG d" in missing
    text = rest._scrub(f"Invalid URL {api.url}/api/v2: bad password {SECRET}", api.url)
    assert QUOTED not in text and SECRET not in text and "https://***@airflow.example:8443/api/v2" in text
    assert redact("s3://key:se/cret@bucket/t") == "s3://***@bucket/t"            # a '/' in the secret
    assert redact("http://127.0.0.1:8080/x") == "http://127.0.0.1:8080/x"        # nothing to hide
