"""What the adversarial review of issue 44 broke (docs/RELIABILITY.md, "Review 44"), each on every target
where it can happen: refused before the decision with an error that says what to do (the transaction
ends ABORTED, nothing is published, the interval is not stuck once the cause is gone), or handled exactly.

1. upsert: a staged NULL in a key column (a UNIQUE key treats NULLs as distinct) - refused;
2. upsert on MariaDB: a second UNIQUE index besides the key (ON DUPLICATE KEY UPDATE matches any) -
   refused; PostgreSQL's ON CONFLICT (key) raises on the other index, which the dry run refuses;
3. Redis evicting (allkeys-*) or expiring the bookkeeping, an operator deleting a marker (Redis, and the
   commit table's row of a database): a late finisher never publishes an older version over a newer one
   (superseded, by the log's newest committed epoch); a reprocess still empties what it drops; a key set that
   is gone is refused with that cause; an evicting server or a TTL on the bookkeeping is refused at begin /
   before the decision.
"""
from __future__ import annotations

import json
import os
import subprocess
from urllib.parse import quote

import pyarrow as pa
import pytest

from eo_testing import free_port, wait_port
from exactly_once.errors import ConfigError
from protocol_helpers import make_rows, open_sink

from .conftest import IV, IV2, PART, PART2, ddl, redis_client
from .test_target_breaks import only, refused_before_deciding


def upsert_sink(world, table: str):
    return open_sink(world.log_url("p", table), pipeline="p", sink="t",
                     target={**world.spec, "table": table, "mode": "upsert", "key_columns": ["dt", "k"]})


def test_upsert_refuses_a_null_in_a_key_column(world):
    only(world, "postgresql", "mysql", why="only a database upserts by a unique key")
    db, table = world.place.db, f"{world.name}_n"
    db.run(f"CREATE TABLE {db.q(table)} (k bigint, v varchar(64) NOT NULL, dt date NOT NULL, "
           f"CONSTRAINT {db.q(table + '_key')} UNIQUE (dt, k))" + (" ENGINE=InnoDB" if world.kind == "mysql" else ""))
    sink = upsert_sink(world, table)
    rows = pa.table({"k": pa.array([1, None], pa.int64()), "v": pa.array(["a", "null-key"])})
    err = refused_before_deciding(world, sink, {PART: [rows]})
    assert "NULL in key column 'k'" in str(err) and "coalesce" in str(err), err
    assert db.count(table) == 0
    good = make_rows("a", 2)
    for _ in range(2):  # without the NULL: published, and a reprocess updates in place
        world.commit(sink, IV, {PART: [good]})
    assert sorted((int(k), v) for k, v in db.rows(table, "k, v")) == good


def test_upsert_into_a_table_whose_columns_are_all_keys(world):
    """Every column is a key column (a set of members): nothing to update, so a row already there stays as it
    is (a no-op assignment), and a reprocess adds the new keys."""
    only(world, "postgresql", "mysql", why="only a database upserts by a unique key")
    db, table = world.place.db, f"{world.name}_k"
    db.run(f"CREATE TABLE {db.q(table)} (k bigint NOT NULL, dt date NOT NULL, "
           f"CONSTRAINT {db.q(table + '_key')} UNIQUE (dt, k))" + (" ENGINE=InnoDB" if world.kind == "mysql" else ""))
    sink = upsert_sink(world, table)
    for keys in ([1, 2], [2, 3]):
        world.commit(sink, IV, {PART: [pa.table({"k": pa.array(keys, pa.int64())})]})
    assert sorted(int(k) for (k,) in db.rows(table, "k")) == [1, 2, 3]


def test_upsert_with_another_unique_index_never_loses_a_row(world):
    only(world, "postgresql", "mysql", why="only a database upserts by a unique key")
    db = world.place.db
    sink = upsert_sink(world, world.name)
    world.commit(sink, IV, {PART: [[(1, "alpha")]]})
    db.run(f"CREATE UNIQUE INDEX {db.q(world.name + '_v')} ON {db.q(world.name)} (dt, v)")  # a natural key too
    # app 1 renamed 'beta', app 2 is the new 'alpha': a valid final state, but app 2 collides on (dt, v)
    err = refused_before_deciding(world, sink, {PART: [[(2, "alpha"), (1, "beta")]]})
    assert ("besides the key" in str(err) and "DROP INDEX" in str(err)) if world.kind == "mysql" else \
        "unique" in str(err).lower(), err
    assert world.read_rows() == world.rows({PART: [[(1, "alpha")]]})  # nothing lost, nothing moved
    if world.kind == "mysql":  # refused for the index itself, even when this version's rows collide nowhere
        refused_before_deciding(world, sink, {PART: [[(1, "alpha"), (3, "gamma")]]})
        db.run(f"DROP INDEX {db.q(world.name + '_v')} ON {db.q(world.name)}")  # what the error says to do
        world.commit(sink, IV, {PART: [[(2, "alpha"), (1, "beta")]]})
        assert world.read_rows() == world.rows({PART: [[(1, "beta"), (2, "alpha")]]})


