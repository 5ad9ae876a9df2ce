"""Issue 13: what the Airflow UI and CLI do to an interval, through Airflow's own code on a real metadata DB.

Each test runs the operations exactly as Airflow 3 implements them - ``DAG.clear`` / ``partial_subset``
(what a "Clear" includes), ``set_task_instance_state`` ("Mark success"), ``_create_backfill``
(``airflow backfill create --reprocess-behavior``) - on the serialized DAG in a SQLite metadata DB, then
runs the task instances Airflow would schedule, in its order (``DagRun.update_state``, the loop of
``airflow dags test``), through the Task SDK's in-process runner (XCom, outlets and asset events are
real). Only the write task is a stand-in (the pyarrow job of ``test_interval_runs``: no JVM). Every
test asserts on the data (rows exactly once, the live version) and on the run's and tasks' states. The
metadata DB and the driver are ``airflow_helpers``'s.

One metadata DB per module (its own file, never the demo's); each test has its own DAG id and data root.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_helpers import Pipeline, session  # noqa: F401 - the module's metadata DB fixture
from test_interval_runs import land, month

pytestmark = pytest.mark.airflow

UTC = timezone.utc
PART = "month=2013-01"


@pytest.fixture
def pipe(session, tmp_path, request) -> Pipeline:
    land(tmp_path, "2013-01", "a.csv", [1, 2])
    land(tmp_path, "2013-02", "a.csv", [10])
    import hashlib

    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    short = name if len(name) <= 48 else f"{name[:40]}_{hashlib.sha1(name.encode()).hexdigest()[:7]}"
    return Pipeline(session, tmp_path, short)  # the DAG id is the pipeline: a run name has at most 128 characters


def green_run(pipe: Pipeline, m: int = 1) -> Any:
    dr = pipe.create_run(m)
    assert set(pipe.drive(dr).values()) == {"success"}
    assert pipe.run_state(dr) == "success"
    return dr


JAN = [{"n": 2, "total": 3, "month": "2013-01"}]


# ------------------------------------------------------------------------------------------ clear
def test_clearing_write_without_downstream_keeps_the_live_version_and_leaves_nothing_staged(pipe):
    """Clear of ``write`` alone re-runs begin, write and the teardown (Airflow adds the setup and the
    teardown): the new attempt writes, nobody pre-commits or commits it, the teardown aborts it. The live
    version stays the first one, its rows once; nothing is left staged."""
    dr = green_run(pipe)
    cleared = pipe.sdag.clear(task_ids=["t.write"], run_id=dr.run_id, session=pipe.session, dry_run=True)
    assert sorted(ti.task_id for ti in cleared) == ["t.abort", "t.begin", "t.write"]
    pipe.sdag.clear(task_ids=["t.write"], run_id=dr.run_id, session=pipe.session)
    pipe.session.commit()
    assert set(pipe.drive(dr).values()) == {"success"} and pipe.run_state(dr) == "success"
    assert pipe.epochs() == {1: "COMMITTED", 2: "ABORTED"}
    assert pipe.live() == pipe.sink.ref(month(1), 1).name and pipe.rows() == JAN
    assert pipe.staged() == []
    assert pipe.note(dr) == DISCARDED


DISCARDED = ("not published: e2 was aborted by the teardown - its commit did not run (clear the write task with "
             "Downstream to publish a new version); e1 stays live")


def test_clearing_write_with_downstream_publishes_an_identical_version(pipe):
    """Clear of ``write`` with Downstream (``partial_subset(include_downstream=True)``: the whole chain)
    replays the committed inputs and publishes a new version with the same rows, once."""
    dr = green_run(pipe)
    subset = pipe.sdag.partial_subset(task_ids=["t.write"], include_downstream=True, include_upstream=False)
    assert sorted(subset.task_dict) == ["t.abort", "t.begin", "t.commit", "t.pre_commit", "t.validate", "t.write"]
    pipe.sdag.clear(task_ids=list(subset.task_dict), run_id=dr.run_id, session=pipe.session)
    pipe.session.commit()
    assert set(pipe.drive(dr).values()) == {"success"}
    assert pipe.epochs() == {1: "COMMITTED", 2: "COMMITTED"}
    assert pipe.live() == pipe.sink.ref(month(1), 2).name and pipe.rows() == JAN
    assert pipe.sink.status(month(1))[2].records["open"]["meta"]["replayed"] is True
    assert pipe.staged() == []


# ------------------------------------------------------------------------------------------ mark success
# "Mark success" on a phase before it ran: the next phase that needs its result refuses at once (final,
# no retry) and says what to clear; the teardown aborts the attempt; the first version stays live.
REFUSED_BY = {"begin": ("write", None), "write": ("pre_commit", "the write task did not run"),
              "pre_commit": ("validate", "the pre_commit task did not run"),
              "validate": ("commit", "the validate task did not run"), "commit": (None, None)}


@pytest.mark.parametrize("marked", list(REFUSED_BY))
def test_mark_success_on_a_phase_publishes_nothing_unrun_and_the_next_phase_says_what_to_clear(pipe, marked):
    from airflow.utils.state import TaskInstanceState

    first = green_run(pipe)
    assert pipe.live() == pipe.sink.ref(month(1), 1).name
    refusing, says = REFUSED_BY[marked]
    tried = pipe.tries(first, refusing or "commit")
    # the whole run again (Clear the run), and the operator marks one phase success before it runs
    pipe.sdag.clear(run_id=first.run_id, session=pipe.session)
    pipe.session.commit()
    pipe.drive(first, until=f"t.{marked}")
    altered = pipe.sdag.set_task_instance_state(task_id=f"t.{marked}", run_id=first.run_id,
                                                state=TaskInstanceState.SUCCESS, session=pipe.session)
    pipe.session.commit()
    assert [ti.task_id for ti in altered] == [f"t.{marked}"]
    states = pipe.drive(first)
    assert pipe.live() == pipe.sink.ref(month(1), 1).name and pipe.rows() == JAN  # nothing new published
    assert pipe.staged() == []
    if marked == "begin":  # begin's XCom is the previous try's: the write's spec is gone, it fails
        assert states["write"] == "failed" and pipe.epochs() == {1: "COMMITTED"}
    else:
        assert pipe.epochs() == {1: "COMMITTED", 2: "ABORTED"}
    if refusing is None:  # commit marked success: nothing published, the teardown aborted the attempt
        assert states == {"begin": "success", "write": "success", "pre_commit": "success", "validate": "success",
                          "commit": "success", "abort": "success"}
        assert pipe.run_state(first) == "success" and pipe.note(first) == DISCARDED
        return
    assert states[refusing] == "failed" and pipe.run_state(first) == "failed"
    if says is not None:  # refused on its first try (final), naming the task to clear
        assert pipe.tries(first, refusing) == tried + 1
        note = pipe.note(first)
        assert note.startswith("aborted: PhaseNotRunError") and says in note and "Downstream" in note


def test_marking_a_failed_gate_success_publishes_nothing(pipe):
    """The gate failed (the teardown aborted the attempt); "Mark success" on validate clears commit
    (upstream_failed), which then finds the attempt aborted and fails at once: nothing unvalidated is
    published, the first version stays live."""
    from airflow.utils.state import TaskInstanceState

    first = green_run(pipe)
    tried = pipe.tries(first, "commit")
    pipe.bad_counts.add("2013-01")
    pipe.sdag.clear(run_id=first.run_id, session=pipe.session)
    pipe.session.commit()
    states = pipe.drive(first)
    assert states["validate"] == "failed" and states["commit"] == "upstream_failed"
    assert pipe.epochs() == {1: "COMMITTED", 2: "ABORTED"}
    pipe.sdag.set_task_instance_state(task_id="t.validate", run_id=first.run_id, state=TaskInstanceState.SUCCESS,
                                      session=pipe.session)
    pipe.session.commit()
    assert pipe.states(first)["commit"] is None  # Airflow cleared it: it runs now
    states = pipe.drive(first)
    assert states["validate"] == "success" and states["commit"] == "failed"
    assert pipe.tries(first, "commit") == tried + 1  # failed at once, no retry
    assert pipe.run_state(first) == "failed"
    assert pipe.live() == pipe.sink.ref(month(1), 1).name and pipe.rows() == JAN
    assert pipe.epochs() == {1: "COMMITTED", 2: "ABORTED"} and pipe.staged() == []


# ------------------------------------------------------------------------------------------ backfill
def backfill(pipe: Pipeline, behavior: str, dag_run_conf: dict | None = None) -> list[Any]:
    """``airflow backfill create --dag-id <dag> --from-date 2013-01-01 --to-date 2013-02-01
    --reprocess-behavior <behavior>``; returns the runs it (re)queued, in its order."""
    from airflow.models.backfill import BackfillDagRun, ReprocessBehavior, _create_backfill
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    bf = _create_backfill(dag_id=pipe.dag_id, from_date=month(1).start, to_date=month(2).start, max_active_runs=10,
                          reverse=False, dag_run_conf=dag_run_conf, triggering_user_name="test",
                          reprocess_behavior=ReprocessBehavior(behavior))
    pipe.session.expire_all()
    ids = pipe.session.scalars(select(BackfillDagRun.dag_run_id).where(BackfillDagRun.backfill_id == bf.id,
                                                                       BackfillDagRun.dag_run_id.is_not(None))
                               .order_by(BackfillDagRun.sort_ordinal)).all()
    return [pipe.session.scalar(select(DagRun).where(DagRun.id == i)) for i in ids]


@pytest.mark.parametrize("behavior", ["completed", "failed", "none"])
def test_backfill_create_with_each_reprocess_behavior(pipe, behavior):
    """January succeeded (e1 live); February's write died (its run failed, nothing published). A backfill
    over both re-runs what its reprocess behaviour says: ``completed`` both (January replays its committed
    inputs: a new, identical version), ``failed`` only February, ``none`` neither. Every re-run ends
    exact: each month's rows once, the newest committed version live, nothing staged."""
    green_run(pipe, 1)
    pipe.broken.add("2013-02")
    feb = pipe.create_run(2)
    assert pipe.drive(feb)["write"] == "failed" and pipe.run_state(feb) == "failed"
    assert pipe.epochs(2) == {1: "ABORTED"} and pipe.live(2) is None
    pipe.broken.clear()
    runs = backfill(pipe, behavior)
    expected = {"completed": ["2013-01", "2013-02"], "failed": ["2013-02"], "none": []}[behavior]
    assert [r.data_interval_start.strftime("%Y-%m") for r in runs] == expected
    for dr in runs:
        assert set(pipe.drive(dr).values()) == {"success"} and pipe.run_state(dr) == "success"
    jan = 2 if behavior == "completed" else 1
    assert pipe.live(1) == pipe.sink.ref(month(1), jan).name
    assert pipe.live(2) == (None if behavior == "none" else pipe.sink.ref(month(2), 2).name)
    assert sorted(pipe.rows(), key=lambda r: r["month"]) == JAN + (
        [] if behavior == "none" else [{"n": 1, "total": 10, "month": "2013-02"}])
    if behavior == "completed":
        assert pipe.epochs(1) == {1: "COMMITTED", 2: "COMMITTED"}
        assert pipe.sink.status(month(1))[2].records["open"]["meta"]["replayed"] is True
    assert pipe.staged() == []


