"""The write phase as a Spark Connect client of ONE shared server (the session fixture ``spark_connect``).

* the pv job over Spark Connect for two chained days equals the reference, and day 2 equals the same
  job run through spark-submit from the same state;
* each write attempt runs in its own session: temp views and conf never leak between intervals;
* a client killed with SIGKILL mid-write leaves its query running on the server; the next attempt
  (or the abort) interrupts it by the transaction's tag and nothing writes into the staging dir after.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from connect_jobs import SLOW_FIRST_JOB
from test_pv_job import JOB_PATH, ROOT, check_against_reference, make_spec, read_data, read_state
from tools import sample_data
from exactly_once.airflow.write import run_connect, spark_remote
from exactly_once.contracts import JobSpec
from exactly_once.errors import ConfigError, ContractError
from exactly_once.job.connect import (_with_session_id, connect_mode, connect_session, connect_session_id,
                                  interrupt_writes, job_tag, retry_seconds, stop_session)

pytestmark = pytest.mark.spark


def _spec_file(spec: JobSpec, path: Path) -> str:
    path.write_bytes(spec.to_json())
    return str(path)


def _spark_submit(spec_url: str) -> dict:
    submit = ROOT / ".venv" / "bin" / "spark-submit"
    if not submit.exists():
        submit = Path(sys.executable).parent / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k not in ("EO_FAILPOINTS", "EO_SPARK_REMOTE")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.sql.session.timeZone=UTC", "--conf", "spark.sql.shuffle.partitions=2",
                           str(JOB_PATH), "--spec", spec_url], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["counts"]


def test_pv_two_days_over_spark_connect_match_reference_and_spark_submit(spark_connect, tmp_path):
    days = ["2026-01-01", "2026-01-02"]
    generated = sample_data.generate(str(tmp_path / "landing"), days, events_per_day=400)
    prev_dir, prev, day2 = None, {}, None
    for day in days:
        files = sorted(p for p in generated["files"] if f"dt={day}" in p)
        spec = make_spec(tmp_path, day, files, day, prev_dir)
        out = run_connect(str(JOB_PATH), _spec_file(spec, tmp_path / f"{day}.json"), spark_connect)
        assert out["spark"] == "connect" and out["txn"] == day
        assert out["counts"]["records_rejected"] > 0 and out["counts"]["records_deduplicated"] > 0
        prev_before, prev = prev, check_against_reference(spec, out["counts"], prev)
        day2 = (files, prev_dir, prev_before, spec, out["counts"])
        prev_dir = os.path.join(spec.staging_dir, "_state")
    files, prev_dir, prev_before, connect_spec, connect_counts = day2
    submit_spec = make_spec(tmp_path, "submit", files, days[1], prev_dir)
    submit_counts = _spark_submit(_spec_file(submit_spec, tmp_path / "submit.json"))
    assert submit_counts == connect_counts
    assert read_data(submit_spec.staging_dir, f"dt={days[1]}") == read_data(connect_spec.staging_dir, f"dt={days[1]}")
    assert read_state(submit_spec.staging_dir) == read_state(connect_spec.staging_dir) == prev


PROBE_JOB = '''
from exactly_once.contracts import Counts

def compute(ctx):
    spark = ctx.spark
    leaked = [t.name for t in spark.catalog.listTables() if t.isTemporary]
    conf = spark.conf.get("spark.sql.eo.probe", "unset")
    spark.range(3).createOrReplaceTempView("eo_probe_view")
    spark.conf.set("spark.sql.eo.probe", ctx.spec.txn)
    spark.range(5).cache().count()
    with open(ctx.args[0], "a") as f:
        f.write(repr((ctx.spec.txn, spark.session_id, leaked, conf)) + "\\n")
    return Counts(records_in=0, records_out=0)
'''


def test_each_interval_and_attempt_gets_its_own_session(spark_connect, tmp_path):
    job = tmp_path / "probe_job.py"
    job.write_text(PROBE_JOB)
    seen = tmp_path / "seen.txt"
    runs = [("2026-01-01", 1), ("2026-01-02", 1), ("2026-01-02", 2)]
    for day, attempt in runs:
        spec = make_spec(tmp_path, f"{day}-{attempt}", [], day, None)
        run_connect(str(job), _spec_file(spec, tmp_path / f"{day}-{attempt}.json"), spark_connect,
                    attempt=attempt, args=(str(seen),))
    rows = [eval(line) for line in seen.read_text().splitlines()]  # noqa: S307 - our own repr()
    assert [r[0] for r in rows] == [f"{d}-{a}" for d, a in runs]
    assert len({r[1] for r in rows}) == 3, "every attempt must run in a new Spark Connect session"
    assert all(r[2] == [] and r[3] == "unset" for r in rows), rows


# killable the way a real job is (connect_jobs.py: a bare ``spark.range`` write may ignore the kill and hold the
# shared server's cores for hours), and finite: 100 batches of 0.2 s per task
SLOW_JOB = '''
import time
from exactly_once.contracts import Counts

def compute(ctx):
    p = ctx.partitions[0]
    open(ctx.args[0], "w").close()  # the client is about to start its write

    def crawl(batches):
        for batch in batches:
            time.sleep(0.2)
            yield batch

    (ctx.spark.range(0, 4_000_000, 1, 4).mapInArrow(crawl, "id long")
     .write.mode("overwrite").parquet(ctx.output_dir(p)))
    return Counts(records_in=0, records_out=0, rows_written={p: 0})
'''


def _files(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def test_killed_client_query_is_interrupted_by_tag_before_abort(spark_connect, tmp_path):
    job = tmp_path / "slow_job.py"
    job.write_text(SLOW_JOB)
    started = tmp_path / "started"
    spec = make_spec(tmp_path, "2026-01-01.e000001", [], "2026-01-01", None)
    spec_url = _spec_file(spec, tmp_path / "spec.json")
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=run_connect, args=(str(job), spec_url, spark_connect),
                        kwargs={"attempt": 1, "args": (str(started),)})
    child.start()
    temporary = os.path.join(spec.data_dir, "dt=2026-01-01", "_temporary")
    deadline = time.monotonic() + 180
    while not (started.exists() and os.path.isdir(temporary)) and child.is_alive():
        assert time.monotonic() < deadline, "the write never started"
        time.sleep(0.2)
    assert child.is_alive(), f"the client ended early (exit {child.exitcode})"
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    # the server-side query outlives its client: it is still listed under the transaction's tag
    interrupted = interrupt_writes(spark_connect, spec.txn, [1], scope=spec.session_scope)
    assert interrupted, "the killed client's query was no longer running: the test proves nothing"
    assert interrupt_writes(spark_connect, spec.txn, [1], scope=spec.session_scope) == []
    shutil.rmtree(spec.staging_dir)  # what abort does next
    # a new attempt's session still works and the dead query left nothing behind
    with connect_mode():
        check = connect_session(spark_connect, spec.txn, 2, scope=spec.session_scope)
        try:
            assert check.range(2).count() == 2
        finally:
            stop_session(check)
    assert not os.path.exists(spec.staging_dir), _files(spec.staging_dir)


def test_remote_is_chosen_by_configuration(monkeypatch):
    monkeypatch.setenv("EO_SPARK_REMOTE", "sc://127.0.0.1:15002")
    assert spark_remote("spark_default") == "sc://127.0.0.1:15002"
    monkeypatch.setenv("EO_SPARK_REMOTE", "spark://master:7077")
    with pytest.raises(ConfigError, match="sc://"):
        spark_remote("spark_default")
    monkeypatch.delenv("EO_SPARK_REMOTE")
    monkeypatch.setenv("AIRFLOW_CONN_EO_SC", "spark-connect://10.0.0.5:15002")
    assert spark_remote("eo_sc") == "sc://10.0.0.5:15002"
    monkeypatch.setenv("AIRFLOW_CONN_EO_SUBMIT", "spark://master:7077")
    assert spark_remote("eo_submit") is None
    monkeypatch.setenv("AIRFLOW_CONN_EO_SC_HOST", '{"conn_type": "spark", "host": "sc://10.0.0.6:15003"}')
    assert spark_remote("eo_sc_host") == "sc://10.0.0.6:15003"
    # a session id per (transaction, attempt), other URL parameters kept, a stale session_id replaced
    ids = {connect_session_id("t.e000001", a) for a in (1, 2)} | {connect_session_id("t.e000002", 1)}
    assert len(ids) == 3 and connect_session_id("t.e000001", 1) == connect_session_id("t.e000001", 1)
    url = _with_session_id("sc://h:1/;use_ssl=true;session_id=old", "new")
    assert url == "sc://h:1/;use_ssl=true;session_id=new"
    with pytest.raises(ContractError, match="sc://"):
        _with_session_id("spark://h:7077", "x")
    assert job_tag("2026-01-01T00:00:00+00:00.e000001") == "eo-2026-01-01T00_00_00_00_00.e000001"
    # the retry budget for a dead server: a positive number of seconds, default 60
    monkeypatch.delenv("EO_SPARK_CONNECT_RETRY_SECONDS", raising=False)
    assert retry_seconds() == 60.0
    monkeypatch.setenv("EO_SPARK_CONNECT_RETRY_SECONDS", "7.5")
    assert retry_seconds() == 7.5
    for bad in ("0", "-3", "soon"):
        monkeypatch.setenv("EO_SPARK_CONNECT_RETRY_SECONDS", bad)
        with pytest.raises(ConfigError, match="EO_SPARK_CONNECT_RETRY_SECONDS must be a number of seconds"):
            retry_seconds()


def test_same_transaction_name_in_two_tables_and_a_recreated_table(spark_connect, tmp_path):
    """Session ids are scoped by the transaction attempt (staging dir - table location - and begin id):
    a second table, or the same table deleted and re-created, whose transaction has the same name must
    not reach the first one's (closed) sessions - that failed every write with SESSION_CLOSED."""
    job = tmp_path / "probe_job.py"
    job.write_text(PROBE_JOB)
    seen = tmp_path / "seen.txt"
    txn = "2026-01-01.e000001"
    for n, table in enumerate(("a", "b", "a")):
        if n == 2:
            shutil.rmtree(tmp_path / "a")  # the table is deleted and its backfill runs again
        spec = dataclasses.replace(make_spec(tmp_path / table, txn, [], "2026-01-01", None),
                                   begin_id=uuid.uuid4().hex)  # what begin writes
        url = _spec_file(spec, tmp_path / f"{table}{n}.json")
        for attempt in (1, 2):  # a write and its retry
            out = run_connect(str(job), url, spark_connect, attempt=attempt, args=(str(seen),))
            assert out["txn"] == txn
    rows = [eval(line) for line in seen.read_text().splitlines()]  # noqa: S307 - our own repr()
    assert len(rows) == 6 and len({r[1] for r in rows}) == 6, rows
    assert all(r[2] == [] and r[3] == "unset" for r in rows), rows