def forget_marker(world) -> None:
    """An operator (or an evicting Redis, an S3 lifecycle rule) deletes the interval's marker: the commit
    table's row, the marker hash, the partition's link (local files) or manifest (S3 files)."""
    if world.is_files:
        sink = world.sink()
        live = sink.storage.join(sink.table, PART)
        if world.kind == "files-local":
            os.unlink(live)
        else:
            sink.storage.remove_tree(sink.storage.join(live, "_MANIFEST.json"))
    elif world.place.db is not None:
        db = world.place.db
        db.run(f"DELETE FROM {db.q('_eo_commits')} WHERE target = %s AND interval_token = %s", (world.name, IV.token))
    else:
        redis_client().delete(f"{world.name}:_eo:marker:{IV.token}")


def test_a_commit_table_emptied_of_a_tables_rows_is_claimed_again_and_the_reprocess_published(world):
    """An operator deletes every row of our table from the commit table (its claim and its markers: a
    TRUNCATE, a cleanup script): the next publish makes the claim again, as ours, and publishes."""
    only(world, "postgresql", "mysql", why="the commit table of a database target")
    db, sink = world.place.db, world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    db.run(f"DELETE FROM {db.q('_eo_commits')} WHERE target = %s", (world.name,))
    new = make_rows("new", 2, start=50)
    world.commit(sink, IV, {PART: [new]})
    assert world.read_rows() == world.rows({PART: [new]})
    assert db.run(f"SELECT count(*) FROM {db.q('_eo_commits')} WHERE target = %s AND interval_token = '_owner'",
                  (world.name,))[0][0] == 1
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_late_finisher_never_publishes_over_a_newer_version_whose_marker_is_gone(world, monkeypatch):
    only(world, "redis", "postgresql", "mysql", "files-local", "files-s3",
         why="Delta's marker (its txn action, else the version's live files) is lost only by another engine: "
             "test_delta_other_writers.py::test_an_expired_marker_and_no_live_files_never_let_an_older_version_back")
    sink, other = world.sink(), world.sink()
    old, new = make_rows("old", 3), make_rows("new", 2, start=50)
    t1 = sink.begin(IV)
    world.stage(sink, t1, {PART: [old]})
    sink.pre_commit(t1)

    def newer_then_forgotten():  # epoch 2 begins, commits and publishes while epoch 1's publish stalls
        world.commit(other, IV, {PART: [new]})
        forget_marker(world)

    state = world.during_publish(monkeypatch, t1, newer_then_forgotten)
    result = sink.commit(t1)
    monkeypatch.undo()
    assert state["fired"] and set(result.partitions.values()) == {"superseded"}, result.partitions
    if world.is_files:  # the link / manifest was epoch 2's live version: none is live, never epoch 1's
        assert world.sink().live_version(PART) is None
    else:
        assert world.read_rows() == world.rows({PART: [new]})  # epoch 2's rows, never epoch 1's again
    again = make_rows("again", 2, start=70)
    world.commit(world.sink(), IV, {PART: [again]})  # the next reprocess publishes (the marker is back)
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_reprocess_after_the_marker_is_gone_still_empties_the_partitions_it_drops(world):
    """An operator deletes the interval's marker (the commit table's row, the marker hash), then a reprocess no
    longer produces a partition the live version had: it is emptied as with the marker there (the database kept
    its rows beside the new version for good: mixed versions) - unless another interval's marker holds it by
    then: its rows are that interval's, never deleted."""
    only(world, "postgresql", "mysql", "redis", why="the files targets' marker is the partition's own link or manifest")
    sink, part_b = world.sink(), "dt=2026-02-01"
    a, b, c, d = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20), make_rows("d", 2, start=30)
    world.commit(sink, IV, {PART: [a], part_b: [b]})
    forget_marker(world)
    sink.abort(sink.begin(IV), reason="an attempt between: the live version is the one before it")
    world.commit(sink, IV, {PART: [c]})  # part_b dropped
    assert world.read_rows() == world.rows({PART: [c]})
    world.commit(world.sink(), IV, {PART: [c]})
    assert world.read_rows() == world.rows({PART: [c]})
    if world.kind != "redis":  # Redis refuses another interval's keys in a partition (its own test)
        world.commit(sink, IV, {PART: [a], part_b: [b]})
        forget_marker(world)
        # no marker names part_b now: another interval takes it, spelled so the log's claims tell them apart
        world.commit(sink, IV2, {"dt=2026-2-1": [d]})
        world.commit(sink, IV, {PART: [c]})  # drops part_b, which IV2 holds: left alone
        assert world.read_rows() == world.rows({PART: [c], part_b: [d]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("lost", ["the table's markers", "two intervals' markers"])
def test_a_lost_marker_empties_only_what_the_live_version_holds(world, lost):
    """The interval's live version had dropped a partition already, and another interval published it since
    (spelled otherwise: one date for the database); then the markers are deleted. A reprocess empties only
    the partitions the interval's live version holds by the log - never that one, whose rows are the other
    interval's (they were deleted, with no error, while the log said published)."""
    only(world, "postgresql", "mysql", why="the commit table of a database target")
    db, sink, part_b = world.place.db, world.sink(), "dt=2026-03-01"
    a, b, c, d = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20), make_rows("d", 2, start=30)
    world.commit(sink, IV, {PART: [a], part_b: [b]})
    world.commit(sink, IV, {PART: [c]})  # drops part_b: emptied (the marker held it)
    world.commit(sink, IV2, {"dt=2026-3-1": [d]})  # no marker names part_b now
    if lost == "the table's markers":
        db.run(f"DELETE FROM {db.q('_eo_commits')} WHERE target = %s", (world.name,))
    else:
        for iv in (IV, IV2):
            db.run(f"DELETE FROM {db.q('_eo_commits')} WHERE target = %s AND interval_token = %s", (world.name, iv.token))
    world.commit(world.sink(), IV, {PART: [c]})
    assert world.read_rows() == world.rows({PART: [c], part_b: [d]})


def test_a_reservation_never_published_does_not_keep_a_lost_markers_partition(world, monkeypatch):
    """With the interval's marker gone, another interval's check reserves the dropped partition (spelled
    otherwise) and its attempt dies before its decision. A reservation holds no rows: the reprocess empties the
    partition (kept, the new marker no longer named it, and its old rows stayed for good)."""
    only(world, "postgresql", "mysql", why="the commit table of a database target")
    db, part_b = world.place.db, "dt=2026-03-01"
    a, b, c, d, e = (make_rows(x, 2, start=10 * i) for i, x in enumerate("abcde"))
    world.commit(world.sink(), IV, {PART: [a], part_b: [b]})
    db.run(f"DELETE FROM {db.q('_eo_commits')} WHERE target = %s AND interval_token = %s", (world.name, IV.token))
    other = world.sink()
    cls, check = type(other.target), type(other.target).check

    def check_then_die(self, txn, staged):
        check(self, txn, staged)
        if txn.interval == IV2:
            raise RuntimeError("the worker is lost between the check and the decision")

    monkeypatch.setattr(cls, "check", check_then_die)
    t2 = other.begin(IV2)
    world.stage(other, t2, {"dt=2026-3-1": [d]})
    other.pre_commit(t2)
    with pytest.raises(RuntimeError):
        other.commit(t2)
    monkeypatch.setattr(cls, "check", check)
    other.abort(t2, reason="the dead attempt's teardown")
    world.commit(world.sink(), IV, {PART: [c]})  # drops part_b, the marker gone
    world.commit(world.sink(), IV2, {PART2: [e]})
    world.commit(world.sink(), IV, {PART: [c]})
    assert world.read_rows() == world.rows({PART: [c], PART2: [e]})


def test_redis_refuses_with_the_real_cause_when_the_key_set_is_gone(world):
    only(world, "redis", why="only Redis keeps a key set per interval")
    sink, client = world.sink(), redis_client()
    first, again = make_rows("a", 3), make_rows("b", 2, start=10)
    world.commit(sink, IV, {PART: [first]})
    client.delete(f"{world.name}:_eo:keys:{IV.token}")  # evicted, or an operator's clean-up
    err = refused_before_deciding(world, sink, {PART: [again]})
    assert "is gone (evicted or deleted" in str(err) and "did not write" not in str(err), err
    assert world.read_rows() == world.rows({PART: [first]})
    for key in [*client.scan_iter(f"{world.name}:{PART}:*"), f"{world.name}:_eo:marker:{IV.token}"]:
        client.unlink(key)  # what the error says to do
    world.commit(sink, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_redis_refuses_a_server_that_may_evict_or_expire_the_bookkeeping(world, tmp_path):
    only(world, "redis", why="only Redis is run as a cache that evicts keys")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru",
                               "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_port(port)
        url = f"redis://127.0.0.1:{port}/0"
        cache = open_sink(world.log_url("p", "cache"), pipeline="p", sink="t", target={**world.spec, "url": url})
        with pytest.raises(ConfigError, match="maxmemory-policy is allkeys-lru.*noeviction"):
            cache.begin(IV)
        assert cache.status(IV) == {}  # refused at begin: nothing began
        import redis

        redis.Redis.from_url(url).config_set("maxmemory-policy", "volatile-lru")  # what the error says
        world.commit(cache, IV, {PART: [make_rows("a", 2)]})
    finally:
        server.terminate()
        server.wait(10)
    sink, client = world.sink(), redis_client()
    world.commit(sink, IV, {PART: [make_rows("a", 2)]})
    client.expire(f"{world.name}:_eo:marker:{IV.token}", 3600)  # under volatile-* it may be evicted; it expires
    err = refused_before_deciding(world, sink, {PART: [make_rows("b", 2, start=10)]})
    assert "have a TTL" in str(err) and "persist" in str(err), err
    client.persist(f"{world.name}:_eo:marker:{IV.token}")
    world.commit(sink, IV, {PART: [make_rows("b", 2, start=10)]})
    assert world.read_rows() == world.rows({PART: [make_rows("b", 2, start=10)]})


def test_delta_refuses_a_table_with_column_mapping(world):
    only(world, "delta-local", "delta-s3", why="column mapping is a Delta table's")
    from deltalake import DeltaTable, write_deltalake

    target = world.sink().target
    opts = target.options or None
    theirs = pa.table({"k": pa.array([100], pa.int64()), "v": ["other"], "dt": ["2026-03-01"]})
    write_deltalake(target.uri, theirs, partition_by=["dt"], configuration={"delta.columnMapping.mode": "name"},
                    storage_options=opts)  # legacy protocol (2, 5): no writer_features list to judge
    sink = world.sink()
    err = refused_before_deciding(world, sink, {PART: [make_rows("a", 2)]})
    assert "column mapping" in str(err) and "without it" in str(err), err
    assert DeltaTable(target.uri, storage_options=opts).version() == 0  # nothing committed to the table
    assert world.sink().recover(IV) == [] and world.log_problems(sink, IV) == []  # nothing stuck


def test_rows_a_trigger_moves_out_of_the_interval_are_refused(world):
    only(world, "postgresql", "mysql", why="only a database runs the table's triggers on our load")
    db, t = world.place.db, world.name
    first, again = make_rows("a", 2), make_rows("b", 3, start=10)
    sink = world.sink()
    world.commit(sink, IV, {PART: [first]})
    if world.kind == "postgresql":  # a DBA's "normalise dt" (stands in for a local business day)
        db.run(f'CREATE FUNCTION "{t}_shift"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN '
               "NEW.dt := NEW.dt + 1; RETURN NEW; END $$")
        db.run(f'CREATE TRIGGER "{t}_shift" BEFORE INSERT ON "{t}" FOR EACH ROW EXECUTE FUNCTION "{t}_shift"()')
    else:
        db.run(f"CREATE TRIGGER `{t}_shift` BEFORE INSERT ON `{t}` FOR EACH ROW SET NEW.dt = NEW.dt + INTERVAL 1 DAY")
    err = refused_before_deciding(world, sink, {PART: [again]})
    assert "landed outside the interval" in str(err) and "trigger" in str(err), err
    assert world.read_rows() == world.rows({PART: [first]})  # rolled back: nothing moved, nothing doubled
    db.run(f"DROP TRIGGER {db.q(t + '_shift')}" + (f" ON {db.q(t)}" if world.kind == "postgresql" else ""))
    world.commit(sink, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_log_deleted_and_started_over_never_takes_the_old_versions_for_its_own(world):
    only(world, "files-local", "files-s3", why="only the files targets name a live version by the log's txn name alone")
    from exactly_once.errors import OwnershipError
    from exactly_once.records.ownership import LOCATION_CLAIM

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 2)]})  # the old log's e1 live in PART
    world.commit(sink, IV2, {PART2: [make_rows("old", 2)]})
    world.commit(sink, IV2, {PART2: [make_rows("old2", 2)]})  # and its e2 in PART2
    if world.kind == "files-s3":  # PART's manifest as releases before manifests named their owner wrote it
        path = sink.storage.join(sink.table, PART, "_MANIFEST.json")
        legacy = {k: v for k, v in sink.storage.read_json(path).items() if k != "owner"}
        sink.storage.write_atomic(path, json.dumps(legacy).encode())
    sink.storage.remove_tree(sink.home)  # "start the pipeline over": rm -rf _exactly_once/<table>
    with pytest.raises(OwnershipError, match="what it published there"):
        world.sink().begin(IV)
    sink.storage.remove_tree(sink.storage.join(sink.table, LOCATION_CLAIM))  # what the error says to do
    fresh = world.sink()
    new, new2 = make_rows("new", 3, start=20), make_rows("new", 2, start=40)
    world.commit(fresh, IV, {PART: [new]})  # the new log's e1: same name as the old live one
    world.commit(fresh, IV2, {PART2: [new2]})  # its e1 under the old log's e2
    assert world.read_rows() == world.rows({PART: [new], PART2: [new2]})
    again = make_rows("again", 2, start=60)
    world.commit(fresh, IV, {PART: [again]})  # and the new log goes on
    assert world.read_rows() == world.rows({PART: [again], PART2: [new2]})
    assert world.log_problems(fresh, IV) == [] and world.log_problems(fresh, IV2) == []


