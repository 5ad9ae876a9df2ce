"""Smoke test of the benchmark code paths (``python -m bench``) with tiny sizes.

Checks that every measured section lands in the results JSON with positive numbers, that the two-phase
output equals the plain write (row count and a checksum over the sorted rows), that recovery committed
without recomputing, that the scheduler backfills (over Spark Connect and spark-submit) publish the same
rows as the naive DAGs, and that the naive baseline DAGs parse. No timing thresholds: timings on a shared
machine are not test material.
"""
from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
import pytest
from conftest import ROOT
from eo_testing import need, run_bench

from tools.deployment import postgres_problem

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _positive(node, where: str = "") -> int:
    """Assert every timing (a stats dict's median / samples) below ``node`` is > 0; return how many."""
    seen = 0
    if isinstance(node, dict):
        if "median" in node and "samples" in node:
            assert node["median"] > 0 and all(s > 0 for s in node["samples"]), where
            return 1
        for k, v in node.items():
            seen += _positive(v, f"{where}.{k}")
    return seen


def _sorted_rows_digest(path: str) -> tuple[int, str]:
    table = pq.read_table(path)
    rows = sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())
    return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()


def test_bench_sections_on_tiny_sizes(tmp_path):
    res = run_bench(tmp_path, "--only", "write,commit,recovery,validate", "--sizes", "10000", "--files", "10",
                    "--write-files", "4", "--reps", "1", "--warmup", "0", "--validate-events", "2000")
    sections = res["sections"]
    assert set(sections) == {"write", "commit", "recovery", "validate"}
    for name, sec in sections.items():
        assert _positive(sec, name) > 0, f"no timings in {name}"
        assert sec["section_seconds"] > 0

    write = sections["write"]["sizes"]["10000"]
    assert set(write["variants"]) == {"plain", "v1", "v2", "two_phase", "two_phase_no_checksums", "two_phase_delta"}
    assert all(v["ratio_to_plain"] > 0 for v in write["variants"].values())
    assert write["outputs_equal"]
    plain = _sorted_rows_digest(write["outputs"]["plain"]["path"])
    assert plain[0] == 10000
    for variant in ("two_phase", "two_phase_no_checksums", "two_phase_delta", "v1", "v2"):
        assert _sorted_rows_digest(write["outputs"][variant]["path"]) == plain, variant
        assert write["outputs"][variant]["files"] == write["outputs"]["plain"]["files"] == 4

    commit = sections["commit"]["backends"]
    assert set(commit) == {"local", "s3", "local-delta", "s3-delta"}  # files target and Delta table
    assert all(commit[b]["10"]["commit"]["median"] > 0 for b in commit)

    rec = sections["recovery"]["sizes"]["10000"]
    assert rec["all_committed_without_recompute"] and rec["ratio"] > 0
    assert any("recovered and committed" in a for a in rec["actions"])

    val = sections["validate"]
    assert val["share_of_write"] > 0 and val["gx_import_fresh_process"]["median"] > 0 and val["rows_out"] > 0


