"""Issue 29: pv_pipeline on the CeleryExecutor - two workers that share no disk, all state on S3.

One module-scoped :class:`tools.deployment.Deployment` (``executor="celery"``, ``storage="s3"``): Redis as
the broker, PostgreSQL as metadata DB and result backend, api-server, scheduler, dag-processor and two
``airflow celery worker`` processes, each with its own hostname and private AIRFLOW_HOME, TMPDIR, working,
log and reports directories. ``EO_DATA_ROOT`` is on a loopback moto S3 server; ``spread=True`` routes the
phases of every interval to the two workers in turn (a cluster policy), so each interval's
begin / write / pre_commit / validate / commit / abort hop from one machine to the other.

The write task's ``spark-submit`` is the stand-in of :mod:`tools.s3_standin` with
``EO_STANDIN_COMPUTE=oracle``: pip's PySpark has no s3a jars, and a JVM per write costs 20-60 s on this
shared 2-core machine; the stand-in is the tests' ``fault_helpers.stage_write`` (the job's output contract
computed by ``tests/reference_pv.py``, reading the frozen inputs and the predecessor's state from S3). The
real job through the same stand-in (Spark on a private local mirror, uploaded) is the stand-in's default.
"""
from __future__ import annotations

import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from conftest import need

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from pv_checks import expected_rows  # noqa: E402

from exactly_once.ids import Interval  # noqa: E402
from exactly_once.ops.maintenance import gc  # noqa: E402
from exactly_once.storage import storage_for  # noqa: E402
from exactly_once.protocol.transaction import TwoPhaseCommitSink  # noqa: E402
from exactly_once.records.txlog import State  # noqa: E402
from tools.celery_stack import REDIS_HOST, REDIS_PORT  # noqa: E402
from tools.deployment import Deployment, port_open, postgres_problem  # noqa: E402
from tools.sample_data import generate  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.s3, pytest.mark.timeout(1500)]  # the fleet starts in the first test
TODAY = datetime.now(timezone.utc).date()
DAYS = [(TODAY - timedelta(days=2 - i)).isoformat() for i in range(2)]  # the last is yesterday: a backfill (and the DAG's end)
PHASES = ("begin", "write", "pre_commit", "validate", "commit")  # abort: skipped by a clean commit (no task start)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    problem = postgres_problem()
    need(problem is None, problem or "")
    need(port_open(REDIS_PORT), f"Redis is not reachable on {REDIS_HOST}:{REDIS_PORT}")
    need(shutil.which("moto_server", path=str(Path(sys.executable).parent)) is not None, "no moto_server")
    run = tmp_path_factory.mktemp("celery-fleet")
    deploy = Deployment(run / "deployment", purpose="celery_fleet", executor="celery", storage="s3", spread=True,
                        settings={"EO_PV_START": DAYS[0], "EO_PV_END": DAYS[-1], "EO_RETRIES": "2", "EO_RETRY_DELAY_SECONDS": "2",
                                  "EO_PREDECESSOR_POKE_SECONDS": "5", "EO_STANDIN_COMPUTE": "oracle",
                                  "EO_PV_MAX_BATCH": "1"})  # per-interval runs: their phases spread over workers
    oracle = run / "oracle"  # the harness's copy of the landing data: the reference reads it, no worker does
    try:
        deploy.start(["pv_pipeline"])
        generate(str(oracle / "landing"), DAYS, seed=29, events_per_day=300)
        store, root = storage_for(f"{deploy.data_url}/landing", **deploy.s3.options())
        for path in sorted((oracle / "landing").rglob("*.jsonl")):
            store.write_atomic(store.join(root, path.relative_to(oracle / "landing").as_posix()), path.read_bytes())
        deploy.backfill("pv_pipeline", DAYS[0], DAYS[-1])
        deploy.wait("both runs to finish", lambda: len(deploy.runs("pv_pipeline")) == 2 and all(
            s in ("success", "failed") for s in deploy.runs("pv_pipeline").values()), 720)
        sink = TwoPhaseCommitSink.at(f"{deploy.data_url}/warehouse/app_pv", pipeline="pv_pipeline", sink="app_pv",
                                     storage_options=deploy.s3.options())
        yield SimpleNamespace(deploy=deploy, oracle=oracle, sink=sink)
    finally:
        deploy.stop()


def hosts_by_day(deploy: Deployment) -> dict[str, dict[str, str]]:
    """day -> phase -> the worker that ran it: ``task_instance.hostname``, else (Airflow left it empty for a
    task that ran: seen once on a loaded machine) the one worker whose private log dir holds the task's log."""
    rows = deploy.db.query("select dr.data_interval_start, ti.run_id, ti.task_id, ti.hostname from task_instance ti "
                           "join dag_run dr using (dag_id, run_id) where ti.dag_id = 'pv_pipeline'")
    out: dict[str, dict[str, str]] = {}
    for start, run_id, task_id, host in rows:
        if not host:
            logged = [w for w in deploy.celery.names if any((deploy.celery.home(w) / "logs" / "dag_id=pv_pipeline" /
                      f"run_id={run_id}" / f"task_id={task_id}").glob("attempt=*.log"))]
            host = logged[0] if len(logged) == 1 else ""
        out.setdefault(start.astimezone(timezone.utc).date().isoformat(), {})[task_id.rsplit(".", 1)[-1]] = host
    return out


