"""pv_pipeline's phases on S3, chosen by configuration only, with credentials only from a connection.

``EO_DATA_ROOT=s3://<fresh bucket>/eo`` on a loopback ``moto_server`` that verifies every request's
signature (so the credentials in use really are the connection's); ``EO_STORAGE_CONN_ID=eo_s3`` names an
Airflow connection defined by ``AIRFLOW_CONN_EO_S3``; every other credential source (``AWS_*``,
``EO_S3_ENDPOINT_URL``, ``~/.aws``, instance metadata) is removed. ``IntervalRun`` is driven through
begin -> write -> pre_commit -> validate -> commit (-> abort, the teardown) like the DAG's tasks.

Spark cannot reach S3 here (pip's PySpark has no hadoop-aws jars; the image adds them), so the write
step is :func:`cluster_helpers.write_like_pv_counts`: the job's output contract, computed by the
independent reference ``tests/reference_pv.py``. Everything else is the library as deployed.
"""
from __future__ import annotations

import json
import logging
import os
import traceback
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
from botocore.exceptions import BotoCoreError

import reference_pv as ref
from cluster_helpers import write_like_pv_counts
from conftest import free_port, make_bucket

from exactly_once import settings
from exactly_once.airflow.connections import storage_options
from exactly_once.protocol.config import PipelineConfig
from exactly_once.protocol.layout import Source
from exactly_once.errors import ConfigError
from exactly_once.ids import Interval, TxnRef
from exactly_once.ops.maintenance import gc
from exactly_once.protocol.pipeline import IntervalRun
from tools.sample_data import generate

pytestmark = [pytest.mark.s3, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]
DAYS = ["2026-01-01", "2026-01-02"]
CONN_ID = "eo_s3"


def aws_conn(login: str, password: str, endpoint: str) -> str:
    """An Airflow ``aws`` connection as the JSON that ``AIRFLOW_CONN_<ID>`` accepts."""
    return json.dumps({"conn_type": "aws", "login": login, "password": password,
                       "extra": {"endpoint_url": endpoint}})


def pv_config() -> PipelineConfig:
    """The DAG's PipelineConfig (dags/pv_pipeline.py); root and connection come from the environment,
    resolved as the DAG file does (exactly_once.settings)."""
    return PipelineConfig(pipeline="pv_pipeline", sink="app_pv", **settings.from_env(),
                          sources=Source("app_logs", allow_empty=True),
                          application=str(ROOT / "spark_jobs" / "pv_counts.py"),
                          suite=str(ROOT / "expectations" / "app_pv.json"), stateful=True,
                          start=date.fromisoformat(DAYS[0]))


def interval_run(cfg: PipelineConfig, day: str) -> IntervalRun:
    """The run as an operator builds it: the connection resolved once, in the Airflow layer."""
    return IntervalRun(cfg, Interval.daily(day), storage_options=storage_options(cfg.storage_conn_id))


@pytest.fixture(scope="module")
def s3(signing_s3):
    return signing_s3  # the session's signature-checking server (conftest)


