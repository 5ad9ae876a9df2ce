"""Ownership at the target (issue 25, classes 1 and 8).

A database table, a Redis namespace, a Delta table or an S3 prefix can be pointed at by a second pipeline,
or by the same pipeline names with another log. The target location is claimed by the first owner before
anything is decided; the second is refused at its begin (OwnershipError naming both), so nothing of the
first is lost and the second never reports "published" for rows it never loaded. ``eo recover|gc|rollback``
act through the bound target (a database pipeline's decided commit lands in the database), and a rollback
refuses a version of another interval.
"""
from __future__ import annotations

import json
import uuid

import pytest

from conftest import make_bucket
from eo_testing import need
from exactly_once import Interval, OwnershipError, State
from exactly_once.cli import main as eo
from exactly_once.ops.rollback import parse_version
from protocol_helpers import CRASH_EXIT, commit_version, make_rows, open_sink, run_child, visible_rows, write_output
from target_helpers import REDIS_URL, Db, fresh_database, reachable

IV, IV2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")
PART, PART2 = f"dt={IV.day}", f"dt={IV2.day}"
DDL = "CREATE TABLE t (k bigint NOT NULL, v varchar(64) NOT NULL, dt date NOT NULL, PRIMARY KEY (dt, k))"
PORTS = {"postgresql": 5432, "mysql": 3306, "redis": 6379}


@pytest.fixture(scope="module")
def databases():
    """One fresh PostgreSQL and one MariaDB database for the module (created on first use)."""
    made: dict[str, tuple] = {}

    def get(kind: str) -> str:
        if kind not in made:
            need(reachable(PORTS[kind]), f"{kind} on 127.0.0.1")
            gen = fresh_database(kind)
            made[kind] = (next(gen), gen)
        return made[kind][0]

    yield get
    for _, gen in made.values():
        next(gen, None)


class World:
    """Two owners of one target: ``sink(tag, pipeline)`` opens the sink of owner ``tag`` (its own log);
    ``rows()`` is what the shared target holds, sorted ``[(k, v)]``."""

    def __init__(self, kind: str, tmp_path, databases, request) -> None:
        self.kind, self.tmp = kind, tmp_path
        self.spec: dict | None = None
        if kind in ("postgresql", "mysql"):
            self.db = Db(databases(kind))
            for t in ("t", "_eo_commits", "_eo_claims"):
                self.db.run(f"DROP TABLE IF EXISTS {self.db.q(t)}")
            self.db.run(DDL)
            self.spec = {"kind": "database", "url": self.db.url, "table": "t"}
        elif kind == "redis":
            need(reachable(PORTS[kind]), "redis on 127.0.0.1")
            self.ns = f"eo{uuid.uuid4().hex[:8]}"
            self.spec = {"kind": "redis", "namespace": self.ns, "key_columns": ["k"], "url": REDIS_URL}
        if kind == "s3files":
            self.table = f"s3://{make_bucket(request.getfixturevalue('s3_server'))}/warehouse/t"
        else:
            self.table = str(tmp_path / "warehouse" / "t")

    def sink(self, tag: str, pipeline: str = "p", **kwargs):
        if self.spec is not None:  # the target is shared; each owner has its own table (its log)
            return open_sink(str(self.tmp / tag / "t"), pipeline=pipeline, target=self.spec, **kwargs)
        if self.kind == "delta":
            kwargs["table_format"] = "delta"
        home = str(self.tmp / tag / "home") if not self.table.startswith("s3://") \
            else self.table[len("s3://"):].rsplit("/", 2)[0] + f"/{tag}_home"
        return open_sink(self.table, pipeline=pipeline, home=home, **kwargs)

    def rows(self, probe) -> list[tuple]:
        if self.kind in ("postgresql", "mysql"):
            return sorted((int(k), v) for k, v in self.db.rows("t", "k, v"))
        if self.kind == "redis":
            import redis

            client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
            keys = [k for k in client.scan_iter(f"{self.ns}:*") if ":_eo:" not in k]
            return sorted((int(k.rsplit(":", 1)[1]), json.loads(client.get(k))["v"]) for k in keys)
        return visible_rows(probe, PART)

    def close(self) -> None:
        if self.kind == "redis":
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            for k in client.scan_iter(f"{self.ns}:*"):
                client.delete(k)
        if hasattr(self, "db"):
            self.db.close()


