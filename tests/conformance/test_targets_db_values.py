"""What a database does quietly to a version's rows, or refuses only at COMMIT, seen by the check before the
decision (session 24's review of the database targets), each on the servers where it can happen: bad values
behind many notes (MariaDB's load reported only its first five diagnostics, notes included), text through a
client encoding other than UTF-8, an UNLOGGED table, a deferred constraint, and a statement timeout or a
read-only database reported as unavailable (retry later), not as a raw driver error."""
from __future__ import annotations

import pytest
from target_helpers import stage, txn

from exactly_once.errors import TargetSchemaError, TargetUnavailableError
from exactly_once.targets import DatabaseTarget

from .db_cases import PART, db, db_url, marker, table  # noqa: F401


def no_marker(db, name: str) -> bool:
    """No marker row of the table (the commit table may not exist yet: nothing was ever published here)."""
    known = db.run("SELECT count(*) FROM information_schema.tables WHERE table_name = '_eo_commits' AND "
                   + ("table_catalog = current_database()" if db.kind == "postgresql" else "table_schema = DATABASE()"))
    return not known[0][0] or marker(db, name) is None


# a case of PostgreSQL's alone (MariaDB has no such setting): its tests run on that server only, not skipped
only_postgresql = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
only_mysql = pytest.mark.parametrize("db_url", ["mysql"], indirect=True)


def test_bad_values_behind_many_notes_are_refused_before_the_decision(db, tmp_path):
    name = f"v_{db.kind}_notes"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, app_id varchar(5) NOT NULL, amount decimal(10,2) NOT NULL)"
           + (" ENGINE=InnoDB" if db.kind == "mysql" else ""))
    rounded = [{"app_id": f"a{i}", "amount": 1.234} for i in range(6)]  # each a note on MariaDB: rounded
    bad = stage(tmp_path, {PART: [[*rounded, {"app_id": "much too long", "amount": 1.0}]]})
    t = DatabaseTarget(name, url=db.url)
    with pytest.raises(TargetSchemaError):
        t.check(txn(epoch=1), bad)
    assert db.count(name) == 0 and no_marker(db, name)
    good = stage(tmp_path, {PART: [rounded]})  # rounding alone is the column's scale, not a refusal
    t.check(txn(epoch=1), good)
    assert t.publish(txn(epoch=1), good) == {PART: "published"}
    assert sorted(float(r[0]) for r in db.run(f"SELECT amount FROM {db.q(name)}")) == [1.23] * 6


@only_postgresql
def test_text_is_stored_as_sent_whatever_the_clients_default_encoding(db, table, tmp_path, monkeypatch):
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")  # a role's or server's default, for the target's sessions
    rows = [{"app_id": "Zürich €", "pv": 1, "uv": 1, "cumulative_pv": 1}]
    t = DatabaseTarget(table, url=db.url)
    version = stage(tmp_path, {PART: [rows]})
    t.check(txn(epoch=1), version)
    assert t.publish(txn(epoch=1), version) == {PART: "published"}
    assert db.run(f"SELECT app_id FROM {db.q(table)}") == [("Zürich €",)]  # read back in UTF-8


@only_postgresql
def test_an_unlogged_table_is_refused_before_the_decision(db, table, tmp_path):
    db.run(f"ALTER TABLE {db.q(table)} SET UNLOGGED")
    with pytest.raises(TargetSchemaError, match="UNLOGGED.*SET LOGGED"):
        DatabaseTarget(table, url=db.url).check(txn(epoch=1), stage(tmp_path, {PART: [[
            {"app_id": "a", "pv": 1, "uv": 1, "cumulative_pv": 1}]]}))
    assert db.count(table) == 0 and no_marker(db, table)


@only_postgresql
def test_a_deferred_constraint_the_publish_would_break_is_refused_by_the_check(db, table, tmp_path):
    db.run(f"ALTER TABLE {db.q(table)} ADD CONSTRAINT {db.q(table + '_pv')} UNIQUE (pv) DEFERRABLE INITIALLY DEFERRED")
    version = stage(tmp_path, {PART: [[{"app_id": "a", "pv": 7, "uv": 1, "cumulative_pv": 1},
                                     {"app_id": "b", "pv": 7, "uv": 1, "cumulative_pv": 1}]]})
    with pytest.raises(TargetSchemaError):
        DatabaseTarget(table, url=db.url).check(txn(epoch=1), version)
    assert db.count(table) == 0 and no_marker(db, table)