@pytest.fixture
def env(s3, tmp_path, monkeypatch):
    """EO_DATA_ROOT on a fresh bucket; the connection is the only source of credentials."""
    import s3fs

    for key in [k for k in os.environ if k.startswith("AWS_")] + ["EO_S3_ENDPOINT_URL", "EO_FAILPOINTS"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata credentials either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    bucket = make_bucket(s3)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", aws_conn(s3["key"], s3["secret"], s3["endpoint_url"]))
    monkeypatch.setenv("EO_STORAGE_CONN_ID", CONN_ID)
    monkeypatch.setenv("EO_DATA_ROOT", f"s3://{bucket}/eo")
    monkeypatch.setenv("EO_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    # the test's own client (set-up and inspection only; the library gets nothing from it)
    fs = s3fs.S3FileSystem(key=s3["key"], secret=s3["secret"],
                           client_kwargs={"endpoint_url": s3["endpoint_url"], "region_name": "us-east-1"})
    return SimpleNamespace(bucket=bucket, fs=fs, prefix=f"{bucket}/eo", landing=tmp_path / "landing",
                           reports=tmp_path / "reports", **s3)


def upload_landing(env: SimpleNamespace, days: list[str]) -> None:
    """Sample app logs generated locally (the reference reads these) and copied to the S3 landing zone."""
    generate(str(env.landing), days, events_per_day=250)
    for day in days:
        upload_day(env, day)


def upload_day(env: SimpleNamespace, day: str) -> None:
    for path in sorted((env.landing / "app_logs" / f"dt={day}").rglob("*.jsonl")):
        rel = path.relative_to(env.landing).as_posix()
        env.fs.pipe_file(f"{env.prefix}/landing/{rel}", path.read_bytes())


def local_files(env: SimpleNamespace, day: str) -> list[str]:
    return sorted(str(p) for p in (env.landing / "app_logs" / f"dt={day}").rglob("*.jsonl"))


def run_phases(cfg: PipelineConfig, day: str, *, refresh: bool = False) -> dict[str, Any]:
    """One interval as the DAG runs it: begin, write, pre_commit, validate, commit; abort as teardown."""
    run = interval_run(cfg, day)
    began = run.begin(refresh_sources=refresh, run={"run_id": f"test__{day}"})
    txn = TxnRef.from_dict(began["txn"])
    try:
        counts = write_like_pv_counts(began["spec"], run.options)
        sealed = run.pre_commit(txn)
        verdict = run.validate(txn)
        summary = run.commit(txn)
    finally:
        assert run.abort(txn) == "COMMITTED"  # the teardown: a no-op after commit
    return {"txn": txn, "began": began, "counts": counts, "sealed": sealed, "verdict": verdict,
            "summary": summary}


def published_rows(cfg: PipelineConfig, day: str) -> set[tuple]:
    """What an exact reader sees: the files the live manifest names (``sink.live_files``)."""
    sink = cfg.sink_handle(storage_options(cfg.storage_conn_id))
    rows: list[dict[str, Any]] = []
    for path in sink.live_files(f"dt={day}"):
        with sink.storage.open(path, "rb") as f:
            table = pq.read_table(f)
        assert table.column_names == ["app_id", "pv", "uv", "cumulative_pv"]
        rows += table.to_pylist()
    out = {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows}
    assert len(out) == len(rows), "duplicate rows published"
    return out


def reference(env: SimpleNamespace, days: list[str]) -> tuple[dict[str, set[tuple]], dict[str, dict]]:
    """Per day, the rows and the ``_counts.json`` of the independent reference, state chained."""
    state: dict[str, int] = {}
    rows_by_day, counts_by_day = {}, {}
    for day in days:
        rows, state, counts = ref.compute(local_files(env, day), state, f"dt={day}")
        rows_by_day[day] = {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows}
        counts_by_day[day] = counts
    return rows_by_day, counts_by_day


def names_below(env: SimpleNamespace, path: str) -> list[str]:
    env.fs.invalidate_cache()
    base = f"{env.prefix}/{path}".rstrip("/")
    return sorted(p[len(base) + 1:] for p in env.fs.find(base))


def everything_written(env: SimpleNamespace) -> dict[str, bytes]:
    """Every object in the bucket and every local report file, by name."""
    env.fs.invalidate_cache()
    out = {f"s3://{p}": env.fs.cat_file(p) for p in env.fs.find(env.bucket)}
    out.update({str(p): p.read_bytes() for p in env.reports.rglob("*") if p.is_file()})
    return out


def assert_not_in(needles: dict[str, str], haystacks: dict[str, str | bytes]) -> None:
    for what, needle in needles.items():
        for where, text in haystacks.items():
            blob = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
            assert needle.encode() not in blob, f"{what} appears in {where}"


def test_two_days_and_a_reprocess_on_s3_with_the_connection_only(env, caplog, capsys):
    caplog.set_level(logging.DEBUG)  # everything any library logs, botocore's request logs included
    cfg = pv_config()
    assert cfg.root == f"s3://{env.bucket}/eo"
    assert storage_options(cfg.storage_conn_id) == {
        "key": env.key, "secret": env.secret, "endpoint_url": env.endpoint_url}
    upload_landing(env, DAYS)

    runs = [run_phases(cfg, day) for day in DAYS]
    expected, expected_counts = reference(env, DAYS)
    table, home = "warehouse/app_pv", "warehouse/_exactly_once/app_pv"
    for day, run in zip(DAYS, runs):
        txn = run["txn"].name
        assert run["summary"]["partitions"] == {f"dt={day}": "published"}
        assert run["verdict"]["passed"] is True
        assert published_rows(cfg, day) == expected[day]
        # the S3 layout: manifest + success marker per partition, data files named by transaction
        assert names_below(env, f"{table}/dt={day}") == sorted(["_MANIFEST.json", "_SUCCESS",
                                                                f"{txn}--part-0.parquet"])
        assert env.fs.cat_file(f"{env.prefix}/{table}/dt={day}/_SUCCESS") == b""  # Hadoop's marker
        # the counts the write step staged are the job's keys and the reference's numbers
        assert run["counts"] == expected_counts[day]
        assert run["sealed"]["counts"] == expected_counts[day]
        # the data-quality report and the run summary are local files
        report = Path(run["verdict"]["report"])
        assert report.is_file() and env.reports in report.parents
        assert (env.reports / "runs" / "pv_pipeline" / f"{txn}.json").is_file()
    assert runs[1]["began"]["spec"].startswith(f"s3://{env.prefix}/{home}/_staging/")
    assert not names_below(env, f"{home}/_staging"), "staging leftovers"
    assert not env.fs.exists(f"{env.prefix}/reports"), "reports must not go to the bucket"

    # reprocess day 2 after a late file landed: a new version replaces the old one in the live prefix
    late = env.landing / "app_logs" / f"dt={DAYS[1]}" / "hour=23" / "late-0.jsonl"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text("".join(json.dumps({"event_id": f"late-{i}", "app_id": "app_late", "user_id": f"u{i % 3}",
                                        "event": "page_view", "ts": f"{DAYS[1]}T23:59:0{i}Z"}) + "\n"
                            for i in range(5)))
    upload_day(env, DAYS[1])
    again = run_phases(cfg, DAYS[1], refresh=True)
    old, new = runs[1]["txn"].name, again["txn"].name
    assert again["txn"].epoch == runs[1]["txn"].epoch + 1
    assert again["summary"]["partitions"] == {f"dt={DAYS[1]}": "published"}
    assert again["summary"]["stale_intervals"] == []  # the last interval: nothing after it to re-run
    live = names_below(env, f"{table}/dt={DAYS[1]}")
    assert live == sorted(["_MANIFEST.json", "_SUCCESS", f"{new}--part-0.parquet", f"{old}--part-0.parquet"]), live
    gc(cfg.sink_handle(storage_options(cfg.storage_conn_id)), min_age=0)  # the superseded version stays for the grace period, then goes
    live = names_below(env, f"{table}/dt={DAYS[1]}")
    assert live == sorted(["_MANIFEST.json", "_SUCCESS", f"{new}--part-0.parquet"]), live
    assert cfg.sink_handle(storage_options(cfg.storage_conn_id)).live_files(f"dt={DAYS[1]}") == [
        f"{env.prefix}/{table}/dt={DAYS[1]}/{new}--part-0.parquet"]
    expected, _ = reference(env, DAYS)
    assert ("app_late", 5, 3, 5) in expected[DAYS[1]]
    assert published_rows(cfg, DAYS[1]) == expected[DAYS[1]]
    assert published_rows(cfg, DAYS[0]) == expected[DAYS[0]]  # untouched
    assert not names_below(env, f"{home}/_staging"), "staging leftovers"

    # no credential anywhere: logs (every level, every logger), console, reports, run summaries, and
    # every object the pipeline wrote (transaction log, specs, manifests, counts, checkpoints)
    out, err = capsys.readouterr()
    written = everything_written(env)
    assert any(name.endswith("_MANIFEST.json") for name in written)
    assert_not_in({"the secret key": env.secret},
                  {"caplog": caplog.text, "stdout": out, "stderr": err, **written,
                   "return values": json.dumps([runs, again], default=str)})
    # the access key id is not secret, but nothing of ours should carry it either
    assert_not_in({"the access key id": env.key},
                  {"stdout": out, "stderr": err, **written,
                   "warnings and errors": "\n".join(r.getMessage() for r in caplog.records
                                                    if r.levelno >= logging.WARNING)})


def _failure_text(exc: BaseException) -> str:
    """The whole exception chain as a traceback would print it (messages of causes included)."""
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize("broken", ["wrong secret", "wrong key", "wrong endpoint"])
def test_bad_connection_fails_without_revealing_credentials(env, broken, monkeypatch, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    wrong_secret = "Wr0ng/Secret+" + env.secret[::-1][:20]
    login, password, endpoint = {
        "wrong secret": (env.key, wrong_secret, env.endpoint_url),
        "wrong key": ("AKIAWRONGKEY00000000", env.secret, env.endpoint_url),
        "wrong endpoint": (env.key, env.secret, f"http://127.0.0.1:{free_port()}"),
    }[broken]
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", aws_conn(login, password, endpoint))
    cfg = pv_config()
    # the server checks signatures: a wrong key or secret is refused (PermissionError from s3fs), a
    # wrong endpoint fails to connect (botocore's EndpointConnectionError)
    with pytest.raises((PermissionError, BotoCoreError)) as info:
        interval_run(cfg, DAYS[0]).begin()
    out, err = capsys.readouterr()
    assert_not_in({"the secret key": env.secret, "the wrong secret": wrong_secret},
                  {"exception": _failure_text(info.value), "caplog": caplog.text, "stdout": out, "stderr": err})
    # nothing was written with the broken connection
    assert not names_below(env, "warehouse")


@pytest.mark.parametrize("secret", [
    "s3cr3t-in-the-url",
    "wJalrXUtnFEMI/K7MDENG+bPxRfiCY",  # a '/' in the secret, as real AWS secrets have
])
def test_credentials_in_the_data_root_url_are_refused(env, secret, monkeypatch):
    monkeypatch.setenv("EO_DATA_ROOT", f"s3://AKIAINURL0000000:{secret}@{env.bucket}/eo")
    cfg = pv_config()
    assert secret not in cfg.describe() and "AKIAINURL" not in cfg.describe()
    with pytest.raises(ConfigError) as info:
        interval_run(cfg, DAYS[0])
    assert "credentials in a storage URL are refused" in str(info.value)
    assert secret not in _failure_text(info.value)
    assert "AKIAINURL" not in _failure_text(info.value)