# ids named by the conformance kinds: `-k delta-local` (make mutants' rows) selects them
@pytest.fixture(params=["postgresql", "mysql", "redis", pytest.param("delta", id="delta-local"),
                        pytest.param("s3files", id="files-s3", marks=pytest.mark.s3)])
def world(request, tmp_path, databases):
    w = World(request.param, tmp_path, databases, request)
    yield w
    w.close()


@pytest.mark.parametrize("names", ["another pipeline", "same names, another log"])
def test_a_second_owner_is_refused_before_deciding_and_the_first_keeps_its_rows(world, names):
    first = world.sink("a", pipeline="p")
    rows_a = make_rows("a", 4)
    commit_version(first, IV, {PART: [rows_a]})
    second = world.sink("b", pipeline="q" if names == "another pipeline" else "p")
    with pytest.raises(OwnershipError) as err:  # today: its epoch 1 is taken for "already published"
        commit_version(second, IV, {PART: [make_rows("b", 3, start=100)]})
    message = str(err.value)
    assert first.home in message and second.home in message, message  # names both owners
    assert not [s for s in second.status(IV).values() if "outcome" in s.records]  # nothing decided
    assert world.rows(first) == rows_a
    again = make_rows("a2", 2, start=50)  # the owner goes on as before
    commit_version(first, IV, {PART: [again]})
    assert world.rows(first) == again


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
@pytest.mark.parametrize("other", ["qualified name", "another commit table"])
def test_a_database_table_is_claimed_by_its_identity(kind, other, tmp_path, databases, request):
    """``t`` and ``<schema>.t`` are one table, and so is ``t`` with another commit table: the second owner is
    refused before deciding (today: each spelling / commit table had its own claim; B's replace deleted
    A's rows)."""
    w = World(kind, tmp_path, databases, request)
    try:
        first = w.sink("a", pipeline="p")
        rows_a = make_rows("a", 3)
        commit_version(first, IV, {PART: [rows_a]})
        schema = w.db.run("SELECT current_schema()" if kind == "postgresql" else "SELECT DATABASE()")[0][0]
        w.spec = dict(w.spec, **({"table": f"{schema}.t"} if other == "qualified name"
                                 else {"commit_table": "_eo_other"}))
        second = w.sink("b", pipeline="q")
        with pytest.raises(OwnershipError, match="'p'") as refused:
            commit_version(second, IV, {PART: [make_rows("b", 2, start=100)]})
        assert f"log at {first.home}," in str(refused.value)  # where the holder's log is: the advice starts there
        assert not [s for s in second.status(IV).values() if "outcome" in s.records]
        assert w.rows(first) == rows_a
    finally:
        w.db.run(f"DROP TABLE IF EXISTS {w.db.q('_eo_other')}")
        w.close()


def test_recovery_never_commits_the_second_owners_failed_attempt(world):
    """The second owner began first (its gate failed); the first owner's publish at the same epoch must
    not make recovery take the second's attempt for live and commit it."""
    gated = world.sink("b", pipeline="q")
    txn = gated.begin(IV)
    write_output(gated, txn, {PART: [make_rows("bad", 3)]})
    gated.pre_commit(txn)
    assert gated.record_validation(txn, False, {"why": "gate failed"}) is False
    other = world.sink("a", pipeline="p")
    with pytest.raises(OwnershipError):  # today: it publishes epoch 1, and the marker matches q's epoch 1
        commit_version(other, IV, {PART: [make_rows("a", 2)]})
    gated.recover(IV)
    assert gated.status(IV)[txn.epoch].state is State.ABORTED
    assert world.rows(gated) == []


@pytest.mark.parametrize("kind", ["postgresql", "redis"])
def test_a_sink_keeps_its_bound_target(kind, tmp_path, databases, request):
    w = World(kind, tmp_path, databases, request)
    try:
        commit_version(w.sink("a"), IV, {PART: [make_rows("a", 2)]})
        moved = dict(w.spec, **({"table": "t2"} if kind == "postgresql" else {"namespace": w.ns + "x"}))
        with pytest.raises(OwnershipError, match="keeps its target"):
            open_sink(str(tmp_path / "a" / "t"), pipeline="p", target=moved).begin(IV2)
        with pytest.raises(OwnershipError, match="keeps its target"):  # nor publish into files instead
            open_sink(str(tmp_path / "a" / "t"), pipeline="p").begin(IV2)
    finally:
        w.close()