@only_postgresql
def test_an_unlogged_partition_of_a_partitioned_table_is_refused_before_the_decision(db, tmp_path):
    name = "v_unlogged_part"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, app_id varchar(64) NOT NULL, pv bigint NOT NULL, uv bigint "
           "NOT NULL, cumulative_pv bigint NOT NULL, PRIMARY KEY (dt, app_id)) PARTITION BY RANGE (dt)")
    db.run(f"CREATE UNLOGGED TABLE {db.q(name + '_2026')} PARTITION OF {db.q(name)} FOR VALUES FROM ('2026-01-01') "
           "TO ('2027-01-01')")
    with pytest.raises(TargetSchemaError, match="UNLOGGED.*_2026.*SET LOGGED"):
        DatabaseTarget(name, url=db.url).check(txn(epoch=1), stage(tmp_path, {PART: [[
            {"app_id": "a", "pv": 1, "uv": 1, "cumulative_pv": 1}]]}))
    assert db.count(name) == 0 and no_marker(db, name)


@only_postgresql
def test_a_reprocess_that_keeps_a_deferred_references_key_passes_the_check(db, table, tmp_path):
    """The dry run checks deferred constraints after its load, as its COMMIT would: a reprocess deletes the
    interval's rows and loads them again, so a row another table references (a deferred foreign key) is
    missing in between - checked at each statement, a valid reprocess was refused for good."""
    child = table + "_child"
    db.run(f"CREATE TABLE {db.q(child)} (dt date NOT NULL, app_id varchar(64) NOT NULL, FOREIGN KEY (dt, app_id) "
           f"REFERENCES {db.q(table)} (dt, app_id) DEFERRABLE INITIALLY DEFERRED)")
    rows = [{"app_id": "a0", "pv": 1, "uv": 1, "cumulative_pv": 1}]
    t = DatabaseTarget(table, url=db.url)
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    db.run(f"INSERT INTO {db.q(child)} VALUES ('2026-01-01', 'a0')")
    again = stage(tmp_path, {PART: [[{**rows[0], "pv": 2}]]})
    t.check(txn(epoch=2), again)
    assert t.publish(txn(epoch=2), again) == {PART: "published"}
    assert db.run(f"SELECT pv FROM {db.q(table)}") == [(2,)]
    dropped = stage(tmp_path, {PART: [[{**rows[0], "app_id": "a1"}]]})  # the referenced key gone: refused
    with pytest.raises(TargetSchemaError):
        t.check(txn(epoch=3), dropped)


@pytest.mark.parametrize("setting", ["statement_timeout=1", "default_transaction_read_only=on"])
@only_postgresql
def test_a_statement_timeout_or_a_read_only_database_is_unavailable_not_a_raw_error(db, table, tmp_path, monkeypatch,
                                                                                       setting):
    monkeypatch.setenv("PGOPTIONS", f"-c {setting}")  # every statement cancelled after 1 ms / a standby's refusal
    t = DatabaseTarget(table, url=db.url, retries=0)
    version = stage(tmp_path, {PART: [[{"app_id": f"a{i}", "pv": i, "uv": 1, "cumulative_pv": 1}
                                     for i in range(20000)]]})
    with pytest.raises(TargetUnavailableError, match="statement_timeout|point the target at the primary"):
        t.publish(txn(epoch=1), version)  # and says what to do if every try ends so
    monkeypatch.delenv("PGOPTIONS")
    assert db.count(table) == 0 and no_marker(db, table)


