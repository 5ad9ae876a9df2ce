"""A real ``airflow api-server`` started the way ``make ui`` starts it, for the UI tests (one per module).

SimpleAuthManager with the given users (``name: (role, password)``); yields the client, the URL and a
Bearer token per user. The api-server alone: triggered runs stay queued (tests run their tasks in-process).
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx

from eo_testing import free_port

JWT_SECRET = "eo-ui-test-jwt-secret-0123456789abcdef"


def commit_day(sink, day: str, run_id: str, state: str, prev: str | None = None, counts: dict | None = None) -> str:
    """Commit one validated version of day ``day`` whose state fingerprint is ``state`` (read from ``prev``);
    ``counts``: the write job's counts the gate measured (records in, rejected, deduplicated)."""
    from exactly_once.ids import Interval, parse_txn_name
    from protocol_helpers import write_output

    reads = None
    if prev:
        token, epoch = parse_txn_name(prev)
        reads = sink.ref(Interval.from_token(token), epoch)
    txn = sink.begin(Interval.daily(day), meta={"prev": prev, "run": {"run_id": run_id}}, reads=reads)
    write_output(sink, txn, {f"dt={day}": [[(1, state), (2, state)]]})
    measured = {"records_in": 2, **(counts or {})}
    sink.pre_commit(txn, extra={"counts": {**measured, "rows_written": {f"dt={day}": 2}},
                                "state_fingerprint": state})
    sink.record_validation(txn, True, {"failures": [], "measured": measured})
    sink.commit(txn)
    return txn.name


def wait_healthy(client: httpx.Client, proc: subprocess.Popen, deadline: float, log: Callable[[], str]) -> None:
    """Until the api-server behind ``client`` answers its health check; fails with ``log()`` when ``proc``
    (what started it) exits or ``deadline`` passes."""
    while True:
        try:
            if client.get("/api/v2/monitor/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.time() < deadline, f"the api-server did not start:\n{log()}"
        time.sleep(0.5)


@contextlib.contextmanager
def api_server(base: Path, data_root: Path, users: dict[str, tuple[str, str]],
               extra: dict[str, str] | None = None) -> Iterator[dict]:
    from tools import ui as uiserver

    home = base / "airflow-home"
    home.mkdir()
    (home / "passwords.json").write_text(json.dumps({u: pw for u, (_, pw) in users.items()}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = uiserver.ui_env({
        "AIRFLOW_HOME": str(home), "EO_DATA_ROOT": str(data_root),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{role}" for u, (role, _) in users.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET, "AIRFLOW__API__BASE_URL": url, **(extra or {})})
    env.pop("EO_REPORTS_DIR", None)
    uiserver.prepare(env)
    log = open(base / "api-server.log", "wb")
    proc = subprocess.Popen(uiserver.api_server_command(port, "127.0.0.1"), env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        client = httpx.Client(base_url=url, timeout=60)
        wait_healthy(client, proc, time.time() + 180, lambda: (base / "api-server.log").read_text()[-3000:])
        tokens = {u: client.post("/auth/token", json={"username": u, "password": pw}).json()["access_token"]
                  for u, (_, pw) in users.items()}
        yield {"client": client, "url": url, "tokens": tokens, "env": env, "base": base}
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:  # a loaded machine: its workers did not stop in time
            proc.kill()
            proc.wait(30)
        log.close()