def test_a_schema_whose_name_needs_quoting_is_published_into(world):
    """The table claim lives in the table's own schema (MariaDB: database) as the database names it: a
    ``dw-prod`` is quoted, not refused as an unsafe name the user never gave."""
    only(world, "postgresql", "mysql", why="only a database keeps a claims table in the table's schema")
    db, schema = world.place.db, f"{world.name}-dw"
    rows = make_rows("a", 2)
    if world.kind == "mysql":
        db.run(f"CREATE DATABASE `{schema}`")
        db.run(ddl("mysql", world.name).replace(f"`{world.name}`", f"`{schema}`.`{world.name}`"))
        spec = {**world.spec, "url": world.spec["url"].rsplit("/", 1)[0] + "/" + quote(schema)}
    else:  # PostgreSQL: the unqualified table resolves by the search_path to a schema named so
        db.run(f'CREATE SCHEMA "{schema}"')
        db.run(ddl("postgresql", world.name).replace(f'"{world.name}"', f'"{schema}"."{world.name}"'))
        dbname = db.run("SELECT current_database()")[0][0]
        db.run(f'ALTER DATABASE "{dbname}" SET search_path = "{schema}"')
        spec = world.spec
    try:
        sink = open_sink(world.log_url("p", "dw"), pipeline="p", sink="t", target=spec)
        world.commit(sink, IV, {PART: [rows]})
        world.commit(sink, IV, {PART: [rows]})  # a reprocess: replaced, not doubled
        got = db.run(f"SELECT k, v FROM {db.q(schema)}.{db.q(world.name)} ORDER BY k")
        assert [(int(k), v) for k, v in got] == rows
        assert db.run(f"SELECT count(*) FROM {db.q(schema)}.{db.q('_eo_claims')}")[0][0] == 1  # claimed there
    finally:
        if world.kind == "mysql":
            db.run(f"DROP DATABASE `{schema}`")
        else:
            db.run(f'ALTER DATABASE "{dbname}" RESET search_path')
            db.run(f'DROP SCHEMA "{schema}" CASCADE')