@pytest.mark.parametrize("sqlstate", ["08006", "53300", "57P01"])
@only_postgresql
def test_a_server_error_of_a_lost_connection_or_no_resources_is_retried_on_a_new_connection(db, table, tmp_path,
                                                                                              sqlstate):
    """An error whose SQLSTATE says the server went away or ran out of room - class 08 (connection exception),
    53 (insufficient resources: too many connections), 57P (operator intervention: a terminated backend) - is
    not the data's fault: the publish starts over on a new connection and the version goes live once; with no
    try left it is TargetUnavailableError (retry later), never a raw driver error. The server raises each once
    here, from a trigger: a really terminated session reaches psycopg2 without its SQLSTATE ("server closed the
    connection"), which another libpq build delivers as 57P01."""
    fn, seq = f"{table}_fails_once", f"{table}_tries"
    db.run(f"CREATE SEQUENCE {db.q(seq)}")
    db.run(f"CREATE FUNCTION {db.q(fn)}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
           f"IF nextval('{seq}') = 1 THEN RAISE EXCEPTION 'the server went away' USING ERRCODE = '{sqlstate}'; "
           f"END IF; RETURN NULL; END $$")
    db.run(f"CREATE TRIGGER {db.q(fn)} BEFORE INSERT ON {db.q(table)} FOR EACH STATEMENT EXECUTE FUNCTION "
           f"{db.q(fn)}()")
    rows = [{"app_id": f"a{i}", "pv": i, "uv": 1, "cumulative_pv": i} for i in range(3)]
    version = stage(tmp_path, {PART: [rows]})
    t = DatabaseTarget(table, url=db.url, retries=1)
    t.check(txn(epoch=1), version)  # its dry run inserts too: failed once, and passed on its second try
    assert db.run(f"SELECT last_value FROM {db.q(seq)}") == [(2,)]
    db.run(f"ALTER SEQUENCE {db.q(seq)} RESTART")  # and now the publish's first try fails
    assert t.publish(txn(epoch=1), version) == {PART: "published"}
    assert db.run(f"SELECT app_id, pv FROM {db.q(table)} ORDER BY pv") == [(r["app_id"], r["pv"]) for r in rows]
    assert marker(db, table)[0] == 1 and db.run(f"SELECT last_value FROM {db.q(seq)}") == [(2,)]  # two tries
    db.run(f"ALTER SEQUENCE {db.q(seq)} RESTART")  # fails once more: with no try left, unavailable
    with pytest.raises(TargetUnavailableError):
        DatabaseTarget(table, url=db.url, retries=0).publish(txn(epoch=2), stage(tmp_path, {PART: [rows[:1]]}))
    assert db.count(table) == 3 and marker(db, table)[0] == 1  # the first version still live, whole


def test_a_string_view_column_loads_and_a_binary_view_one_is_refused_before_the_decision(db, tmp_path):
    """Arrow's CSV writer has no view types (newer writers produce them): a string_view column is loaded as the
    strings it holds, a binary_view one refused like any binary column. Both escaped as a raw pyarrow error,
    which the protocol did not take for a refusal: no decision, the same error at every retry and recovery."""
    import pyarrow as pa

    name = f"v_{db.kind}_views"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, v {'text' if db.kind == 'postgresql' else 'longtext'})"
           + (" ENGINE=InnoDB" if db.kind == "mysql" else ""))
    t = DatabaseTarget(name, url=db.url)
    views = stage(tmp_path, {PART: [pa.table({"v": pa.array(["x", None, "z"], pa.string_view())})]})
    t.check(txn(epoch=1), views)
    assert t.publish(txn(epoch=1), views) == {PART: "published"}
    assert sorted(db.run(f"SELECT v FROM {db.q(name)}"), key=str) == sorted([("x",), (None,), ("z",)], key=str)
    binary = stage(tmp_path, {PART: [pa.table({"v": pa.array([b"a"], pa.binary_view())})]})
    with pytest.raises(TargetSchemaError, match="binary_view"):
        t.check(txn(epoch=2), binary)
    assert db.count(name) == 3


def test_durations_and_nanosecond_times_are_refused_before_the_decision_not_loaded_wrong(db, tmp_path):
    """A duration reached the table as its count of units (an hour in microseconds became 41,666 days in a
    PostgreSQL interval) and a time of day with nanoseconds was rounded (23:59:59.9999996 became 24:00:00): both
    are refused, saying how to cast them; a nanosecond time that is whole microseconds still loads."""
    import pyarrow as pa

    name = f"v_{db.kind}_times"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, v {'interval' if db.kind == 'postgresql' else 'time(6)'})"
           + (" ENGINE=InnoDB" if db.kind == "mysql" else ""))
    t = DatabaseTarget(name, url=db.url)
    hour = stage(tmp_path, {PART: [pa.table({"v": pa.array([3_600_000_000], pa.duration("us"))})]})
    with pytest.raises(TargetSchemaError, match="duration.*cast it"):
        t.check(txn(epoch=1), hour)
    late = stage(tmp_path, {PART: [pa.table({"v": pa.array([86_399_999_999_600], pa.time64("ns"))})]})
    with pytest.raises(TargetSchemaError, match="nanoseconds"):
        t.check(txn(epoch=1), late)
    assert db.count(name) == 0 and no_marker(db, name)
    if db.kind == "mysql":  # (PostgreSQL's column here is an interval: a time of day is MariaDB's)
        whole = stage(tmp_path, {PART: [pa.table({"v": pa.array([86_399_999_999_000], pa.time64("ns"))})]})
        assert t.publish(txn(epoch=1), whole) == {PART: "published"}
        assert [str(r[0]) for r in db.run(f"SELECT v FROM {db.q(name)}")] == ["23:59:59.999999"]