def test_the_advice_of_a_pending_predecessor_runs_it_when_its_run_failed(session, tmp_path):
    """A stateful pipeline's January run failed (its write died: nothing committed); February's begin refuses
    with PredecessorPendingError and advises an ``airflow backfill create`` of January. Followed verbatim -
    parsed by Airflow's own CLI parser, applied as its command does (``_create_backfill``) - it queues a run of
    January (Airflow's default ``--reprocess-behavior none`` created none next to the failed run), which
    commits it; February then reads its state."""
    import re
    import shlex

    from airflow.cli.cli_parser import get_parser
    from airflow.models.backfill import ReprocessBehavior, _create_backfill
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    from exactly_once.errors import PredecessorPendingError
    from exactly_once.protocol.pipeline import IntervalRun

    land(tmp_path, "2013-01", "a.csv", [1, 2])
    pipe = Pipeline(session, tmp_path, "advice_backfill", stateful=True, start=month(1).start)
    pipe.broken.add("2013-01")
    jan = pipe.create_run(1)
    assert pipe.drive(jan)["write"] == "failed" and pipe.run_state(jan) == "failed"
    pipe.broken.clear()
    with pytest.raises(PredecessorPendingError) as refused:
        IntervalRun(pipe.cfg, month(2)).predecessor()
    advised = re.search(r"`(airflow backfill create [^`]+)`", str(refused.value)).group(1)
    args = get_parser().parse_args(shlex.split(advised)[1:])
    _create_backfill(dag_id=args.dag_id, from_date=args.from_date, to_date=args.to_date,
                     max_active_runs=args.max_active_runs, reverse=args.run_backwards, dag_run_conf=None,
                     triggering_user_name="test", reprocess_behavior=ReprocessBehavior(args.reprocess_behavior
                                                                                       or "none"))
    session.expire_all()
    [again] = session.scalars(select(DagRun).where(DagRun.dag_id == pipe.dag_id)).all()   # the failed run, re-queued
    assert again.state == "queued" and again.data_interval_start == month(1).start, (advised, again.state)
    assert set(pipe.drive(again).values()) == {"success"}
    assert pipe.live(1) == pipe.sink.ref(month(1), 2).name
    assert IntervalRun(pipe.cfg, month(2)).predecessor() == pipe.sink.ref(month(1), 2)


