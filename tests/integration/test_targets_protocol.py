"""The protocol over the database and Redis targets: a real process killed at every failpoint, then
recovery and a retry as Airflow would run them; the target ends with exactly the committed rows, once
(issue 15: "the fault matrix on each sink, including between the DB commit and the log record")."""
from __future__ import annotations

import json
import uuid

import pytest

from eo_testing import need
from exactly_once import Interval, State
from protocol_helpers import CRASH_EXIT, commit_version, make_rows, open_sink, run_child
from target_helpers import REDIS_URL, Db, fresh_database, reachable

IV = Interval.daily("2026-01-01")
PART = f"dt={IV.day}"
FAILPOINTS = ["begin.after", "pre_commit.after", "commit.before_publish", "commit.mid_publish",
              "commit.after_publish"]
DDL = "CREATE TABLE t (k bigint NOT NULL, v varchar(64) NOT NULL, dt date NOT NULL, PRIMARY KEY (dt, k))"


@pytest.fixture(scope="module", params=["postgresql", "mysql", "redis"])
def target(request):
    """A target spec (JSON, for the child process) and a reader of what it holds: ``[(k, v)]``."""
    kind = request.param
    need(reachable({"postgresql": 5432, "mysql": 3306, "redis": 6379}[kind]), f"{kind} on 127.0.0.1")
    if kind == "redis":
        import redis

        ns = f"eo{uuid.uuid4().hex[:8]}"
        client = redis.Redis.from_url(REDIS_URL, decode_responses=True)

        def rows():
            keys = [k for k in client.scan_iter(f"{ns}:*") if ":_eo:" not in k]
            return sorted((int(k.rsplit(":", 1)[1]), json.loads(client.get(k))["v"]) for k in keys)

        yield {"kind": "redis", "namespace": ns, "key_columns": ["k"], "url": REDIS_URL}, rows, ns
        for k in client.scan_iter(f"{ns}:*"):
            client.delete(k)
        return
    gen = fresh_database(kind)
    url = next(gen)
    db = Db(url)
    yield ({"kind": "database", "url": url, "table": "t", "create_sql": DDL},
           lambda: sorted((int(k), v) for k, v in db.rows("t", "k, v")), db)
    db.close()
    next(gen, None)


def _reset(target, tmp_path):
    spec, rows, handle = target
    if isinstance(handle, Db):
        handle.run(f"DROP TABLE IF EXISTS {handle.q('t')}")
        handle.run(f"DROP TABLE IF EXISTS {handle.q('_eo_commits')}")
        handle.run(DDL)
    else:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        for k in client.scan_iter(f"{handle}:*"):
            client.delete(k)
    return spec, rows, str(tmp_path / "warehouse" / "t")


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_crash_at_every_failpoint_ends_with_the_rows_once(target, tmp_path, failpoint):
    spec, rows, url = _reset(target, tmp_path)
    first = make_rows("a", 5)
    ops = [{"op": "begin"}, {"op": "write", "files": {PART: [first]}}, {"op": "pre_commit"}, {"op": "commit"}]
    code, _, err = run_child(url, IV, ops, failpoints_spec=f"{failpoint}=crash", sink_kwargs={"target": spec})
    assert code == CRASH_EXIT, err
    sink = open_sink(url, target=spec)
    sink.recover(IV, abort_open=True)  # what the next begin, the teardown or `eo recover` does
    states = {e: s.state for e, s in sink.status(IV).items()}
    decided = failpoint.startswith("commit.") or failpoint == "pre_commit.after"  # no gate: recoverAndCommit
    assert (State.COMMITTED in states.values()) is decided, states
    expected = first if decided else []
    assert rows() == sorted(expected)
    if not decided:  # Airflow's retry of the run
        commit_version(sink, IV, {PART: [first]})
        assert rows() == sorted(first)
    again = make_rows("b", 3, start=100)  # a reprocess replaces the interval's rows, exactly once
    commit_version(sink, IV, {PART: [again]})
    assert rows() == sorted(again)
    assert all(s.state in (State.COMMITTED, State.ABORTED) and (s.state is State.ABORTED or s.published)
               for s in sink.status(IV).values())