def signal_once(db, table: str, errno: int) -> str:
    """A MariaDB trigger on ``table`` raising server error ``errno`` for the first row of the next insert (a
    sequence counts the rows: it is not rolled back with them); returns the sequence's name."""
    seq = f"{table}_tries"
    db.run(f"CREATE SEQUENCE {db.q(seq)}")
    db.run(f"CREATE TRIGGER {db.q(table + '_fails_once')} BEFORE INSERT ON {db.q(table)} FOR EACH ROW BEGIN "
           f"IF NEXTVAL({db.q(seq)}) = 1 THEN SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = {errno}, "
           "MESSAGE_TEXT = 'raised by the test'; END IF; END")
    return seq


@pytest.mark.parametrize("errno,kind", [(1205, "transient"), (1213, "transient"), (1053, "unavailable")])
@only_mysql
def test_a_mariadb_lock_timeout_deadlock_or_shutdown_is_retried_and_then_unavailable(db, table, tmp_path, errno,
                                                                                         kind):
    """MariaDB's lock wait timeout (1205) and deadlock (1213) are transient, a server shutting down (1053) is
    unavailable: the publish starts over on a new connection and the version goes live once; with no try left
    it is TargetUnavailableError naming the kind, and with none of PostgreSQL's advice (SQLSTATE class 53)."""
    seq = signal_once(db, table, errno)
    rows = [{"app_id": f"a{i}", "pv": i, "uv": 1, "cumulative_pv": i} for i in range(3)]
    assert DatabaseTarget(table, url=db.url, retries=1).publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) \
        == {PART: "published"}
    assert db.count(table) == 3 and marker(db, table)[0] == 1
    db.run(f"ALTER SEQUENCE {db.q(seq)} RESTART")
    with pytest.raises(TargetUnavailableError, match=rf"\({kind}, 1 attempt\(s\)\)") as raised:
        DatabaseTarget(table, url=db.url, retries=0).publish(txn(epoch=2), stage(tmp_path, {PART: [rows[:1]]}))
    assert "out of disk" not in str(raised.value) and "raised by the test" in str(raised.value)
    assert db.count(table) == 3 and marker(db, table)[0] == 1


@only_mysql
def test_a_mariadb_refusal_of_the_rows_is_not_retried(db, table, tmp_path):
    """An error of the rows' own (1054, an unknown column: here a table's trigger naming one) fails on every
    try: refused at once as TargetSchemaError, not started over as if the server had gone away."""
    seq = signal_once(db, table, 1054)
    with pytest.raises(TargetSchemaError, match="raised by the test"):
        DatabaseTarget(table, url=db.url, retries=2).publish(txn(epoch=1), stage(tmp_path, {PART: [[
            {"app_id": "a", "pv": 1, "uv": 1, "cumulative_pv": 1}]]}))
    assert db.run(f"SELECT NEXTVAL({db.q(seq)})") == [(2,)]  # one try
    assert db.count(table) == 0 and no_marker(db, table)


@pytest.mark.parametrize("kind", ["mysql"])
def test_a_driver_error_without_a_server_code_is_unavailable(kind):
    """PyMySQL's own errors carry no server code - a packet out of sequence (a proxy cut the stream), or no
    arguments at all: the connection is broken, so the publish starts over on a new one (unavailable)."""
    import pymysql

    from exactly_once.targets.sql_dialects import DIALECTS

    for exc in (pymysql.err.InternalError("Packet sequence number wrong - got 3 expected 1"),
                pymysql.err.InternalError(), pymysql.err.OperationalError()):
        assert DIALECTS[kind].classify(exc) == "unavailable", exc