CACHING_JOB = '''
from pyspark.sql import functions as F
from exactly_once.contracts import Counts


def compute(ctx):
    df = ctx.read().persist()  # and never unpersisted: the cache outlives the session on a shared server
    part = ctx.partitions[0]
    n, total = df.agg(F.count("*"), F.sum(F.col("v").cast("long"))).first()
    prev = ctx.read_prev_state("total long").first()
    total += prev["total"] if prev else 0
    ctx.spark.createDataFrame([(n, total)], "n long, total long").write.mode("overwrite").parquet(ctx.output_dir(part))
    ctx.spark.createDataFrame([(total,)], "total long").write.mode("overwrite").parquet(ctx.state_dir)
    files, size = ctx.input_stats()
    return Counts(records_in=n, records_out=n, rows_written={part: 1}, input_files=files, input_bytes=size)
'''


def test_a_reprocess_never_reads_the_cache_an_earlier_attempt_left_on_the_server(spark_connect, tmp_path):
    """Issue 25 class 9: a job that ``persist()``s its input and never unpersists it leaves the cached
    plan in the server's cache, which every session of the long-lived server shares. January's landing
    file is then corrected in place (same size) and January reprocessed: before, the reprocess read the
    OLD cached rows, published the old total and reported no stale successor. Now every attempt starts
    with the server's cache cleared: the new total is published and February is reported stale."""
    from exactly_once.ids import TxnRef
    from exactly_once.protocol.layout import Source
    from exactly_once.protocol.pipeline import IntervalRun
    from test_interval_runs import config, land, month, table

    cfg = config(tmp_path, stateful=True, start="2013-01-01", sources=Source(
        "s", format="csv", path="{start:%Y-%m}", options={"header": "true", "inferSchema": "true"}))
    land(tmp_path, "2013-01", "a.csv", [1, 2])
    land(tmp_path, "2013-02", "a.csv", [10])
    job = tmp_path / "caching_job.py"
    job.write_text(CACHING_JOB)

    def run(m: int, reprocess: bool = False) -> dict:
        interval = IntervalRun(cfg, month(m), storage_options={})
        began = interval.begin(refresh_sources=reprocess)
        txn = TxnRef.from_dict(began["txn"])
        try:
            run_connect(str(job), began["spec"], spark_connect)
            interval.pre_commit(txn)
            interval.validate(txn)
            return interval.commit(txn)
        finally:
            interval.abort(txn)

    run(1)
    run(2)
    assert table(cfg) == {"2013-01": (2, 3), "2013-02": (1, 13)}
    landed = tmp_path / "landing" / "s" / "2013-01" / "a.csv"
    before = landed.stat()
    landed.write_text("v\n5\n6\n")  # corrected in place: same size, other values
    os.utime(landed, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert landed.stat().st_size == before.st_size
    summary = run(1, reprocess=True)
    assert table(cfg) == {"2013-01": (2, 11), "2013-02": (1, 13)}
    assert summary["stale_intervals"] == [month(2).token]


def _write_attempt(job: str, spec_url: str, remote: str, attempt: int, args: tuple, out: str) -> None:
    """One write task attempt in its own process; its outcome (or error class) goes to ``out``."""
    try:
        res = {"ok": True, "result": run_connect(job, spec_url, remote, attempt=attempt, args=args)}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        res = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    Path(out).write_text(json.dumps(res))


def test_server_killed_mid_write_is_recovered_by_the_write_retry(tmp_path, monkeypatch):
    """A DEDICATED server (not the shared one) is killed with SIGKILL while attempt 1 writes: the client
    gives up after EO_SPARK_CONNECT_RETRY_SECONDS with the retryable SparkConnectLostError (pyspark
    alone retries a dead server for over 10 minutes), the server is restarted on the same port, the
    retry writes exactly the reference output with nothing of attempt 1 left, and the backfill goes on."""
    from conftest import start_connect_server
    from exactly_once.airflow.operators import FINAL
    from exactly_once.errors import SparkConnectLostError
    from tools import spark_connect as sc

    monkeypatch.setenv("EO_SPARK_CONNECT_RETRY_SECONDS", "5")
    server = start_connect_server(tmp_path / "server")
    try:
        days = ["2026-01-01", "2026-01-02"]
        generated = sample_data.generate(str(tmp_path / "landing"), days, events_per_day=300)
        job = tmp_path / "slow_first_job.py"
        first, started = tmp_path / "first", tmp_path / "started"
        job.write_text(SLOW_FIRST_JOB.format(job=str(JOB_PATH), first=str(first), started=str(started)))
        files = sorted(p for p in generated["files"] if f"dt={days[0]}" in p)
        spec = dataclasses.replace(make_spec(tmp_path, days[0], files, days[0], None), begin_id="b1")
        spec_url = _spec_file(spec, tmp_path / "d1.json")
        out = tmp_path / "attempt1.json"
        child = multiprocessing.get_context("spawn").Process(
            target=_write_attempt, args=(str(job), spec_url, server.url, 1, (), str(out)))
        child.start()
        temporary = os.path.join(spec.data_dir, f"dt={days[0]}", "_temporary")
        deadline = time.monotonic() + 180
        while not (started.exists() and os.path.isdir(temporary)) and child.is_alive():
            assert time.monotonic() < deadline, "the write never started"
            time.sleep(0.2)
        assert child.is_alive(), f"attempt 1 ended early: {out.read_text() if out.exists() else child.exitcode}"
        os.killpg(server.pid(), signal.SIGKILL)  # the server, mid-write
        child.join(120)  # bounded by the retry budget; pyspark's own policy would wait > 10 min
        alive = child.is_alive()
        if alive:
            child.kill()
            child.join()
        assert not alive, "the client kept retrying the dead server"
        res = json.loads(out.read_text())
        assert res["error"] == "SparkConnectLostError" and "EO_SPARK_CONNECT_RETRY_SECONDS" in res["message"], res
        assert not issubclass(SparkConnectLostError, FINAL), "Airflow must retry the write"
        assert os.path.isdir(temporary), "attempt 1 left no partial write: the test proves nothing"

        restarted = start_connect_server(tmp_path / "server", port=server.port)
        assert restarted.url == server.url
        server = restarted
        res = run_connect(str(job), spec_url, server.url, attempt=2)
        prev = check_against_reference(spec, res["counts"], {})
        assert not [f for f in _files(spec.staging_dir) if "_temporary" in f]  # attempt 1's partial write

        # the backfill goes on: day 2 on the restarted server reads day 1's state
        files = sorted(p for p in generated["files"] if f"dt={days[1]}" in p)
        spec2 = dataclasses.replace(make_spec(tmp_path, days[1], files, days[1],
                                              os.path.join(spec.staging_dir, "_state")), begin_id="b2")
        res2 = run_connect(str(JOB_PATH), _spec_file(spec2, tmp_path / "d2.json"), server.url)
        check_against_reference(spec2, res2["counts"], prev)
    finally:
        sc.stop(server)
    assert not sc.accepts(server.port)
