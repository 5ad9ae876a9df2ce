"""Bad inputs at the PIPELINE level: each ends in a clear error or a quarantined record, nothing is
published wrongly, nothing is lost.

``pv_pipeline``'s phases run through :class:`exactly_once.protocol.pipeline.IntervalRun` (with the operators'
rule: an error no retry can fix aborts the transaction in the failing task), the write task is the
stand-in ``fault_helpers.stage_write`` (the Spark job's output contract, computed by
``tests/reference_pv.py``). The Spark job's own malformed-line rules are covered by test_pv_job.py and
the clean-path credential checks by test_s3_pipeline.py; this file adds what the *pipeline* does with
bad data and hostile identifiers:

* malformed JSON, wrong types, schema drift (extra fields: data; a renamed field: quarantined) - counted,
  quarantined, and the gate decides by the configured threshold (boundary included);
* an empty interval (no folder, or an empty file) commits an empty version and carries the state;
* huge lines (one beyond the parser's limit, one valid line with a 100 KB ``app_id``);
* path-like and unicode ``app_id`` values are data, never paths (local and S3);
* identifiers that would escape the root (intervals, forged XCom transaction dicts, another
  pipeline's or interval's transaction) are refused before anything is written;
* a symlink planted in the staging dir: pre_commit refuses, abort removes the link, never the target;
* credentials: a secret rotated in the middle of a transaction and a failing quality gate on S3 - the
  secret appears in no error, log, report or object, nothing is published until the right secret is back.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import logging
import os
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import reference_pv as ref
from conftest import make_bucket
import pyarrow as pa
import pyarrow.parquet as pq
from fault_helpers import (Driver, Pipe, Setup, epoch_problems, leftovers, log_problems, sink_of, stage_write,
                           visible_rows)

from exactly_once.errors import UnsafeIdentifierError, ValidationFailedError
from exactly_once.ids import Interval, TxnRef
from exactly_once.records.txlog import State

pytestmark = pytest.mark.timeout(300)
D1, D2, D3 = "2026-01-01", "2026-01-02", "2026-01-03"
TOKEN1 = Interval.daily(D1).token


def ev(i: int | str, app: Any = "app-a", user: Any = "u1", event: Any = "page_view",
       ts: Any = f"{D1}T10:00:00Z", **extra: Any) -> str:
    return json.dumps({"event_id": f"e{i}", "app_id": app, "user_id": user, "event": event, "ts": ts, **extra},
                      ensure_ascii=False)


@pytest.fixture
def pipe(tmp_path, monkeypatch):
    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    monkeypatch.setenv("EO_REPORTS_DIR", str(tmp_path / "reports"))
    return Pipe(Setup(root=str(tmp_path / "data"), start=D1, reports=str(tmp_path / "reports")))


def s3_pipe(request, tmp_path, monkeypatch, s3: dict[str, str], conn_id: str = "eo_bad_s3") -> Pipe:
    import s3fs

    monkeypatch.delenv("EO_FAILPOINTS", raising=False)
    monkeypatch.setenv("EO_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", conn_json(s3["key"], s3["secret"], s3["endpoint_url"]))
    fs = s3fs.S3FileSystem(key=s3["key"], secret=s3["secret"], skip_instance_cache=True,
                           client_kwargs={"endpoint_url": s3["endpoint_url"], "region_name": "us-east-1"})
    bucket = make_bucket(s3)
    return Pipe(Setup(root=f"s3://{bucket}/eo", start=D1, reports=str(tmp_path / "reports"), conn_id=conn_id), fs)


def conn_json(login: str, password: str, endpoint: str) -> str:
    return json.dumps({"conn_type": "aws", "login": login, "password": password,
                       "extra": {"endpoint_url": endpoint}})


def checkpoint_file(pipe: Pipe, txn: dict, rel: str) -> bytes:
    sink = pipe.sink()
    ref_ = TxnRef.from_dict(txn)
    return sink.storage.read_bytes(sink.storage.join(sink.checkpoint_dir(ref_), rel))


def as_rows(rows: list[dict]) -> list[tuple]:
    return sorted((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)


def assert_clean(pipe: Pipe, *days: str) -> None:
    sink = pipe.sink()
    for day in days:
        assert epoch_problems(sink, Interval.daily(day)) == []
        assert log_problems(sink, Interval.daily(day)) == []
    assert leftovers(sink) == []


# --------------------------------------------------------------------------- malformed / drift / gate
GOOD = [ev(1), ev(2, user="u2"), ev(3, app="app-b"), ev(4, ref="campaign-7"),  # extra field: schema drift
        ev(5, app="app-b", meta={"nested": [1, 2]}), ev(6, event="click")]
BAD = {  # line -> the reason it is quarantined with
    '{"event_id": "e7", "app_id": "app-a", "user_id": "u1", "event": "page_v': "not_json",
    ev(8, app=123): "bad_type:app_id",
    json.dumps({"event_id": "e9", "appId": "app-a", "user_id": "u1", "event": "page_view",
                "ts": f"{D1}T10:00:00Z"}): "missing:app_id",  # a renamed field
    ev(10, ts=1767261600): "bad_type:ts",
}


def run_to_validate(drv: Driver, day: str) -> tuple[dict[str, Any], Any]:
    """begin -> write -> pre_commit as Airflow tasks, then validate; returns the XCom and the verdict."""
    began = drv.task(day, "begin", {})
    xcom = {"txn": began.result["txn"], "spec": began.result["spec"]}
    for phase in ("write", "pre_commit"):
        assert drv.task(day, phase, xcom).ok
    return xcom, drv.task(day, "validate", xcom)


@pytest.mark.parametrize("threshold,passes", [(0.4, True), (0.39, False)], ids=["at-threshold", "over"])
def test_bad_lines_are_quarantined_and_counted_and_the_gate_decides_by_threshold(pipe, threshold, passes):
    lines = GOOD[:3] + list(BAD) + GOOD[3:]  # 4 malformed of 10 lines: a ratio of exactly 0.4
    src = pipe.land(D1, lines)
    p = pipe.cfg(max_malformed_ratio=threshold)
    drv = Driver(p.setup)
    xcom, verdict = run_to_validate(drv, D1)
    sink = p.sink()
    st = sink.status(Interval.daily(D1))[1]
    counts = st.records["pre_committed"]["counts"]
    # counted: every line is either valid or malformed, with its reason - nothing silently dropped
    assert counts["records_in"] == 10 and counts["records_out"] == 6 and counts["records_rejected"] == 4
    assert counts["rejected_by_reason"] == {r: 1 for r in BAD.values()}
    if passes:
        assert verdict.ok, verdict
        commit = drv.task(D1, "commit", xcom)
        assert commit.ok and drv.task(D1, "abort", xcom).result == "COMMITTED"
        rows, _, _ = ref.compute([src], {}, f"dt={D1}")
        assert visible_rows(p.setup) == {D1: as_rows(rows)}
        assert ("app-a", 3, 2, 3) in as_rows(rows)  # e1, e2 and e4 (the one with an extra field)
        # quarantined: the exact lines, with file and reason, kept with the committed checkpoint
        quarantined = [json.loads(x) for x in checkpoint_file(p, xcom["txn"], "_quarantine/part-0.json").splitlines()]
        assert {(q["raw"], q["reason"]) for q in quarantined} == set(BAD.items())
        assert all(q["file"] == src for q in quarantined)
        assert_clean(p, D1)
        return
    # the gate said no: clear error, aborted in the task, nothing published
    assert verdict.error == "ValidationFailedError" and "rejected_ratio" in verdict.message, verdict
    assert st.validation["passed"] is False
    assert drv.task(D1, "abort", xcom).result == "ABORTED"
    assert sink.status(Interval.daily(D1))[1].state is State.ABORTED
    assert visible_rows(p.setup) == {}
    assert_clean(p, D1)
    # nothing lost: the landing file is untouched, and a re-run with a looser gate publishes the valid rows
    assert Path(src).read_text() == "".join(line + "\n" for line in lines)
    Driver(p.setup.replace(max_malformed_ratio=0.5)).clean_run(D1)
    assert [r[0] for r in visible_rows(p.setup)[D1]] == ["app-a", "app-b"]


def test_rejected_run_keeps_its_quarantine_for_inspection_when_asked(pipe):
    """``keep_rejected``: an aborted run's staging (data, counts, quarantine) moves to ``_rejected/``."""
    pipe.land(D1, GOOD[:3] + list(BAD) + GOOD[3:])
    kept = dataclasses.replace(pipe.setup.config(), max_malformed_ratio=0.1, keep_rejected=True)
    run = pipe.setup.run(D1, kept)

    began = run.begin()
    txn = TxnRef.from_dict(began["txn"])
    stage_write(began["spec"], {})
    run.pre_commit(txn)
    with pytest.raises(ValidationFailedError, match="rejected_ratio"):
        run.validate(txn)
    assert run.abort(txn) == "ABORTED"
    rejected = Path(run.sink.rejected_dir(txn))
    quarantined = [json.loads(x) for x in (rejected / "_quarantine" / "part-0.json").read_text().splitlines()]
    assert {(q["raw"], q["reason"]) for q in quarantined} == set(BAD.items())
    assert json.loads((rejected / "_counts.json").read_text())["records_rejected"] == 4
    assert visible_rows(pipe.setup) == {}
    assert not os.path.exists(run.sink.staging_dir(txn))


