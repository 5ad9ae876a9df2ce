"""The database targets' test cases share these: one fresh database per server and per test module (dropped
after), a fresh app_pv-shaped table per test, and readers of the rows and markers. A module imports the fixtures
(``db_url``, ``db``, ``table``) to run each of its tests on both servers (their kinds: ``postgresql``, ``mysql``)."""
from __future__ import annotations

import time
import uuid

import pytest
from eo_testing import need
from target_helpers import Db, app_pv_ddl, fresh_database, reachable

from exactly_once import Interval
from exactly_once.targets import DatabaseTarget

DAY = "2026-01-01"
IV = Interval.daily(DAY)
PART = f"dt={DAY}"
PORTS = {"postgresql": 5432, "mysql": 3306}


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def db_url(request):
    need(reachable(PORTS[request.param]), f"{request.param} is not running on 127.0.0.1:{PORTS[request.param]}")
    yield from fresh_database(request.param)


@pytest.fixture
def db(db_url):
    d = Db(db_url)
    yield d
    d.close()


@pytest.fixture
def table(db):
    """A fresh app_pv-shaped table (primary key dt, app_id) in the module's database."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    db.run(app_pv_ddl(db.kind, name))
    return name


def target(db, table, **kw) -> DatabaseTarget:
    return DatabaseTarget(table, url=db.url, **kw)


def app_rows(db, table) -> list[tuple]:
    return [(str(r[0]), r[1], int(r[2]), int(r[3]), int(r[4]))
            for r in db.rows(table, "dt, app_id, pv, uv, cumulative_pv", "dt, app_id")]


def expected(rows: list[dict], day: str = DAY) -> list[tuple]:
    return sorted((day, r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)


def marker(db, table, interval=IV):
    rows = db.run("SELECT epoch, pipeline, sink, partitions, rows_loaded FROM _eo_commits WHERE target = %s AND "
                  "interval_token = %s", (table, interval.token))
    return rows[0] if rows else None


def blocked(db, user_lock: bool = False) -> bool:
    """Whether another session of this database waits for a lock (``user_lock``: the table's partition lock, an
    advisory lock / GET_LOCK; else a row lock)."""
    if db.kind == "postgresql":
        sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
               + (" AND wait_event = 'advisory'" if user_lock else ""))
    elif user_lock:
        sql = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'"
    else:
        sql = "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'"
    return db.run(sql)[0][0] > 0


def row_lock_waiters(db) -> int:
    """Sessions of this database waiting for a row lock now."""
    if db.kind == "postgresql":
        return db.run("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                      "wait_event_type = 'Lock'")[0][0]
    # MariaDB's INNODB_TRX does not list a session queued on a row lock: a statement of another session
    # of this (per-module) database that takes a row lock and is still running is one
    return db.run("SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> "
                  "CONNECTION_ID() AND COMMAND = 'Query' AND (INFO LIKE 'INSERT%%' OR INFO LIKE '%%FOR UPDATE')")[0][0]


def kill_sessions_in_transaction(db) -> int:
    """Kill every other session of this database that is inside a transaction (a publisher between its
    statements); returns how many."""
    if db.kind == "postgresql":
        return len(db.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                          "current_database() AND pid <> pg_backend_pid() AND state = 'idle in transaction'"))
    end = time.monotonic() + 5  # the publisher waits in the caller's callback; InnoDB's INNODB_TRX is a cache
    while True:                 # that may lag a transaction that just began (refreshed at most every 0.1 s)
        ids = [r[0] for r in db.run("SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t JOIN "
                                    "information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id WHERE "
                                    "p.DB = DATABASE() AND p.ID <> CONNECTION_ID()")]
        if ids or time.monotonic() > end:
            break
        time.sleep(0.15)
    for i in ids:
        db.run(f"KILL {int(i)}")
    return len(ids)


def wait_until_blocked(db, deadline: float = 60.0, user_lock: bool = False) -> None:
    """Until another session of this database waits for a lock (the second publisher queued on the marker;
    ``user_lock``: on the table's partition lock, an advisory lock / GET_LOCK)."""
    end = time.monotonic() + deadline
    while not blocked(db, user_lock):
        assert time.monotonic() < end, "the second publisher never queued on the marker lock"
        time.sleep(0.15)  # InnoDB refreshes INNODB_TRX only when it was not read for 0.1 s


def rival_inside_load(monkeypatch, db, rival) -> dict:
    """Once a publish has loaded its rows (not committed), run ``rival()`` - another publish - in a thread and
    wait until it queues on the table's lock. ``result["rival"]``: what it returned, or the TargetSchemaError it
    raised, once ``result["thread"]`` is joined."""
    import threading

    from exactly_once.errors import TargetSchemaError

    real, result = DatabaseTarget._load, {}

    def load(self, *args):
        out = real(self, *args)
        if "thread" not in result:
            def run() -> None:
                try:
                    result["rival"] = rival()
                except TargetSchemaError as exc:
                    result["rival"] = exc
            result["thread"] = threading.Thread(target=run)
            result["thread"].start()
            wait_until_blocked(db, user_lock=True)
        return out

    monkeypatch.setattr(DatabaseTarget, "_load", load)
    return result