def test_the_same_server_under_another_host_name_is_the_same_table(world):
    """A sink re-pointed at its server by another name (``localhost`` for ``127.0.0.1``; a DNS name, a
    failover primary) goes on: the target itself holds the sink's claim. Another database holds none:
    still refused."""
    only(world, "postgresql", "mysql", "redis", why="only a server's target is bound by its host")
    from exactly_once.errors import OwnershipError

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("a", 2)]})
    url = world.spec["url"]
    moved = open_sink(world.log_url("p", "t"), pipeline="p", sink="t",
                      target={**world.spec, "url": url.replace("127.0.0.1", "localhost")})
    again = make_rows("b", 3, start=10)
    world.commit(moved, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(moved, IV) == [] and world.leftovers() == []
    other = url.rsplit("/", 1)[0] + {"postgresql": "/postgres", "mysql": "/test", "redis": "/1"}[world.kind]
    elsewhere = open_sink(world.log_url("p", "t"), pipeline="p", sink="t", target={**world.spec, "url": other})
    with pytest.raises(OwnershipError, match="holds no claim of this sink"):
        elsewhere.begin(IV2)


def test_a_copy_of_the_database_holding_the_claim_is_refused(world):
    """Review 44, second round: a copy of the database (CREATE DATABASE ... TEMPLATE, a restored backup)
    holds this sink's claim rows too, so the re-spelling relaxation took it for the same table and published
    into it while the log's versions stayed in the original. The binding records the database's identity."""
    only(world, "postgresql", "mysql", why="only a database target can be copied whole with its claim rows")
    from exactly_once.errors import OwnershipError
    from target_helpers import Db, fresh_database

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("a", 2)]})
    owner_id = sink.target.owner.id
    copies = fresh_database(world.kind)
    url = next(copies)
    try:  # the copy: the table, and the claim rows naming this sink's owner (as a dump would carry them)
        copy = Db(url)
        copy.run(ddl(world.kind, world.name))
        other = open_sink(world.log_url("q", "copy"), pipeline="p", sink="t", target={**world.spec, "url": url})
        other.abort(other.begin(IV2))
        for claims in ("_eo_commits", "_eo_claims"):
            copy.run(f"UPDATE {copy.q(claims)} SET owner = %s", (owner_id,))
        moved = open_sink(world.log_url("p", "t"), pipeline="p", sink="t", target={**world.spec, "url": url})
        with pytest.raises(OwnershipError, match="another database than the one the sink was bound to"):
            moved.begin(IV2)
        copy.close()
    finally:
        next(copies, None)
    world.commit(world.sink(), IV2, {PART2: [make_rows("b", 2)]})  # the bound database goes on
    assert world.read_rows() == world.rows({PART: [make_rows("a", 2)], PART2: [make_rows("b", 2)]})