@pytest.mark.parametrize("kind", ["postgresql", "redis"])
def test_a_sink_keeps_the_settings_that_decide_what_it_publishes(kind, tmp_path, databases, request):
    """``eo recover`` finishes a decided epoch with the bound spec: a sink reopened with another mode / keys
    is refused before deciding anything (today: accepted, and recover published its epoch as an upsert);
    a tunable setting (retries) may change."""
    w = World(kind, tmp_path, databases, request)
    try:
        home = str(tmp_path / "a" / "t")
        pg = kind == "postgresql"
        first = dict(w.spec, mode="upsert", key_columns=["dt", "k"]) if pg else w.spec
        commit_version(open_sink(home, pipeline="p", target=first), IV, {PART: [make_rows("a", 3)]})
        other = w.spec if pg else dict(w.spec, key_columns=["k", "v"])
        with pytest.raises(OwnershipError, match=f"{'mode' if pg else 'key_columns'}=.*restore the configuration"):
            open_sink(home, pipeline="p", target=other).begin(IV2)
        tuned = dict(first, **({"retries": 5} if pg else {"max_conflicts": 7}))
        again = make_rows("a2", 2, start=10)
        commit_version(open_sink(home, pipeline="p", target=tuned), IV2, {PART2: [again]})
        assert set(again) <= set(w.rows(None))
    finally:
        w.close()


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
@pytest.mark.parametrize("command", ["recover", "gc", "rollback"])
def test_eo_commands_finish_a_decided_commit_into_the_database(kind, command, tmp_path, databases, request,
                                                              capsys):
    w = World(kind, tmp_path, databases, request)
    secret = f"pw-{uuid.uuid4().hex[:8]}"
    if kind == "postgresql":  # trust auth ignores a password; it must never be written down
        scheme, rest = w.db.url.split("://", 1)
        w.spec["url"] = f"{scheme}://{rest.replace('@', f':{secret}@', 1)}"
    url = str(tmp_path / "a" / "t")
    try:
        first = make_rows("e1", 3)
        commit_version(w.sink("a"), IV, {PART: [first]})
        second = make_rows("e2", 4, start=10)
        ops = [{"op": "begin"}, {"op": "write", "files": {PART: [second]}}, {"op": "pre_commit"}, {"op": "commit"}]
        code, _, err = run_child(url, IV, ops, failpoints_spec="commit.before_publish=crash",
                                 sink_kwargs={"target": w.spec, "pipeline": "p"})
        assert code == CRASH_EXIT, err
        assert w.rows(None) == first  # decided, not yet published
        if command == "rollback":  # it first finishes the decided commit, then republishes e1 (kept copies)
            assert eo(["rollback", url, "--interval", IV.start.isoformat(), "--to", "e1"]) == 0
            assert "is live again" in capsys.readouterr().out
            assert w.rows(None) == first
            assert w.sink("a").status(IV)[2].published
        else:
            args = [command, url] + (["--min-age", "0"] if command == "gc" else [])
            assert eo(args) == 0
            assert w.rows(None) == second  # today: published into files beside the log, never the database
        sink = w.sink("a")
        assert all(s.published for s in sink.status(IV).values() if s.state is State.COMMITTED)
        assert not list((tmp_path / "a" / "t").glob("dt=*"))  # nothing went to a files target
        records = "".join(p.read_text() for p in (tmp_path / "a").rglob("_owner.json"))
        assert "database" in records and secret not in records
    finally:
        w.close()


@pytest.mark.parametrize("kind", ["files-local"])  # the sink's own table: make mutants' files-local row runs it
def test_rollback_refuses_a_version_of_another_interval(tmp_path, capsys, kind):
    url = str(tmp_path / "warehouse" / "t")
    sink = open_sink(url)
    commit_version(sink, IV, {PART: [make_rows("a1", 2)]})
    a2 = commit_version(sink, IV, {PART: [make_rows("a2", 3, start=10)]})
    b1 = commit_version(sink, IV2, {PART2: [make_rows("b1", 2, start=20)]})
    commit_version(sink, IV2, {PART2: [make_rows("b2", 2, start=30)]})
    assert eo(["rollback", url, "--interval", IV.start.isoformat(), "--to", b1.name]) == 1
    assert "not of" in capsys.readouterr().err
    assert sorted(sink.status(IV)) == [1, 2] and sink.live_version(PART) == a2.name  # nothing rolled back
    assert parse_version(sink.ref(IV, 1).name, IV) == 1


OLD_COMMITS_DDL = ("CREATE TABLE _eo_commits (target varchar(255) NOT NULL, interval_token varchar(64) NOT NULL, "
                   "epoch bigint NOT NULL, pipeline varchar(128), sink varchar(128), interval_start {ts}, "
                   "interval_end {ts}, partitions {text}, rows_loaded bigint, committed_at {ts}, "
                   "PRIMARY KEY (target, interval_token))")


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "redis"])
def test_a_target_published_before_claims_existed_still_refuses_another_pipeline(kind, tmp_path, databases,
                                                                                 request):
    """A marker written before claims and owner ids existed (an old commit table without the owner columns,
    a marker hash without ``owner``) still names its pipeline: another pipeline's first claim is refused."""
    w = World(kind, tmp_path, databases, request)
    old = [(0, "old-0"), (1, "old-1")]
    try:
        if kind == "redis":
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            for k, v in old:
                client.set(f"{w.ns}:{PART}:{k}", json.dumps({"v": v}))
            client.hset(f"{w.ns}:_eo:marker:{IV.token}", mapping={"epoch": 1, "pipeline": "old", "sink": "t"})
        else:
            pg = kind == "postgresql"
            w.db.run(f"DROP TABLE IF EXISTS {w.db.q('_eo_commits')}")
            w.db.run(OLD_COMMITS_DDL.format(ts="timestamptz" if pg else "datetime(6)", text="text"))
            for k, v in old:
                w.db.run("INSERT INTO t (k, v, dt) VALUES (%s, %s, %s)", (k, v, IV.day))
            w.db.run("INSERT INTO _eo_commits (target, interval_token, epoch, pipeline, sink) "
                     "VALUES ('t', %s, 1, 'old', 't')", (IV.token,))
        sink = w.sink("a", pipeline="p")
        if kind != "redis":  # the table is old's: our first claim finds its marker, whatever interval we begin
            with pytest.raises(OwnershipError, match="'old'"):
                commit_version(sink, IV2, {PART2: [make_rows("p", 3, start=10)]})
            assert w.rows(sink) == old
        with pytest.raises(OwnershipError, match="'old'"):  # today: its epoch 1 is "already published"
            commit_version(sink, IV, {PART: [make_rows("p", 3, start=10)]})
        assert w.rows(sink) == old
        assert not [s for s in sink.status(IV).values() if "outcome" in s.records]
        if kind != "redis":  # the old commit table got the owner columns; once the old marker is gone, p runs
            w.db.run("DELETE FROM _eo_commits WHERE pipeline = 'old'")
            mine = make_rows("p", 3, start=10)
            commit_version(w.sink("a", pipeline="p"), IV2, {PART2: [mine]})
            assert sorted(r for r in w.rows(sink) if r[1].startswith("p")) == mine
    finally:
        w.close()


@pytest.mark.parametrize("kind", ["postgresql", "mysql", "redis"])
def test_a_bound_target_keeps_no_password_and_eo_target_url_must_point_at_it(kind):
    from exactly_once import ConfigError
    from exactly_once.targets import DatabaseTarget, RedisTarget, target_from_binding

    urls = {"postgresql": "postgresql://eo:s3cret@db.example:5432/wh?sslmode=require",
            "mysql": "mysql://eo:s3cret@db.example:3306/wh", "redis": "redis://eo:s3cret@cache.example:6379/2"}
    target = RedisTarget("ns", ("k",), url=urls[kind]) if kind == "redis" else DatabaseTarget("t", url=urls[kind])
    assert (target.endpoint().user, target.endpoint().password) == ("eo", "s3cret")  # as the URL gives them
    bound = json.loads(json.dumps(target.binding()))  # what _owner.json holds
    assert "s3cret" not in json.dumps(bound)
    rebuilt = target_from_binding(bound)
    assert rebuilt.describe() == target.describe() and rebuilt.endpoint().password is None
    with_pw = target_from_binding(bound, target.url)  # EO_TARGET_URL of the same server: its password
    assert with_pw.endpoint().password == "s3cret"
    with pytest.raises(ConfigError, match="not the bound target"):
        target_from_binding(bound, target.url.replace(".example", ".elsewhere"))
    assert target_from_binding({"kind": "files", "location": "file:///x"}) is None
