"""What the adversarial review of issue 44 broke (docs/RELIABILITY.md, "Review 44"), each on every target
where it can happen: refused before the decision with an error that says what to do (the transaction
ends ABORTED, nothing is published, the interval is not stuck once the cause is gone), or handled exactly.

1. upsert: a staged NULL in a key column (a UNIQUE key treats NULLs as distinct) - refused;
2. upsert on MariaDB: a second UNIQUE index besides the key (ON DUPLICATE KEY UPDATE matches any) -
   refused; PostgreSQL's ON CONFLICT (key) raises on the other index, which the dry run refuses.
"""
from __future__ import annotations

import pyarrow as pa

from protocol_helpers import make_rows, open_sink

from .conftest import IV, PART
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