def test_a_reprocess_respelling_a_partition_value_the_database_finds_equal_is_published(world):
    """Review 44, second round: replace by partition columns where the old and the new spelling of a value
    match the same rows (an int column: ``hour=3`` / ``hour=03``; MariaDB's ``_ci`` collation: ``EU`` / ``eu``):
    the check after the load counted those rows once per spelling and refused the reprocess forever."""
    only(world, "postgresql", "mysql", why="only a database compares partition values by its column types")
    db, table = world.place.db, f"{world.name}_r"
    col, old, new = ("region", "EU", "eu") if world.kind == "mysql" else ("hour", "3", "03")
    typ = "varchar(8)" if world.kind == "mysql" else "int"
    db.run(f"CREATE TABLE {db.q(table)} (k bigint NOT NULL, v varchar(64) NOT NULL, dt date NOT NULL, "
           f"{col} {typ} NOT NULL)" + (" ENGINE=InnoDB" if world.kind == "mysql" else ""))
    sink = open_sink(world.log_url("p", table), pipeline="p", sink="t", target={**world.spec, "table": table})
    world.commit(sink, IV, {f"{PART}/{col}={old}": [make_rows("v1", 2)]})
    world.commit(sink, IV, {f"{PART}/{col}={new}": [make_rows("v2", 3)]})  # refused on every try before
    assert sorted((int(k), v) for k, v in db.rows(table, "k, v")) == make_rows("v2", 3)
    assert world.log_problems(sink, IV) == []


