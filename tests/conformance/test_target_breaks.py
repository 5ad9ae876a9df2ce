"""Six ways an operator's setup broke exactly-once (issue 44), each on every target where it can happen:
refused before the decision with an error that says what to do (the transaction ends ABORTED, nothing
is published, the interval is not stuck once the cause is gone), or handled exactly.

1. files (local): the table directory is itself a symlink (a disk mounted elsewhere) - handled;
2. databases: a staged file carries its own partition column with another value than its directory - refused;
3. Redis: the namespace holds keys in our partitions that the protocol did not write - refused;
4. PostgreSQL: a DBA changes ``search_path`` so the unqualified names resolve to another schema - refused;
5. files (local): another writer made a plain directory at a partition path - refused;
6. MariaDB: ``t`` and ``T`` are two tables (case-sensitive names) - two pipelines, one each, both publish.

Each obstacle is refused before the decision also where it sits only in a partition a reprocess drops.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from exactly_once import State
from exactly_once.errors import ExactlyOnceError
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from protocol_helpers import _read_rows, interleave, make_rows, open_sink

from .conftest import IV, PART, PIPELINE, SINK, ddl, redis_client


def only(world, *kinds: str, why: str) -> None:
    if world.kind not in kinds:
        pytest.skip(f"{world.kind}: {why}")


def refused_before_deciding(world, sink, files) -> ExactlyOnceError:
    """Run a whole transaction of ``files``; assert it was refused - at its begin, or ABORTED; return the error."""
    began = []
    with pytest.raises(ExactlyOnceError) as refused:
        with sink.transaction(IV) as txn:
            began.append(txn)
            world.stage(sink, txn, files)
    for txn in began:
        assert sink.status(IV)[txn.epoch].state is State.ABORTED, f"refused after the decision: {refused.value}"
    return refused.value


def test_a_table_dir_that_is_a_symlink_is_published_through(world):
    only(world, "files-local", "delta-local", why="only a local table dir can be a symlink")
    table = world.table_url
    real = os.path.join(os.path.dirname(os.path.dirname(table)), "mounted", "t")  # elsewhere: another disk
    os.makedirs(real)
    os.makedirs(os.path.dirname(table), exist_ok=True)
    os.symlink(real, table)
    sink = world.sink()
    first, again = make_rows("a", 3), make_rows("b", 2, start=10)
    world.commit(sink, IV, {PART: [first]})
    assert world.read_rows() == world.rows({PART: [first]})  # the exact and the plain reader (files)
    world.commit(sink, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_staged_partition_column_that_disagrees_with_its_directory_is_refused(world):
    only(world, "postgresql", "mysql", why="a database adds the partition columns to the rows")
    sink = world.sink()
    good = make_rows("g", 2)
    world.commit(sink, IV, {PART: [good]})
    elsewhere = pa.table({"k": pa.array([7, 8], pa.int64()), "v": pa.array(["x", "y"]),
                          "dt": pa.array(["2026-01-01", "2026-01-05"])})  # one row says another day
    err = refused_before_deciding(world, sink, {PART: [elsewhere]})
    assert "partition column 'dt'" in str(err) and "2026-01-05" in str(err), err
    assert world.read_rows() == world.rows({PART: [good]})
    same = pa.table({"k": pa.array([7], pa.int64()), "v": pa.array(["x"]), "dt": pa.array(["2026-01-01"])})
    world.commit(sink, IV, {PART: [same]})  # a column that agrees with its directory is fine
    assert world.read_rows() == world.rows({PART: [[(7, "x")]]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_keys_in_our_partitions_the_protocol_did_not_write_are_refused(world):
    only(world, "redis", why="the other targets replace a partition whole (by its rows or its directory)")
    sink = world.sink()
    first, again = make_rows("a", 3), make_rows("b", 2, start=10)
    world.commit(sink, IV, {PART: [first]})
    world.other_writer(PART, [(99, "old-loader")])  # an old loader's key in our partition
    err = refused_before_deciding(world, sink, {PART: [again]})
    assert "did not write" in str(err) and "redis-cli" in str(err), err
    assert world.read_rows() == world.rows({PART: [first, [(99, "old-loader")]]})  # nothing changed
    redis_client().delete(f"{world.name}:{PART}:99")  # what the error says to do
    world.commit(sink, IV, {PART: [again]})
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_changed_search_path_is_refused(world):
    only(world, "postgresql", why="only PostgreSQL resolves unqualified names by a search_path")
    db = world.place.db
    sink = world.sink()
    first, again = make_rows("a", 3), make_rows("b", 2, start=10)
    world.commit(sink, IV, {PART: [first]})
    schema = f"s_{world.name}"
    db.run(f'CREATE SCHEMA "{schema}"')
    db.run(ddl("postgresql", world.name).replace(f'"{world.name}"', f'"{schema}"."{world.name}"'))
    dbname = db.run("SELECT current_database()")[0][0]
    db.run(f'ALTER DATABASE "{dbname}" SET search_path = "{schema}", public')  # new sessions resolve there
    try:
        for who in (sink, world.sink()):  # the bound sink, and a new process's
            err = refused_before_deciding(world, who, {PART: [again]})
            assert "search_path" in str(err), err
        assert world.read_rows() == world.rows({PART: [first]})
        assert db.run(f'SELECT count(*) FROM "{schema}"."{world.name}"')[0][0] == 0  # nothing landed there
    finally:
        db.run(f'ALTER DATABASE "{dbname}" RESET search_path')
    world.commit(world.sink(), IV, {PART: [again]})  # restored: the interval is not stuck
    assert world.read_rows() == world.rows({PART: [again]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("obstacle", ["directory", "link", "link named like ours"])
def test_a_plain_directory_at_a_partition_path_is_refused(world, obstacle):
    """Another writer's plain directory - or a link of its own - at a partition path: refused before the
    decision (the switch could never replace it, or would replace what is not ours); theirs stays. A link
    into another store whose dir is named like a newer version of this interval (a copy of the table
    elsewhere, a deleted log's link) is not a version of this log: never taken for a newer epoch that
    supersedes ours - our version replaces the link, and their dir stays."""
    only(world, "files-local", why="only a local partition path is a link another writer can shadow")
    sink = world.sink()
    rows = make_rows("a", 3)
    path = os.path.join(sink.table, PART)
    if obstacle == "directory":
        world.other_writer(PART, [(99, "theirs")])  # a plain dir at dt=... with their file
    else:
        theirs = os.path.join(os.path.dirname(sink.table), "their-data")
        if obstacle == "link named like ours":
            theirs = os.path.join(theirs, PART, sink.ref(IV, 9).name)
        os.makedirs(theirs)
        os.makedirs(sink.table, exist_ok=True)
        os.symlink(theirs, path)
    if obstacle == "link named like ours":
        world.commit(sink, IV, {PART: [rows]})
        assert world.read_rows() == world.rows({PART: [rows]}) and os.path.isdir(theirs)
        assert world.log_problems(sink, IV) == [] and world.leftovers() == []
        return
    err = refused_before_deciding(world, sink, {PART: [rows]})
    assert ("plain directory" in str(err) and "Move it out" in str(err)) if obstacle == "directory" else \
        "not a version of" in str(err), err
    if obstacle == "directory":
        assert world.read_rows() == world.rows({PART: [[(99, "theirs")]]})  # their rows untouched
        os.rename(path, os.path.join(os.path.dirname(sink.table), "theirs"))
        world.foreign.clear()
    else:
        assert os.readlink(path) == theirs  # their link untouched
        os.unlink(path)
    world.commit(world.sink(), IV, {PART: [rows]})
    assert world.read_rows() == world.rows({PART: [rows]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("tables", ["new", "made_by_an_older_release"])
def test_two_tables_whose_names_differ_only_in_case_are_two_tables(world, tables):
    """... also where the commit and claims tables were made before names compared exactly (MariaDB: a
    case-insensitive collation on their ``target``): the next publish makes them exact first."""
    only(world, "postgresql", "mysql", why="table names of a database")
    if tables != "new":
        only(world, "mysql", why="only MariaDB's commit tables of older releases compared names ignoring case")
    db = world.place.db
    upper = world.name.upper()
    db.run(ddl(world.kind, upper))
    if world.kind == "mysql" and db.run("SELECT @@lower_case_table_names")[0][0] != 0:
        pytest.skip("this server folds table names to lower case: `t` and `T` are one table")
    spec = dict(world.spec)
    if tables != "new":  # a commit table of their own, as an older release made it: `t` and `T` one name
        spec["commit_table"] = f"_eo_old_{world.name}"
        db.run(f"CREATE TABLE {db.q(spec['commit_table'])} (target varchar(255) CHARACTER SET utf8mb4 COLLATE "
               "utf8mb4_general_ci NOT NULL, interval_token varchar(64) NOT NULL, epoch bigint NOT NULL, "
               "pipeline varchar(128), sink varchar(128), partitions text, rows_loaded bigint, "
               "interval_start datetime(6), interval_end datetime(6), committed_at datetime(6), "
               "PRIMARY KEY (target, interval_token)) ENGINE=InnoDB")
    mine = open_sink(world.log_url(PIPELINE, SINK), pipeline=PIPELINE, sink=SINK, target=spec)
    theirs = open_sink(world.log_url("q", "t"), pipeline="q", sink="t", target={**spec, "table": upper})
    a, b, a2 = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20)
    world.commit(mine, IV, {PART: [a]})
    world.commit(theirs, IV, {PART: [b]})  # another pipeline on its own table `T`: not refused
    world.commit(mine, IV, {PART: [a2]})  # a reprocess of `t` leaves `T` alone
    assert world.read_rows() == world.rows({PART: [a2]})
    assert [(int(k), v) for k, v in db.run(f"SELECT k, v FROM {db.q(upper)} ORDER BY k")] == b
    assert theirs.target.live_epoch(IV) == 1 and mine.target.live_epoch(IV) == 2


def test_an_obstacle_only_in_a_partition_the_reprocess_drops_is_refused_before_the_decision(world):
    """The check before the decision sees the version the publish writes, with the partitions it empties: an
    obstacle only in a partition the new version no longer produces is refused before the decision - not after
    it, where every retry and every recover would meet it again. Files: another writer's plain directory where
    our link was; on S3 another tool's manifest. Redis: the interval's marker and key set lost (deleted by hand), so the keys of the old
    version's partitions are no longer known as ours. Once cleared, the reprocess publishes."""
    only(world, "files-local", "files-s3", "redis", why="a dropped partition can hold another writer's obstacle here only")
    sink = world.sink()
    a, b, again = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20)
    part_b, part_c = "dt=2026-02-01", "dt=2026-03-01"
    world.commit(sink, IV, {PART: [a], part_b: [b]})
    if world.kind == "redis":
        client = redis_client()
        client.delete(sink.target.marker_key(IV), sink.target.keyset_key(IV))
        new = {part_c: [again]}  # nothing left in the new version's partitions: only the dropped hold keys
    elif world.kind == "files-s3":  # another tool's manifest in the dropped partition
        manifest = sink.storage.join(sink.table, part_b, "_MANIFEST.json")
        sink.storage.write_atomic(manifest, b'{"files": ["part-0.parquet"]}')
        new = {PART: [again]}
    else:
        os.unlink(os.path.join(sink.table, part_b))  # our link, replaced by their plain directory
        world.other_writer(part_b, [(99, "theirs")])
        new = {PART: [again]}
    err = refused_before_deciding(world, sink, new)
    if world.kind == "redis":
        assert "did not write" in str(err) and f"{world.name}:{part_b}:" in str(err), err
        assert world.read_rows() == world.rows({PART: [a], part_b: [b]})  # nothing changed
        client.delete(*client.keys(f"{world.name}:dt=*"))  # what the error says to do (here: every old key)
    elif world.kind == "files-s3":
        assert "not a manifest exactly-once wrote" in str(err) and part_b in str(err), err
        assert sink.live_version(PART) == sink.ref(IV, 1).name
        sink.storage.remove_tree(manifest)  # moved out of the prefix
    else:
        assert "plain directory" in str(err) and part_b in str(err), err
        assert world.read_rows() == world.rows({PART: [a], part_b: [[(99, "theirs")]]})
        os.rename(os.path.join(sink.table, part_b), os.path.join(os.path.dirname(sink.table), "theirs"))
        world.foreign.clear()
    world.commit(world.sink(), IV, new)
    assert world.read_rows() == world.rows(new)
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("where", ["dropped", "produced"])
def test_a_plain_file_at_a_nested_partitions_parent_is_refused_before_the_decision(world, where):
    """Nested partitions (``dt=../h=..``): another writer's plain file where a partition's parent directory
    goes - of a partition the reprocess drops, or of one it produces - is refused before the decision (the
    publish could not make the directory: COMMITTED and stuck); once it is moved out, the reprocess publishes."""
    only(world, "files-local", why="only a local partition path is a link another writer can shadow")
    keep, other = f"{PART}/h=00", "dt=2026-03-01/h=00"
    sink = world.sink()
    a, b, again = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20)
    world.commit(sink, IV, {keep: [a], other: [b]} if where == "dropped" else {keep: [a]})
    parent = os.path.join(sink.table, "dt=2026-03-01")
    if where == "dropped":
        os.unlink(os.path.join(parent, "h=00"))
        os.rmdir(parent)
    with open(parent, "w") as f:  # their plain file
        f.write("theirs\n")
    new = {keep: [again]} if where == "dropped" else {keep: [again], other: [b]}
    err = refused_before_deciding(world, sink, new)
    assert "plain file" in str(err) and "dt=2026-03-01" in str(err), err
    assert sink.live_version(keep) == sink.ref(IV, 1).name  # nothing switched (their file stops a plain read)
    os.rename(parent, os.path.join(os.path.dirname(sink.table), "theirs"))
    done = world.commit(world.sink(), IV, new)
    live = {part: sorted(_read_rows(sink, sink.live_files(part))) for part in (keep, other)}
    assert live == {keep: again, other: b if where == "produced" else []}
    assert sink.live_version(keep) == done.name
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("obstacle", ["file at the parent", "directory at the link"])
def test_an_obstacle_put_after_the_check_is_refused_with_the_way_out_and_recover_finishes(world, monkeypatch, obstacle):
    """Another writer's obstacle in a partition of the version, put after the check (after the decision):
    local files, a plain file where a nested partition's parent directory goes or a plain directory where its
    link goes; S3, another tool's ``_MANIFEST.json``. The publish is refused with the error that names it,
    says what readers see (a files table switches its partitions one at a time: the one before is live) and
    that `eo recover` finishes once it is moved - never a bare FileExistsError, never "nothing of it is
    live". No half-made link is left; recover then publishes the rest."""
    only(world, "files-local", "files-s3", why="a files table switches partitions one at a time")
    if world.kind == "files-s3" and obstacle.endswith("link"):
        pytest.skip("S3 has no directories: another tool's manifest is the obstacle")
    from exactly_once.errors import TargetSchemaError

    keep, other = f"{PART}/h=00", "dt=2026-03-01/h=00"
    sink = world.sink()
    a, b, again = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20)
    world.commit(sink, IV, {keep: [a]})
    st = sink.storage
    at = st.join(sink.table, other, "_MANIFEST.json") if world.kind == "files-s3" else \
        os.path.join(sink.table, "dt=2026-03-01" if obstacle.endswith("parent") else other)

    def put() -> None:  # after the decision, before the publish
        if world.kind == "files-s3":
            st.write_atomic(at, b'{"files": ["part-0.parquet"]}')
        elif obstacle.endswith("parent"):
            with open(at, "w") as f:
                f.write("theirs\n")
        else:
            os.makedirs(at)

    txn = sink.begin(IV)
    world.stage(sink, txn, {keep: [again], other: [b]})
    sink.pre_commit(txn)
    state = interleave(monkeypatch, TwoPhaseCommitSink, "_publish", lambda *a: True, put)
    with pytest.raises(TargetSchemaError) as err:
        sink.commit(txn)
    monkeypatch.undo()
    said = str(err.value)
    assert state["fired"] and f"{txn.name} is COMMITTED" in said and "dt=2026-03-01" in said, said
    assert "partitions switched before the refusal are live" in said and "eo recover" in said, said
    assert sink.live_version(keep) == txn.name  # switched before (dt=2026-01-01 sorts first)
    if world.kind == "files-s3":
        st.remove_tree(at)  # the way out the error names: moved out of the prefix
    else:
        assert not [n for n in os.listdir(os.path.dirname(at)) if n.endswith(".link")]
        os.rename(at, os.path.join(os.path.dirname(sink.table), "theirs"))  # the way out the error names
    world.sink().recover(IV)
    live = {part: sorted(_read_rows(sink, sink.live_files(part))) for part in (keep, other)}
    assert live == {keep: again, other: b}
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []
