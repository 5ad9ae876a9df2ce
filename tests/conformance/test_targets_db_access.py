"""The database targets' endpoints and credentials against the real servers (PostgreSQL and MariaDB on
loopback), each test on both: a URL without a port, credentials only in an Airflow connection, and no password
in any text a user can see (repr, describe, errors, logs) - a driver's own error quoting it included; and what a
connection may lack (a default database, the right to create temporary tables), each refused saying what to do."""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

import pytest
from target_helpers import pv_rows, stage, txn

from exactly_once import ConfigError, Interval
from exactly_once.errors import TargetSchemaError, TargetUnavailableError
from exactly_once.ids import TxnRef
from exactly_once.targets import DatabaseTarget

from .db_cases import PART, PORTS, app_rows, db, db_url, expected, table  # noqa: F401


def test_a_url_without_a_port_connects_to_the_servers_default_port(db, table, tmp_path):
    import re

    url = re.sub(r"@([^/:]+):\d+/", r"@\1/", db.url)  # postgresql://user@host/db: 5432; mysql: 3306
    assert url != db.url and DatabaseTarget(table, url=url).publish(
        txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]})) == {PART: "published"}
    assert db.run(f"SELECT count(*) FROM {db.q(table)}")[0][0] == 2


# ------------------------------------------------------------------------- credentials
def test_credentials_never_appear(db, table, tmp_path, monkeypatch, caplog):
    secret = "Sup3r@s3cret-pw-" + uuid.uuid4().hex[:6]  # a raw "@" too: the host is after the last one
    scheme, rest = db.url.split("://", 1)
    user, hostpart = rest.split("@", 1)
    with_pw = f"{scheme}://{user}:{secret}@{hostpart}"
    caplog.set_level("DEBUG")
    texts = []
    t = DatabaseTarget(table, url=with_pw)
    texts += [repr(t), str(t), t.describe()]
    try:  # the binding's spec keeps the URL without its password (MariaDB refuses root's: its error, then)
        texts.append(json.dumps(t.binding()))
    except ConfigError as exc:
        texts.append(str(exc))
    monkeypatch.setenv("AIRFLOW_CONN_EO_TARGET_TEST", with_pw.replace("postgresql://", "postgres://"))
    by_conn = DatabaseTarget(table, conn_id="eo_target_test")
    texts += [repr(by_conn), by_conn.describe()]
    for bad in (DatabaseTarget("no_such_table", url=with_pw),
                DatabaseTarget(table, url=with_pw.replace(hostpart.split("/")[0], "127.0.0.1:1"), retries=0)):
        with pytest.raises((TargetSchemaError, TargetUnavailableError, ConfigError)) as err:
            bad.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
        texts.append(str(err.value))
    if db.kind == "postgresql":  # trust auth ignores the password: both publish
        assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]})) == {PART: "published"}
        assert by_conn.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]})) == {PART: "already"}
    else:  # root has no password: the server refuses it, and the refusal must not quote it
        with pytest.raises(ConfigError) as err:
            t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
        texts.append(str(err.value))
    texts += [r.getMessage() for r in caplog.records]
    assert texts and not [x for x in texts if secret in x]