def test_upsert_beside_a_surrogate_auto_increment_key_is_published_and_a_defaulted_index_refused(world):
    """Review 44, second round: MariaDB's refusal of another UNIQUE index also refused the commonest table,
    ``id AUTO_INCREMENT PRIMARY KEY`` + ``UNIQUE (k)`` upserted on ``k``: no staged row carries ``id``, so it
    can only match on ``k``. Still refused: another unique index whose unloaded column has a constant DEFAULT
    (every new row gets the same value: it would collide)."""
    only(world, "postgresql", "mysql", why="only a database upserts by a unique key")
    db, table = world.place.db, f"{world.name}_s"
    serial = "bigint NOT NULL AUTO_INCREMENT" if world.kind == "mysql" else "bigserial"
    db.run(f"CREATE TABLE {db.q(table)} (id {serial} PRIMARY KEY, k bigint NOT NULL, v varchar(64) NOT NULL, "
           f"dt date NOT NULL, src varchar(8) NOT NULL DEFAULT 'job', "
           f"CONSTRAINT {db.q(table + '_key')} UNIQUE (dt, k))" + (" ENGINE=InnoDB" if world.kind == "mysql" else ""))
    sink = upsert_sink(world, table)
    world.commit(sink, IV, {PART: [make_rows("a", 2)]})
    world.commit(sink, IV, {PART: [make_rows("b", 3)]})  # updated in place by (dt, k), one row added
    assert sorted((int(k), v) for k, v in db.rows(table, "k, v")) == make_rows("b", 3)
    if world.kind == "mysql":  # PostgreSQL's ON CONFLICT (key) is not affected by other indexes' columns
        db.run(f"CREATE UNIQUE INDEX {db.q(table + '_src')} ON {db.q(table)} (k, src)")  # k of another day
        err = refused_before_deciding(world, sink, {PART: [make_rows("c", 3)]})
        assert "besides the key" in str(err) and "'src'" in str(err), err
    assert sorted((int(k), v) for k, v in db.rows(table, "k, v")) == make_rows("b", 3)