@pytest.mark.parametrize("conf", [None, {"reprocess": True}, {"reprocess": False}])
def test_a_backfill_rerun_whose_reprocess_was_lost_fails_loudly_instead_of_replaying(pipe, conf):
    """A file landed late for committed January; ``airflow backfill create --reprocess-behavior completed``
    re-runs January's run. Airflow 3.1 drops the backfill's ``--dag-run-conf`` for a re-run (``None`` here):
    begin fails at once, publishing nothing, and says how to reprocess - not a green replay without the
    file. With the conf arriving (3.2+), ``reprocess: true`` takes the late file in and ``reprocess: false``
    replays the frozen inputs on purpose."""
    green_run(pipe, 1)
    land(pipe.root, "2013-01", "late.csv", [5])
    [run] = backfill(pipe, "completed", conf)[:1]
    states = pipe.drive(run)
    if conf is None:
        assert states["begin"] == "failed" and pipe.run_state(run) == "failed"   # at once: AirflowFailException
        assert pipe.epochs() == {1: "COMMITTED"} and pipe.rows() == JAN and pipe.staged() == []
        return
    assert set(states.values()) == {"success"} and pipe.epochs()[2] == "COMMITTED"
    jan = [r for r in pipe.rows() if r["month"] == "2013-01"]
    assert jan == ([{"n": 3, "total": 8, "month": "2013-01"}] if conf["reprocess"] else JAN)