# --------------------------------------------------------------------------- empty interval
@pytest.mark.parametrize("empty", ["no-folder", "empty-file"])
def test_empty_interval_commits_an_empty_version_and_carries_state(pipe, empty):
    f1 = pipe.land(D1, [ev(1), ev(2, app="app-b"), ev(3, user="u9")])
    if empty == "empty-file":
        pipe.land(D2, [])
    f3 = pipe.land(D3, [ev(31, ts=f"{D3}T01:00:00Z"), ev(32, app="app-c", ts=f"{D3}T02:00:00Z")])
    for day in (D1, D2, D3):
        res = pipe.run(day)
        assert res["abort"] == "COMMITTED"
    sink = pipe.sink()
    st2 = sink.committed(Interval.daily(D2))[1]
    counts = st2.records["pre_committed"]["counts"]
    assert counts["records_in"] == 0 and counts["rows_written"] == {f"dt={D2}": 0}
    assert counts["input_files"] == (1 if empty == "empty-file" else 0)
    # an empty version is live (a reader sees the partition, with no rows) ...
    assert sink.live_version(f"dt={D2}") == sink.ref(Interval.daily(D2), 1).name
    seen = visible_rows(pipe.setup)
    assert seen[D2] == []
    # ... and the state went through it unchanged: day 3 continues from day 1
    assert seen[D1] == [("app-a", 2, 2, 2), ("app-b", 1, 1, 1)]
    assert seen[D3] == [("app-a", 1, 1, 3), ("app-c", 1, 1, 1)]
    _, s1, _ = ref.compute([f1], {}, None)
    rows3, _, _ = ref.compute([f3], s1, None)
    assert seen[D3] == as_rows(rows3)
    assert_clean(pipe, D1, D2, D3)