def test_credentials_only_in_an_airflow_connection_reach_the_server(db, table, tmp_path, monkeypatch):
    """The user and password of an Airflow connection (``AIRFLOW_CONN_<ID>``, nothing in the DAG) are the
    ones the target logs in with: MariaDB checks them for real (a user of our own with a password: the
    connection publishes, the same one without its password is refused and says so); PostgreSQL here trusts
    loopback, so its session's own record of the password it was given is compared."""
    secret = "C0nn-only-pw-ü€-" + uuid.uuid4().hex[:6]  # not ASCII: sent as UTF-8, as the server stored it
    user = f"eo_u_{uuid.uuid4().hex[:8]}"
    hostpart = db.url.split("@", 1)[1]  # host:port/database
    if db.kind == "mysql":
        for host in ("%", "localhost", "127.0.0.1"):
            db.run(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY '{secret}'")
            db.run(f"GRANT ALL ON {db.q(hostpart.split('/')[1])}.* TO '{user}'@'{host}'")
    else:
        db.run(f"CREATE ROLE {user} LOGIN PASSWORD '{secret}'")
        db.run(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {user}")
        db.run(f"GRANT ALL ON SCHEMA public TO {user}")
    scheme = "postgres" if db.kind == "postgresql" else "mysql"
    monkeypatch.setenv("AIRFLOW_CONN_EO_CONN_ONLY", f"{scheme}://{user}:{quote(secret, safe='')}@{hostpart}")
    monkeypatch.setenv("AIRFLOW_CONN_EO_CONN_NO_PW", f"{scheme}://{user}@{hostpart}")
    monkeypatch.setenv("AIRFLOW_CONN_EO_CONN_NO_DB", f"{scheme}://{user}:{quote(secret, safe='')}@{hostpart.split('/')[0]}")
    t = DatabaseTarget(table, conn_id="eo_conn_only")
    ep = t.endpoint()
    assert (ep.user, ep.password, ep.database) == (user, secret, hostpart.split("/")[1])
    assert secret not in repr(ep) + t.describe()
    no_db = DatabaseTarget(table, conn_id="eo_conn_no_db").endpoint()  # the server's default database, as a URL
    assert (no_db.database, no_db.tls, no_db.password) == (None, False, secret)
    monkeypatch.setenv("AIRFLOW_CONN_EO_CONN_NO_PORT", f"{scheme}://{user}@{hostpart.split(':')[0]}/db")
    no_port = DatabaseTarget(table, conn_id="eo_conn_no_port").endpoint()  # the dialect's default port
    assert (no_port.host, no_port.port, no_port.database) == ("127.0.0.1", PORTS[db.kind], "db")
    monkeypatch.setenv("AIRFLOW_CONN_EO_CONN_EXTRA", f"{scheme}://{user}@{hostpart}?connect_timeout=7")
    assert DatabaseTarget(table, conn_id="eo_conn_extra").endpoint().options == {"connect_timeout": "7"}  # its extra
    if db.kind == "postgresql":
        conn = t.dialect.connect(ep)
        try:
            assert (conn.info.user, conn.info.password) == (user, secret)
        finally:
            conn.close()
    else:
        with pytest.raises(ConfigError) as err:
            DatabaseTarget(table, conn_id="eo_conn_no_pw", retries=0).publish(
                txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
        assert "Access denied" in str(err.value) and secret not in str(err.value), err.value
        assert db.count(table) == 0
    rows = pv_rows("a", 3)
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    assert app_rows(db, table) == expected(rows)


def test_a_driver_error_quoting_the_password_is_redacted(db, table, tmp_path, monkeypatch):
    """A driver error that quotes the password (forced at the driver's connect: neither driver does today, a
    proxy's or a future one's may) reaches the error with the password replaced by ``***``."""
    secret = "Dr1ver-pw-" + uuid.uuid4().hex[:6]
    scheme, rest = db.url.split("://", 1)
    t = DatabaseTarget(table, url=f"{scheme}://{rest.split('@', 1)[0]}:{secret}@{rest.split('@', 1)[1]}", retries=0)
    if db.kind == "postgresql":
        import psycopg2

        def leaky(*args, **kwargs):
            raise psycopg2.OperationalError(f"connection failed: password {secret} was refused by the pooler")

        monkeypatch.setattr(psycopg2, "connect", leaky)
    else:
        import pymysql

        def leaky(*args, **kwargs):
            raise pymysql.err.OperationalError(2013, f"Lost connection: proxy refused password {secret}")

        monkeypatch.setattr(pymysql, "connect", leaky)
    with pytest.raises((TargetUnavailableError, ConfigError)) as err:
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
    assert secret not in str(err.value) and "***" in str(err.value), err.value


# ------------------------------------------------------------------------- what the connection lacks
def _hours(db) -> tuple[str, object]:
    """A table replaced by partition columns dt/hour (an interval's second publish compares its partitions with
    the first's: the guard's temporary tables), and the staged hour ``h`` of 2026-01-01."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(f"CREATE TABLE {db.q(name)} (dt date NOT NULL, hour int NOT NULL, k varchar(20) NOT NULL)")
    def hour(tmp_path, h: int):
        start = datetime(2026, 1, 1, h, tzinfo=timezone.utc)
        return (TxnRef("p", "s", Interval(start, start + timedelta(hours=1)), 1),
                stage(tmp_path, {f"dt=2026-01-01/hour={h:02d}": [[{"k": f"k{h}"}]]}))
    return name, hour


def test_a_connection_naming_no_database_publishes_into_qualified_tables(db, tmp_path):
    """MariaDB: a URL (or Airflow connection) without a database, the table and commit table qualified as
    ``database.table``: every interval publishes - the partition guard's temporary tables go into the table's
    database. Unqualified names without a database are refused with what to do, not as an outage."""
    if db.kind != "mysql":
        pytest.skip("mysql: PostgreSQL always connects to a database; a dotted name there is a schema")
    name, hour = _hours(db)
    database = db.url.rsplit("/", 1)[1]
    url = db.url.rsplit("/", 1)[0]
    t = DatabaseTarget(f"{database}.{name}", url=url, commit_table=f"{database}.c_{name}", retries=0)
    for h in (3, 4):
        assert t.publish(*hour(tmp_path, h)) == {f"dt=2026-01-01/hour={h:02d}": "published"}
    assert sorted(r[0] for r in db.rows(name, "k")) == ["k3", "k4"]
    with pytest.raises(ConfigError, match=r"names no database.*qualify table and commit_table"):
        DatabaseTarget(f"{database}.{name}", url=url, retries=0).publish(*hour(tmp_path, 5))
    keyed = f"u_{name}"  # upsert too: its stage table goes into the table's database (it needed a default one)
    db.run(f"CREATE TABLE {db.q(keyed)} (dt date NOT NULL, hour int NOT NULL, k varchar(20) NOT NULL, PRIMARY KEY (k))")
    up = DatabaseTarget(f"{database}.{keyed}", url=url, commit_table=f"{database}.c_{name}", mode="upsert",
                        key_columns=("k",), retries=0)
    for h in (6, 7):
        txn_h, version = hour(tmp_path, h)
        up.check(txn_h, version)
        assert up.publish(txn_h, version) == {f"dt=2026-01-01/hour={h:02d}": "published"}
    assert sorted(r[0] for r in db.rows(keyed, "k")) == ["k6", "k7"]


def test_a_user_who_may_not_create_temporary_tables_is_told_the_grant(db, tmp_path):
    """A loader without the right to create temporary tables (MariaDB: no CREATE TEMPORARY TABLES; PostgreSQL:
    TEMPORARY revoked from PUBLIC) publishes an interval's first partitions; the next interval's, compared with
    them in two temporary tables, is refused naming the GRANT - nothing of it published -, and after the grant
    it publishes."""
    name, hour = _hours(db)
    database, user = db.url.rsplit("/", 1)[1], f"eo_tmp_{uuid.uuid4().hex[:8]}"
    hosts = ("%", "localhost", "127.0.0.1")
    if db.kind == "mysql":
        for host in hosts:
            db.run(f"CREATE USER '{user}'@'{host}'")
            db.run(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON `{database}`.* TO "
                   f"'{user}'@'{host}'")
        grant = [f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO '{user}'@'{host}'" for host in hosts]
    else:
        db.run(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
        db.run(f"CREATE ROLE {user} LOGIN")
        db.run(f"GRANT ALL ON SCHEMA public TO {user}")
        db.run(f"GRANT ALL ON {db.q(name)} TO {user}")
        grant = [f'GRANT TEMPORARY ON DATABASE "{database}" TO {user}']
    try:
        t = DatabaseTarget(name, url=db.url.replace("://root@", f"://{user}@").replace("://postgres@", f"://{user}@"),
                           commit_table=f"c_{name}", retries=0)
        assert t.publish(*hour(tmp_path, 3)) == {"dt=2026-01-01/hour=03": "published"}
        advice = re.escape(grant[0].rsplit(" TO ", 1)[0] + " TO <user>")  # this dialect's statement, as run below
        for step in ("check", "publish"):
            with pytest.raises(ConfigError, match=rf"may not create them.*{advice}, then publish again"):
                getattr(t, step)(*hour(tmp_path, 4))
        assert [r[0] for r in db.rows(name, "k")] == ["k3"]
        for sql in grant:
            db.run(sql)
        assert t.publish(*hour(tmp_path, 4)) == {"dt=2026-01-01/hour=04": "published"}
        assert sorted(r[0] for r in db.rows(name, "k")) == ["k3", "k4"]
    finally:
        if db.kind == "mysql":
            for host in hosts:
                db.run(f"DROP USER IF EXISTS '{user}'@'{host}'")
        else:
            db.run(f"DROP OWNED BY {user}")
            db.run(f"DROP ROLE {user}")


def test_a_url_with_another_port_connects_to_that_port(db, table, tmp_path):
    """The server behind another port (a forwarder on a free loopback port, as a second instance or a proxy
    would be): the URL's port is the one connected to - not the dialect's default, where this test's server
    also listens - and the interval publishes through it."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port, seen = listener.getsockname()[1], []

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def forward() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            seen.append(port)
            server = socket.create_connection(("127.0.0.1", PORTS[db.kind]))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=forward, daemon=True).start()
    try:
        url = db.url.replace(f":{PORTS[db.kind]}/", f":{port}/")
        assert url != db.url and DatabaseTarget(table, url=url).publish(
            txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]})) == {PART: "published"}
    finally:
        listener.close()
    assert seen and db.count(table) == 2


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])  # a kind: make mutants' rows run it
@pytest.mark.parametrize("retries", [-1, "2", 1.5])
def test_retries_must_be_a_count(kind, retries):
    with pytest.raises(ConfigError, match="retries must be an integer >= 0"):
        DatabaseTarget("t", url=f"{kind}://root@127.0.0.1:{PORTS[kind]}/x", retries=retries)