# ------------------------------------------------------------------------------------------ asset events
def test_the_tables_asset_event_goes_out_once_per_published_version_and_schedules_its_consumer(pipe):
    """The commit task announces the table through the group's AssetAlias: one asset event per version
    that went live (with its extra), and an asset-scheduled consumer DAG is queued. Clearing commit
    (begin, commit, teardown re-run; the interval is already committed) publishes nothing and emits no
    event - a static Asset outlet would have announced a publish that did not happen."""
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.sdk import DAG, Asset
    from airflow.sdk.bases.operator import BaseOperator
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from sqlalchemy import func, select

    uri = f"file://{pipe.cfg.table_url}"
    with DAG(f"{pipe.dag_id}_consumer", schedule=[Asset(uri=uri)], start_date=datetime(2013, 1, 1, tzinfo=UTC),
             is_paused_upon_creation=False) as c:
        BaseOperator(task_id="read")
    update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(c)], {}, None, set(),
                                     session=pipe.session)
    pipe.session.commit()

    def events() -> list[dict[str, Any]]:
        pipe.session.expire_all()
        query = (select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                 .where(AssetModel.uri == uri).order_by(AssetEvent.id))
        return [e.extra for e in pipe.session.scalars(query)]

    dr = green_run(pipe)
    [extra] = events()
    assert extra["version"] == pipe.sink.ref(month(1), 1).name and extra["rows"] == 1
    assert extra["interval"] == {"start": month(1).start.isoformat(), "end": month(1).end.isoformat()}
    queued = pipe.session.scalar(select(func.count()).select_from(AssetDagRunQueue).where(
        AssetDagRunQueue.target_dag_id == c.dag_id))
    assert queued == 1
    pipe.sdag.clear(task_ids=["t.commit"], run_id=dr.run_id, session=pipe.session)
    pipe.session.commit()
    assert set(pipe.drive(dr).values()) == {"success"}
    assert pipe.epochs() == {1: "COMMITTED", 2: "ABORTED"} and pipe.live() == pipe.sink.ref(month(1), 1).name
    assert len(events()) == 1  # no event for the publish that did not happen


# ------------------------------------------------------------------------------------------ a renamed sink
def test_a_sink_renamed_mid_run_fails_at_once_and_the_teardown_ends_the_old_attempt(pipe):
    """Issue 25 class 7b: the DAG file renames the group's sink (``t`` -> ``t2``, its table moves with it,
    the task ids stay) while a run is between its write and its pre_commit. Before: pre_commit failed
    with a retryable TransactionStateError (retried), the teardown failed the same way, and the old
    attempt stayed OPEN with its staging for good. Now pre_commit fails at once (no retry) saying what to
    do, the teardown ends the old attempt in the old table, and a clear of the whole run publishes into
    the new table."""
    dr = pipe.create_run(1)
    pipe.drive(dr, until="t.pre_commit")
    assert pipe.epochs() == {1: "OPEN"} and pipe.staged() != []
    renamed = Pipeline(pipe.session, pipe.root, pipe.dag_id, sink="t2")  # the DAG file, parsed again
    states = renamed.drive(dr)
    assert states["pre_commit"] == "failed" and renamed.tries(dr, "pre_commit") == 1, states
    assert states["abort"] == "success" and renamed.run_state(dr) == "failed", states
    assert pipe.epochs() == {1: "ABORTED"} and pipe.staged() == []  # nothing of the old attempt is left
    assert "renamed between attempts" in (renamed.note(dr) or "") and "Clear the whole run" in renamed.note(dr)
    assert renamed.epochs() == {}
    renamed.sdag.clear(task_ids=list(renamed.sdag.task_dict), run_id=dr.run_id, session=renamed.session)
    renamed.session.commit()
    assert set(renamed.drive(dr).values()) == {"success"}
    assert renamed.epochs() == {1: "COMMITTED"} and renamed.rows() == JAN