# --------------------------------------------------------------------------- huge lines
def test_huge_lines_are_quarantined_or_kept_intact(pipe):
    too_long = ev(1, pad="x" * 2_100_000)  # a JSON object beyond the parser's 2,000,000-char limit
    big_app = "app-" + "ü" * 100_000  # a valid event with a 100 KB app id
    src = pipe.land(D1, [ev(2), too_long, ev(3, app=big_app), ev(4, user="u2")])
    res = Driver(pipe.setup.replace(max_malformed_ratio=0.25)).clean_run(D1)
    assert res["abort"] == "COMMITTED"
    assert res["pre_commit"]["counts"]["rejected_by_reason"] == {"not_json": 1}
    assert visible_rows(pipe.setup)[D1] == [("app-a", 2, 2, 2), (big_app, 1, 1, 1)]
    (q,) = [json.loads(x) for x in checkpoint_file(pipe, res["txn"], "_quarantine/part-0.json").splitlines()]
    assert q["reason"] == "not_json" and q["file"] == src
    assert len(q["raw"]) == 10_000 and too_long.startswith(q["raw"])  # kept, truncated as documented
    assert_clean(pipe, D1)


# --------------------------------------------------------------------------- path-like values are data
HOSTILE_APPS = ["../x", "a/b", "%2e%2e", "..", "/etc/passwd", "dt=2026-01-09", "C:\\evil", "名前/../y",
                "\u202eevil", "app\u0000nul", "s3://other-bucket/key", "_hidden", ".dot"]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def any_pipe(request, tmp_path, monkeypatch):
    if request.param == "local":
        monkeypatch.delenv("EO_FAILPOINTS", raising=False)
        monkeypatch.setenv("EO_REPORTS_DIR", str(tmp_path / "reports"))
        return Pipe(Setup(root=str(tmp_path / "data"), start=D1, reports=str(tmp_path / "reports")))
    return s3_pipe(request, tmp_path, monkeypatch, request.getfixturevalue("s3_server"))