@pytest.mark.airflow
@pytest.mark.timeout(1200)
def test_backfill_section_under_the_scheduler(tmp_path):
    """The Spark Connect mode, one timed interval (+ the warm-up): a server the section starts, ours
    (per interval: EO_PV_MAX_BATCH=1) as its client and the naive PySparkOperator DAG, outputs equal row
    for row, nothing left running. (The spark-submit mode runs the same code with no server; CI runs one
    mode to stay within its time budget - ``python -m bench --only backfill`` runs both.)"""
    problem = postgres_problem()
    need(problem is None, problem or "")
    res = run_bench(tmp_path, "--only", "backfill", "--backfill", "1", "--backfill-modes", "connect", "--events", "300",
                    timeout=1100)
    sec = res["sections"]["backfill"]
    assert set(sec["modes"]) == {"connect"} and sec["outputs_equal"]
    ours = {"begin", "write", "pre_commit", "validate", "commit"}  # abort: skipped by a clean commit, never started
    for mode, naive, apps in (("connect", "naive_pv_connect", 0),):
        m = sec["modes"][mode]
        assert m["outputs_equal"] and m["rows_compared"] > 0, mode  # 2 days, both DAGs, row for row
        for dag, tasks in (("pv_pipeline", ours), (naive, {"write"})):
            r = m[dag]
            assert r["intervals"] == 1 and r["per_interval"]["n"] == 1, r
            assert {t.split(".")[-1] for t in r["tasks"]} == tasks, r["tasks"]
            # a Spark Connect client starts no Spark application
            assert r["spark_app_starts_per_run"] == [apps, apps], (mode, dag, r)
            assert r["total_seconds"] > 0 and r["between_tasks"]["n"] == 1
            assert set(r["where_time_goes"]) >= {"task write", "hand-offs between tasks"}
        assert m["ratio"] > 0 and m["ratio_of_medians"] > 0
    assert sec["goals"]["ours_connect_year_estimate_minutes"] > 0
    # the runs' Airflow metadata DBs are dropped; no process of a deployment, no Connect server outlives it
    import psycopg2

    from tools.deployment import PG, marked_pids, port_open

    for m in sec["modes"].values():
        with psycopg2.connect(dbname="postgres", connect_timeout=3, **PG) as conn, conn.cursor() as cur:
            cur.execute("select 1 from pg_database where datname = %s", (m["deployment"]["metadata_db"],))
            assert cur.fetchall() == []
        assert marked_pids(f"EO_DEPLOYMENT_ID={m['deployment']['id']}".encode()) == set()
    assert not port_open(int(sec["modes"]["connect"]["server"]["url"].rsplit(":", 1)[1]))


def test_naive_baseline_dags_parse(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    for name in ("naive_pv", "naive_pv_connect", "warmup_connect"):
        (tmp_path / f"{name}.py").symlink_to(ROOT / "bench" / "dags" / f"{name}.py")
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    for dag_id, operator in (("naive_pv", "SparkSubmitOperator"), ("naive_pv_connect", "PySparkOperator")):
        dag = bag.dags[dag_id]
        assert [t.task_id for t in dag.tasks] == ["write"]
        assert type(dag.tasks[0]).__name__ == operator
    assert type(bag.dags["bench_warmup"].timetable).__name__ == "NullTimetable"  # runs only when triggered


def test_dbload_section_on_tiny_sizes(tmp_path):
    from target_helpers import reachable

    need(reachable(5432) and reachable(3306), "PostgreSQL and MariaDB must run on loopback")
    res = run_bench(tmp_path, "--only", "dbload", "--db-sizes", "3000", "--reps", "1", "--warmup", "0")
    sec = res["sections"]["dbload"]
    assert set(sec["databases"]) == {"postgresql", "mysql"}
    for kind, db in sec["databases"].items():
        r = db["sizes"]["3000"]
        assert set(r["variants"]) == {"ours", "bulk", "naive"}, kind
        assert r["outputs_equal"] and all(d[0] == 3000 for d in r["digest"].values()), kind
        assert all(v["rows_per_s"] > 0 and v["ratio_to_bulk"] > 0 for v in r["variants"].values()), kind
    assert _positive(sec, "dbload") > 0


def test_limit_section_the_plain_spark_floor(tmp_path, spark_connect):
    """``--only limit`` on the shared Connect server (no JVM start of its own): the plain-Spark floor over 2 days
    (2,000 events a day: every kind of malformed line the generator rotates through appears) equals the oracle
    row for row, and the run reports its time and the server's CPU."""
    res = run_bench(tmp_path, "--only", "limit", "--limit-days", "2", "--events", "2000", "--spark-remote", spark_connect)
    sec = res["sections"]["limit"]
    f = sec["floor"]
    assert sec["outputs_equal"] and f["outputs_equal"] and f["intervals"] == 2 and f["rows"] > 0, f
    assert f["wall_seconds"] > 0 and f["cpu"]["wall_seconds"] > 0 and sec["server"]["url"] == spark_connect
    assert f["server_cpu_seconds"] is None  # a server it did not start: its pid is unknown
    out = tmp_path / "work" / "floor-limit"
    assert len(list(out.glob("dt=*/*.parquet"))) == 2  # one file a day
