"""The table page's "one pending action per interval" rule on a PostgreSQL metadata DB, where the row lock
is real (SQLite ignores ``FOR UPDATE``): two confirmations of one action at once make one run.

``actions.trigger`` locks the pipeline DAG's row, runs the confirm step's checks (``webapp._plan``: the runs
on the table, read through ``runs.table_runs``), then creates the run. The checks must read in the locking
transaction: Airflow's ``create_session()`` is the thread's scoped session, so a check that opened one
committed it and released the lock before the run was created, and a second confirmation got through.

One fresh PostgreSQL database per module (Airflow's ``initdb``, ~6 s), the pipeline's DAG serialized in it;
the ORM of this process is pointed at it and back.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest

from airflow_helpers import postgres_metadata
from target_helpers import db_name, pg_connect
from ui_server import commit_day

pytestmark = pytest.mark.airflow

DAG_ID, SINK = "lock_pipeline", "t"


@pytest.fixture(scope="module")
def pg_meta(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A fresh Airflow metadata DB on PostgreSQL with the pipeline's DAG serialized; the table has a day."""
    from airflow.sdk import DAG, CronDataIntervalTimetable

    from exactly_once.airflow import exactly_once_group
    from test_interval_runs import config

    root = tmp_path_factory.mktemp("lock")
    cfg = config(root, pipeline=DAG_ID, sink=SINK, partitions="dt={start:%Y-%m-%d}")
    with DAG(DAG_ID, schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False) as dag:
        exactly_once_group(cfg)
    with postgres_metadata(dag) as url:
        commit_day(cfg.sink_handle(), "2026-01-01", "run-d1", "s1")
        yield {"config": cfg, "db": db_name(url)}


def _waiting_on_a_lock(dbname: str, thread: threading.Thread, deadline: float = 60) -> bool:
    """Whether a session of ``dbname`` waits on a lock before ``thread`` ends (a condition, not a delay)."""
    conn = pg_connect(dbname)
    try:
        end = time.monotonic() + deadline
        while thread.is_alive() and time.monotonic() < end:
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                            "WHERE NOT l.granted AND a.datname = %s", (dbname,))
                if cur.fetchone()[0]:
                    return True
            time.sleep(0.02)
        return False
    finally:
        conn.close()


def test_two_confirmations_at_once_make_one_run_the_second_refused_naming_the_first(pg_meta):
    """Forced interleaving: A runs the real check in its locking transaction, then B starts the whole trigger
    and must wait on the DAG's row lock until A created its run; then B's check sees that run and refuses."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from exactly_once.airflow import actions, webapp
    from exactly_once.airflow.tables import TableRef

    cfg = pg_meta["config"]
    req = actions.Request("recover", TableRef(DAG_ID, SINK, cfg.table_url, cfg))
    got: dict[str, Any] = {}

    def second() -> None:
        try:
            got["B"] = actions.trigger(req, "bob", actions.form_token("bob", req), "B asked",
                                       check=lambda session: webapp._plan(req, session).refusal)
        except Exception as exc:  # noqa: BLE001 - asserted below
            got["B"] = exc

    b = threading.Thread(target=second)

    def check_a(session: Any) -> str:
        refusal = webapp._plan(req, session).refusal      # the real confirm check, in the locking transaction
        b.start()
        got["B waited"] = _waiting_on_a_lock(pg_meta["db"], b)
        return refusal

    [run_a] = actions.trigger(req, "alice", actions.form_token("alice", req), "A asked", check=check_a)
    b.join(60)
    assert got["B waited"], f"B did not wait for A's row lock: {got.get('B')!r}"
    assert isinstance(got["B"], actions.RefusedError) and f"run {run_a} of {DAG_ID}" in str(got["B"]), got["B"]
    with create_session() as session:
        runs = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == DAG_ID)).all()
    assert runs == [run_a]


def _no_runs() -> None:
    from sqlalchemy import delete

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(delete(DagRun).where(DagRun.dag_id == DAG_ID))


@pytest.mark.parametrize("where", ["row lock", "B checks after A's run", "B creates after A's run"])
def test_a_double_submit_of_one_confirmation_makes_one_run_and_the_second_is_told_it_was_used(pg_meta, monkeypatch,
                                                                                            where):
    """Issue 47: a double click sends one token twice. Each interleaving forced: with the real row lock B waits
    for A; without it (SQLite ignores ``FOR UPDATE``: ``_lock`` made a no-op), A creates and commits its run
    while B is inside its check, or after B's check and before B creates its run (the unique run id refuses B).
    Every way: one run, and B gets TokenUsedError (the page's 403 "used already"), never a refusal naming
    its own run or a raw IntegrityError."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from exactly_once.airflow import actions, webapp
    from exactly_once.airflow.tables import TableRef

    _no_runs()
    cfg = pg_meta["config"]
    req = actions.Request("recover", TableRef(DAG_ID, SINK, cfg.table_url, cfg))
    token = actions.form_token("admin", req)
    at_point, a_done, got = threading.Event(), threading.Event(), {}
    real_unused = actions._unused
    if where != "row lock":
        monkeypatch.setattr(actions, "_lock", lambda session, dag_id: None)

    def check_b(session: Any) -> str:
        if where == "B checks after A's run":
            at_point.set()
            assert a_done.wait(60)
        return webapp._plan(req, session).refusal

    def unused(session: Any, dag_id: str, run_id: str) -> None:
        real_unused(session, dag_id, run_id)
        if where == "B creates after A's run" and threading.current_thread().name == "B":
            at_point.set()
            assert a_done.wait(60)

    monkeypatch.setattr(actions, "_unused", unused)

    def second() -> None:
        try:
            got["B"] = actions.trigger(req, "admin", token, check=check_b)
        except Exception as exc:  # noqa: BLE001 - asserted below
            got["B"] = exc

    b = threading.Thread(target=second, name="B")
    if where == "row lock":
        def check_a(session: Any) -> str:
            refusal = webapp._plan(req, session).refusal
            b.start()
            got["B waited"] = _waiting_on_a_lock(pg_meta["db"], b)
            return refusal

        [run_a] = actions.trigger(req, "admin", token, check=check_a)
        assert got["B waited"]
    else:
        b.start()
        assert at_point.wait(60), got
        [run_a] = actions.trigger(req, "admin", token, check=lambda session: webapp._plan(req, session).refusal)
        a_done.set()
    b.join(60)
    assert isinstance(got["B"], actions.TokenUsedError) and "used already" in str(got["B"]), got["B"]
    assert "INSERT" not in str(got["B"]) and "IntegrityError" not in str(got["B"])
    with create_session() as session:
        runs = session.scalars(select(DagRun.run_id).where(DagRun.dag_id == DAG_ID)).all()
    assert runs == [run_a]