def _local_tree(base: Path) -> set[str]:
    return {str(p.relative_to(base)) for p in base.rglob("*")}


def test_path_like_and_unicode_app_ids_are_data_never_paths(any_pipe, tmp_path):
    pipe = any_pipe
    lines = [ev(i, app=app, user=f"u{i}") for i, app in enumerate(HOSTILE_APPS)]
    src = pipe.land(D1, lines)
    before = _local_tree(tmp_path)
    res = pipe.run(D1)
    assert res["abort"] == "COMMITTED"
    assert res["pre_commit"]["counts"]["records_rejected"] == 0
    seen = visible_rows(pipe.setup)
    assert sorted(r[0] for r in seen[D1]) == sorted(HOSTILE_APPS)  # every value came back as data
    sink = pipe.sink()
    st = sink.storage
    # the only partition is dt=; nothing but the protocol's own names in the table
    assert [n for n in st.list_names(sink.table) if not n.startswith("_")] == [f"dt={D1}"]
    if pipe.fs is None:
        created = _local_tree(tmp_path) - before
        inside = ("data/warehouse/app_pv/", "data/warehouse/_exactly_once/app_pv/", "reports/")
        outside = [p for p in created if not p.startswith(inside) and p not in (
            "data/warehouse", "data/warehouse/app_pv", "data/warehouse/_exactly_once",
            "data/warehouse/_exactly_once/app_pv", "reports")]
        assert outside == [], outside
        assert not (tmp_path / "x").exists() and not (tmp_path / "data" / "x").exists()
        names = [p for p in created if p.startswith("data/warehouse/app_pv/")]
    else:
        pipe.fs.invalidate_cache()
        bucket = pipe.setup.root[len("s3://"):].split("/")[0]
        keys = list(pipe.fs.find(bucket))
        names = [k for k in keys if k.startswith((f"{bucket}/eo/warehouse/app_pv/",
                                                  f"{bucket}/eo/warehouse/_exactly_once/app_pv/"))]
        assert sorted(set(keys) - set(names)) == [src], "objects outside the table (other than the input)"
    for name in names:  # no app id reached a path: only the table's own, allow-listed names
        assert not any(app in name for app in ("../x", "a/b", "%2e", "passwd", "名前", "evil", "nul", "s3:")), name
    assert_clean(pipe, D1)