def test_delta_refuses_a_column_differing_from_the_tables_only_in_case(world):
    """Review 44, second round: the table (made by Spark) has ``V``, the job writes ``v``: Delta names are
    case-insensitive, and delta-rs refused the widening with a raw "Duplicate field name". Now a
    TargetSchemaError naming both spellings and saying to rename the column in the job - which works."""
    only(world, "delta-local", "delta-s3", why="only Delta compares column names case-insensitively")
    from deltalake import DeltaTable, write_deltalake

    target = world.sink().target
    opts = target.options or None
    theirs = pa.table({"k": pa.array([100], pa.int64()), "V": ["other"], "dt": ["2025-12-31"]})
    write_deltalake(target.uri, theirs, partition_by=["dt"], storage_options=opts)
    sink = world.sink()
    err = refused_before_deciding(world, sink, {PART: [make_rows("a", 2)]})
    assert "'v' (the table has 'V')" in str(err) and "rename the column in the job" in str(err), err
    assert DeltaTable(target.uri, storage_options=opts).version() == 0  # nothing committed, not even a widening
    renamed = pa.table({"k": pa.array([1, 2], pa.int64()), "V": ["a", "b"]})  # what the error says to do
    world.commit(sink, IV, {PART: [renamed]})
    got = DeltaTable(target.uri, storage_options=opts).to_pyarrow_table(columns=["k", "V"]).to_pylist()
    assert sorted((r["k"], r["V"]) for r in got) == [(1, "a"), (2, "b"), (100, "other")]


def test_a_restarted_log_never_takes_an_old_legacy_manifest_of_the_same_sizes_for_its_own(world):
    """files-s3: the old log's live manifest, written before manifests named their owner, lists files of the
    same names and sizes as the new log's e1 (other rows of the same shape): only their sha256 tells them
    apart, so the new log's e1 is published - never reported 'already' over the old rows."""
    only(world, "files-s3", why="only files-s3 judges a manifest without an owner by the log's files")
    from exactly_once.records.ownership import LOCATION_CLAIM

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 2)]})  # the old log's e1
    path = sink.storage.join(sink.table, PART, "_MANIFEST.json")
    legacy = {k: v for k, v in sink.storage.read_json(path).items() if k != "owner"}
    sink.storage.write_atomic(path, json.dumps(legacy).encode())
    sink.storage.remove_tree(sink.home)  # the log started over
    sink.storage.remove_tree(sink.storage.join(sink.table, LOCATION_CLAIM))
    fresh = world.sink()
    new = make_rows("new", 2)  # "new-0" is as long as "old-0": the same file sizes
    world.commit(fresh, IV, {PART: [new]})
    assert sorted(f["size"] for f in legacy["files"]) == sorted(
        f["size"] for f in sink.storage.read_json(path)["files"]), "the sizes differ: the test proves nothing"
    assert world.read_rows() == world.rows({PART: [new]})
