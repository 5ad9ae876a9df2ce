"""Smoke test of the benchmark's ``batched`` section (``python -m bench --only batched``) at 2 intervals.

In the deployments lane of ``make test`` (tools/test_lanes.py) beside the chaos and end-to-end tests: like
them it starts whole Airflow deployments (PostgreSQL metadata DB, scheduler, api-server, dag-processor) and
a Spark Connect server, and waits on them. The other bench sections' smoke tests: test_bench_smoke.py.
"""
from __future__ import annotations

import pytest
from eo_testing import need, run_bench

from tools.deployment import postgres_problem

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.airflow
@pytest.mark.timeout(900)
def test_batched_section_under_the_scheduler(tmp_path):
    """The ``batched`` section's year deployments at 2 intervals (its month deployments skipped): ours
    backfilled in ONE batch hosted by the first run's begin (the other run finishes at once), the naive
    Connect DAG over the same days, both equal to the oracle and to each other row for row, the hosting
    task split phase by phase from its log; then, in a fresh deployment, the same days as ONE range-triggered
    DAG run under the scheduler, equal to the oracle; nothing left running."""
    problem = postgres_problem()
    need(problem is None, problem or "")
    res = run_bench(tmp_path, "--only", "batched", "--backfill-batched", "2", "--backfill-month", "0",
                    "--events", "300", "--backfill-parallelism", "3", timeout=850)
    sec = res["sections"]["batched"]
    assert set(sec["deployments"]) == {"year", "year-range"} and sec["outputs_equal"], sec
    assert sec["parallelism"] == 3 and {d["parallelism"] for d in sec["deployments"].values()} == {3}
    ranged = sec["deployments"]["year-range"]
    assert ranged["checks"]["ours_vs_oracle"] == {"equal": True, "rows": ranged["checks"]["ours_vs_oracle"]["rows"]}
    assert ranged["checks"]["ours_vs_oracle"]["rows"] > 0
    one = ranged["variants"]["range"]
    [range_host] = one["batch"]  # the range run's begin hosted both days: one Spark job
    assert range_host["parsed"] and range_host["intervals"] == 2 and range_host["job_reported"] > 0, range_host
    assert one["span"]["runs"] == 1 and one["wall_seconds"] > 0
    for name, d in sec["deployments"].items():  # issue 46: each published version announced once, batched or ranged
        told = d["announcements"]
        assert told["each_once"] and told["asset_events"] == told["lineage_outputs"] == d["intervals"] == 2, (name, told)
    dep = sec["deployments"]["year"]
    assert dep["checks"]["ours_vs_naive"]["equal"] and dep["checks"]["ours_vs_naive"]["rows"] > 0, dep["checks"]
    assert dep["warmup_seconds"] > 0
    ours, naive = dep["variants"]["batched"], dep["variants"]["naive"]
    assert ours["intervals"] == naive["intervals"] == 2 and ours["span"]["runs"] == 2
    [host] = ours["batch"]  # one batch of both intervals, one Spark job
    assert host["parsed"] and host["intervals"] == 2 and host["job_reported"] > 0, host
    assert all(host[p] > 0 for p in ("write_job", "validate", "commit")), host
    # the second run finished at once: its begin ran, its write never did (the batch's job wrote it)
    assert "app_pv.begin" in ours["timings"]["tasks"] and "app_pv.write" not in ours["timings"]["tasks"], ours
    assert ours["timings"]["per_interval"]["n"] == 1
    assert ours["where_time_goes"]["total: created -> the last run's end"] > 0
    assert set(naive["where_time_goes"]) >= {"task write"}
    s = sec["summary"]
    assert s["year_batched_seconds"] > 0 and s["year_naive_seconds"] > 0 and s["year_intervals"] == 2
    assert s["year_range_seconds"] > 0 and s["year_range_intervals"] == 2
    # the plain-Spark floor over the same days, on the section's server, equal to the oracle; each way over it
    [floor] = sec["floor"].values()
    assert floor["outputs_equal"] and floor["intervals"] == 2 and floor["server_cpu_seconds"] > 0, floor
    assert all(s[f"year_{way}_over_floor"] > 0 for way in ("batched", "naive", "range")), s
    # memory: the JVM's highest RSS so far and the largest task process's (a batch's host) per backfill
    assert ours["spark_peak_rss_mb"] > 0 and ours["cpu"]["rss_peak_mb"]["task processes"]["max_process"] > 0, ours
    import psycopg2

    from tools.deployment import PG, marked_pids, port_open

    for d in (dep, ranged):
        with psycopg2.connect(dbname="postgres", connect_timeout=3, **PG) as conn, conn.cursor() as cur:
            cur.execute("select 1 from pg_database where datname = %s", (d["deployment"]["metadata_db"],))
            assert cur.fetchall() == []
        assert marked_pids(f"EO_DEPLOYMENT_ID={d['deployment']['id']}".encode()) == set()
    assert not port_open(int(sec["server"]["url"].rsplit(":", 1)[1]))