# --------------------------------------------------------------------------- identifiers that escape
@pytest.mark.parametrize("make", [
    lambda: Interval.daily("../x"),
    lambda: Interval.daily("2026-01-01/../../etc"),
    lambda: Interval("2026-01-02", "2026-01-01"),  # reversed
    lambda: Interval("2026-01-01", "2026-01-01"),  # empty
    lambda: Interval.daily("0001-01-01"),
    lambda: Interval.daily(D1 + "\x00"),
    pytest.param(lambda: Interval.daily("9999-12-31"), id="last-day-overflows"),
], ids=lambda f: None)
def test_intervals_that_make_no_sense_are_refused_clearly(make):
    with pytest.raises(UnsafeIdentifierError):
        make()


def test_intervals_that_differ_never_share_a_token():
    """Two different intervals must never map to one log dir / staging name (they would share epochs
    and could fence or commit each other); a sub-second bound must be refused or kept in the token."""
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    pairs = [(start + timedelta(milliseconds=100), start + timedelta(days=1)),
             (start + timedelta(milliseconds=200), start + timedelta(days=1)),
             (start + timedelta(milliseconds=100), start + timedelta(milliseconds=900))]
    tokens: dict[str, Interval] = {}
    for a, b in pairs:
        try:
            iv = Interval(a, b)
        except UnsafeIdentifierError:
            continue  # refusing sub-second bounds is a fine answer
        assert Interval.from_token(iv.token) == iv, f"{iv} does not round-trip through {iv.token}"
        assert tokens.setdefault(iv.token, iv) == iv, f"{iv} and {tokens[iv.token]} share {iv.token}"


GOOD_TXN = {"pipeline": "pv_pipeline", "sink": "app_pv", "interval": TOKEN1, "epoch": 1}
FORGED = {
    "interval ../../x": {**GOOD_TXN, "interval": "../../x"},
    "interval token/../..": {**GOOD_TXN, "interval": TOKEN1 + "/../../x"},
    "interval with a path": {**GOOD_TXN, "interval": "/etc/passwd"},
    "pipeline ../": {**GOOD_TXN, "pipeline": "../pv_pipeline"},
    "pipeline a/b": {**GOOD_TXN, "pipeline": "pv_pipeline/../x"},
    "sink ..": {**GOOD_TXN, "sink": ".."},
    "sink with a slash": {**GOOD_TXN, "sink": "app_pv/../../x"},
    "epoch 0": {**GOOD_TXN, "epoch": 0},
    "epoch -1": {**GOOD_TXN, "epoch": -1},
    "epoch path": {**GOOD_TXN, "epoch": "../1"},
    "epoch 1.5": {**GOOD_TXN, "epoch": 1.5},
    "epoch true": {**GOOD_TXN, "epoch": True},
    "no epoch": {k: v for k, v in GOOD_TXN.items() if k != "epoch"},
}


@pytest.mark.parametrize("name", list(FORGED))
def test_forged_transaction_dicts_from_xcom_are_refused(pipe, name):
    """A transaction dict as XCom hands it on, forged or mangled: refused with UnsafeIdentifierError (the
    operators fail such a task for good) before anything touches storage."""
    pipe.land(D1, [ev(1)])
    before = _local_tree(Path(pipe.setup.root))
    with pytest.raises(UnsafeIdentifierError):
        TxnRef.from_dict(FORGED[name])
    for phase in ("pre_commit", "validate", "commit", "abort"):  # each task parses the XCom first
        out = Driver(pipe.setup).task(D1, phase, {"txn": FORGED[name], "spec": "unused"})
        assert out.error == "UnsafeIdentifierError", (phase, out)
    assert _local_tree(Path(pipe.setup.root)) == before