def test_the_phases_of_each_interval_ran_on_different_workers(fleet):
    deploy = fleet.deploy
    assert deploy.runs("pv_pipeline") == {d: "success" for d in DAYS}
    workers = deploy.celery.names
    for day, hosts in hosts_by_day(deploy).items():
        assert set(hosts) == {*PHASES, "abort"} and not hosts.pop("abort"), (day, hosts)  # never started
        assert set(hosts.values()) == set(workers), (day, hosts)
        # every hand-off crossed machines: what one phase left behind, the next one found on S3 only
        for a, b in zip(PHASES, PHASES[1:]):
            assert hosts[a] != hosts[b], (day, a, b, hosts)


def test_outputs_equal_the_oracle_and_nothing_is_left_after_gc(fleet):
    sink, expected = fleet.sink, expected_rows(fleet.oracle, DAYS)
    for day in DAYS:
        states = {e: st.state for e, st in sink.status(Interval.daily(day)).items()}
        assert list(states.values()) == [State.COMMITTED], (day, states)
        rows = []
        for path in sink.live_files(f"dt={day}"):
            with sink.storage.open(path, "rb") as f:
                rows += pq.read_table(f).to_pylist()
        got = {(r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows}
        assert len(got) == len(rows) and got == expected[day], day
    gc(sink, min_age=0)
    staging = sink.storage.join(sink.home, "_staging")
    assert not (sink.storage.exists(staging) and sink.storage.walk_files(staging)), "staging left behind"
    for day in DAYS:
        names = sorted(n for n in sink.storage.list_names(sink.storage.join(sink.table, f"dt={day}")))
        live = sorted(p.rsplit("/", 1)[-1] for p in sink.live_files(f"dt={day}"))
        assert names == sorted(["_MANIFEST.json", "_SUCCESS", *live]), (day, names)


def test_the_workers_share_nothing_local(fleet):
    """Each worker ran with its own temp, home and log dirs; the data root and the reports are on S3; no
    table, staging, log or report byte of the pipeline is on the local disk; each worker's task logs (in
    its private log folder) are exactly those of the task instances that name it as their host."""
    deploy = fleet.deploy
    assert deploy.data_url.startswith("s3://")
    envs = deploy.worker_env
    assert sorted(envs) == sorted(deploy.celery.names)
    for name, env in envs.items():
        assert env["EO_DATA_ROOT"] == deploy.data_url and env["EO_WORKER_HOSTNAME"] == name
        assert env["EO_STORAGE_CONN_ID"] == "eo_s3" and "AIRFLOW_CONN_EO_S3" in env
        assert env["EO_REPORTS_DIR"] == deploy.env["EO_REPORTS_DIR"] and env["EO_REPORTS_DIR"].startswith("s3://")
    for key in ("TMPDIR", "AIRFLOW_HOME", "AIRFLOW__LOGGING__BASE_LOG_FOLDER"):
        paths = [Path(envs[n][key]) for n in envs]
        assert len(set(paths)) == len(paths), key
        for a in paths:  # none inside another
            assert not any(b != a and (b in a.parents or a in b.parents) for b in paths), key
    run_dir = deploy.run_dir
    assert not (run_dir / "data").exists()
    leaks = [p for p in run_dir.rglob("*") if p.name in ("_job.json", "_counts.json", "_MANIFEST.json")
             or p.suffix in (".parquet", ".html") or "_exactly_once" in p.parts or "data_docs" in p.parts
             or p.name.startswith(("eo-standin-", "eo-data-docs-"))]
    assert not leaks, leaks
    hosts = hosts_by_day(deploy)
    for name in deploy.celery.names:
        logs = Path(envs[name]["AIRFLOW__LOGGING__BASE_LOG_FOLDER"])
        ran = {p.parent.name.split("=", 1)[1].rsplit(".", 1)[-1] + "@" + p.parent.parent.name.split("__", 1)[1][:10]
               for p in logs.rglob("attempt=*.log")}
        mine = {f"{phase}@{(datetime.fromisoformat(day) + timedelta(days=1)).date()}"
                for day, h in hosts.items() for phase, host in h.items() if host == name}
        assert ran == mine, (name, ran, mine)


def test_reports_written_on_one_worker_are_served_by_the_api_server(fleet):
    """validate (on one worker) publishes its Data Docs pages, and commit (on the other) its run summary,
    into the reports site on S3 that the API server's plugin reads: every validation's page, as the
    "Data quality report" link names it, is readable there, and the index lists every run."""
    from exactly_once import reports
    from exactly_once.airflow.files import read_url_under

    root = fleet.deploy.env["EO_REPORTS_DIR"]
    options = fleet.deploy.s3.options()
    index = read_url_under(root, "data_docs/", options).content.decode()
    for day in DAYS:
        (status,) = fleet.sink.status(Interval.daily(day)).values()
        page = status.records["validated"]["summary"]["report"]
        assert page.startswith(f"{root}/data_docs/validations/"), page
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("EO_REPORTS_DIR", root)
            link = reports.report_link(page)
        assert link.startswith("/eo/reports/data_docs/validations/"), link
        assert read_url_under(root, link[len("/eo/reports/"):], options).media_type == "text/html"
        assert f"pv_pipeline.{fleet.sink.ref(Interval.daily(day), 1).name}" in index
        summary = read_url_under(root, f"runs/pv_pipeline/{fleet.sink.ref(Interval.daily(day), 1).name}.json",
                                 options)
        assert summary.content.startswith(b"{")