@pytest.mark.parametrize("other", ["another pipeline", "another interval"])
def test_a_transaction_of_another_pipeline_or_interval_is_refused(pipe, other):
    """A well-formed transaction that is not this run's (a wrong XCom, a copy-pasted ``eo`` call) must not
    be sealed, committed or aborted by this run."""
    pipe.land(D1, [ev(1)])
    pipe.land(D2, [ev(2, ts=f"{D2}T01:00:00Z")])
    pipe.run(D1)
    mine = Driver(pipe.setup).task(D2, "begin", {})
    xcom = {"txn": mine.result["txn"], "spec": mine.result["spec"]}
    assert Driver(pipe.setup).task(D2, "write", xcom).ok
    if other == "another pipeline":
        wrong = {**xcom["txn"], "pipeline": "other_pipeline"}
        day = D2
    else:
        wrong = xcom["txn"]  # day 2's transaction, handed to the tasks of day 1's run
        day = D1
    for phase in ("pre_commit", "commit", "abort"):
        out = Driver(pipe.setup).task(day, phase, {"txn": wrong, "spec": xcom["spec"]})
        # another pipeline's attempt reads as one of a renamed sink: refused as final (SinkRenamedError)
        assert not out.ok and out.error in ("TransactionStateError", "UnsafeIdentifierError", "SinkRenamedError"), \
            (phase, out)
    st = pipe.sink().status(Interval.daily(D2))[1]
    assert st.state is State.OPEN, "another run's task changed this transaction"
    # the rightful run carries on
    for phase in ("pre_commit", "validate", "commit", "abort"):
        assert Driver(pipe.setup).task(D2, phase, xcom).ok
    assert set(visible_rows(pipe.setup)) == {D1, D2}
    assert_clean(pipe, D1, D2)


# --------------------------------------------------------------------------- symlinks in staging
WHERE = {
    "data file": "data/dt=2026-01-01/evil.parquet",
    "data partition dir": "data/dt=2026-01-01",
    "state file": "_state/part-1.parquet",
    "counts file": "_counts.json",
    "quarantine dir": "_quarantine",
}


@pytest.mark.parametrize("where", list(WHERE))
def test_symlink_planted_in_staging_is_refused_and_abort_keeps_its_target(pipe, tmp_path, where):
    pipe.land(D1, [ev(1), ev(2, app="app-b")])
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    secret = outside / "dir" / "precious.parquet"
    pq.write_table(pa.table({"app_id": ["stolen"], "pv": [1], "uv": [1], "cumulative_pv": [1]}), secret)
    (outside / "counts.json").write_text(json.dumps({"lines_read": 1, "malformed": 0}))
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    drv = Driver(pipe.setup)
    began = drv.task(D1, "begin", {})
    xcom = {"txn": began.result["txn"], "spec": began.result["spec"]}
    assert drv.task(D1, "write", xcom).ok
    sink = pipe.sink()
    link = Path(sink.staging_dir(TxnRef.from_dict(xcom["txn"]))) / WHERE[where]
    target = outside / "dir" if where.endswith("dir") else (outside / "counts.json" if "counts" in where else secret)
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)

    sealed = drv.task(D1, "pre_commit", xcom)
    assert sealed.error == "UnsafeIdentifierError" and "symlink" in sealed.message, sealed
    assert sink.status(Interval.daily(D1))[1].state is State.ABORTED  # aborted in the task
    assert drv.task(D1, "abort", xcom).result == "ABORTED"  # the teardown: idempotent
    assert not os.path.lexists(link), "the link survived the abort"
    assert secret.is_file() and hashlib.sha256(secret.read_bytes()).hexdigest() == digest
    assert (outside / "counts.json").is_file() and sorted(p.name for p in (outside / "dir").iterdir()) == [
        "precious.parquet"]
    assert visible_rows(pipe.setup) == {}
    assert_clean(pipe, D1)
    res = pipe.run(D1)  # a clean re-run publishes the real data
    assert res["abort"] == "COMMITTED"
    assert [r[0] for r in visible_rows(pipe.setup)[D1]] == ["app-a", "app-b"]


# --------------------------------------------------------------------------- credentials, new angles
def _text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


@pytest.mark.s3
def test_secret_rotated_mid_transaction_and_failing_gate_on_s3_never_leak(request, tmp_path, monkeypatch,
                                                                         caplog, capsys):
    """On a loopback S3 that checks signatures: (1) a run whose quality gate fails, and (2) a run whose
    connection secret is wrong by the time the commit task runs. The secret appears in no error chain,
    log line, console output, report or object; (2) publishes nothing until the right secret is back,
    then its retry publishes exactly once."""
    from cluster_helpers import authenticating_s3_server

    with authenticating_s3_server() as s3:
        # capture from here: the server's IAM bootstrap (create_access_key) is the harness, not the pipeline
        caplog.set_level(logging.DEBUG)
        caplog.clear()
        for key in [k for k in os.environ if k.startswith("AWS_")] + ["EO_S3_ENDPOINT_URL"]:
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
        pipe = s3_pipe(request, tmp_path, monkeypatch, s3, conn_id="eo_rot")
        conn_var = "AIRFLOW_CONN_EO_ROT"
        pipe.land(D1, GOOD[:3] + list(BAD) + GOOD[3:])
        texts: dict[str, str] = {}

        # (1) the gate fails on S3
        gated = pipe.cfg(max_malformed_ratio=0.1)
        drv = Driver(gated.setup)
        xcom, verdict = run_to_validate(drv, D1)
        assert verdict.error == "ValidationFailedError", verdict
        texts["gate error"] = verdict.message
        assert drv.task(D1, "abort", xcom).result == "ABORTED"

        # (2) the secret is rotated (wrong) between validate and commit
        drv = Driver(pipe.cfg(max_malformed_ratio=0.5).setup)
        began = drv.task(D1, "begin", {})
        xcom = {"txn": began.result["txn"], "spec": began.result["spec"]}
        for phase in ("write", "pre_commit", "validate"):
            assert drv.task(D1, phase, xcom).ok
        wrong = "Wr0ng/Rotated+" + s3["secret"][::-1][:16]
        monkeypatch.setenv(conn_var, conn_json(s3["key"], wrong, s3["endpoint_url"]))
        run = pipe.setup.run(D1)
        with pytest.raises(PermissionError) as info:
            run.commit(TxnRef.from_dict(xcom["txn"]))
        texts["commit error"] = _text(info.value)
        monkeypatch.setenv(conn_var, conn_json(s3["key"], s3["secret"], s3["endpoint_url"]))
        assert visible_rows(pipe.setup) == {}  # nothing was published with the wrong secret
        assert pipe.sink().status(Interval.daily(D1))[2].state is State.PRE_COMMITTED
        commit = drv.task(D1, "commit", xcom)  # Airflow's retry, with the right secret back
        assert commit.ok and commit.result["partitions"] == {f"dt={D1}": "published"}, commit
        assert drv.task(D1, "abort", xcom).result == "COMMITTED"
        assert [r[0] for r in visible_rows(pipe.setup)[D1]] == ["app-a", "app-b"]
        assert_clean(pipe, D1)

        out, err = capsys.readouterr()
        texts.update({"caplog": caplog.text, "stdout": out, "stderr": err,
                      "attempts": json.dumps([a.__dict__ for a in drv.attempts], default=str)})
        pipe.fs.invalidate_cache()
        bucket = pipe.setup.root[len("s3://"):].split("/")[0]
        blobs = {f"s3://{k}": pipe.fs.cat_file(k) for k in pipe.fs.find(bucket)}
        blobs.update({str(p): p.read_bytes() for p in (tmp_path / "reports").rglob("*") if p.is_file()})
        assert any("_txlog" in k for k in blobs) and any(k.endswith(".html") for k in blobs)
        for what, needle in {"the secret": s3["secret"], "the wrong secret": wrong}.items():
            for where, text in {**texts, **blobs}.items():
                blob = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
                assert needle.encode() not in blob, f"{what} appears in {where}"
