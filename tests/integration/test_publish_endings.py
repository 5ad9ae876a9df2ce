"""Issue 46: one way a publish ends, whoever ends it - a single run, a batched backfill, a range run.

Each test runs the same months of a monthly pipeline three ways through Airflow's own code on a real
metadata DB (``airflow_helpers``' driver, as in ``test_airflow_operations``: the Task SDK's in-process runner,
real XCom, outlets and asset events; only the write job is a stand-in, also for a batch): ``single`` - one
scheduled run per month; ``backfill`` - ``airflow backfill create`` over the months (batched: the first run's
begin hosts one batch, every run finishes at once); ``range`` - one manual run with conf ``{"eo_batch": {"end": ...}}``
(``make backfill``'s way, or a REST trigger). Every way must end each publish the same: one asset event and
one OpenLineage output per version that went live, a note on the run that published it, a run summary.
"""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo
from typing import Any

import pytest

from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunTriggeredByType, DagRunType

from exactly_once.contracts import BatchSpec, JobSpec
from exactly_once.storage import storage_for
from airflow_helpers import Pipeline, session  # noqa: F401 - the module's metadata DB fixture
from test_interval_runs import land, month, write

pytestmark = pytest.mark.airflow
WAYS = ["single", "backfill", "range"]
MONTHS = [1, 2, 3]


def stand_in_batch(url: str, attempt: int) -> None:
    """A batch's write job without Spark: every entry written as the single write would, a chained entry's
    state read from the state just staged for the entry before it (what a batch job computes in one go)."""
    store, key = storage_for(url)
    before = None
    for entry in BatchSpec.from_json(store.read_bytes(key)).entries:
        write(entry.spec, state_from=before if entry.chained else None)
        spec_store, spec_key = storage_for(entry.spec)
        before = str(Path(JobSpec.from_json(spec_store.read_bytes(spec_key)).staging_dir) / "_state")


class Endings(Pipeline):
    """The monthly pipeline batched (max_batch 4): its begin's batch write is the stand-in."""

    def __init__(self, session: Any, root: Path, dag_id: str, **cfg: Any) -> None:
        super().__init__(session, root, dag_id, **{"max_batch": 4, **cfg})
        self.dag.task_dict["t.begin"].write_batch = stand_in_batch

    def events(self) -> list[dict[str, Any]]:
        """The table's asset events, oldest first (their extras)."""
        from airflow.models.asset import AssetEvent, AssetModel
        from sqlalchemy import select

        self.session.expire_all()
        query = (select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                 .where(AssetModel.uri == f"file://{self.cfg.table_url}").order_by(AssetEvent.id))
        return [e.extra for e in self.session.scalars(query)]

    def versions(self) -> list[str]:
        """Every version that went live, by month."""
        return sorted(f"{txn.name}" for m in MONTHS if (found := self.sink.committed(month(m))) is not None
                      for txn in [found[0]])

    def run(self, way: str, months: list[int], behavior: str = "none") -> list[Any]:
        """``months`` ended ``way`` (a backfill re-runs existing runs as ``behavior`` says); the DAG runs,
        each driven to its end."""
        if way == "single":
            runs = [self.create_run(m) for m in months]
        elif way == "backfill":
            runs = self.backfill(months, behavior)
        else:
            runs = [self.range_run(months[0], months[-1])]
        for dr in runs:
            self.drive(dr)
        return runs

    def backfill(self, months: list[int], behavior: str) -> list[Any]:
        return self.backfill_between(month(months[0]).start, month(months[-1]).start, behavior)

    def backfill_between(self, first: datetime, last: datetime, behavior: str = "none") -> list[Any]:
        """``airflow backfill create`` of the intervals starting in [first, last]; its runs, in its order (an
        earlier backfill of the DAG, whose runs were driven to their end, is marked complete first)."""
        from airflow.models.backfill import Backfill, BackfillDagRun, ReprocessBehavior, _create_backfill
        from airflow.models.dagrun import DagRun
        from sqlalchemy import select, update

        self.session.execute(update(Backfill).where(Backfill.dag_id == self.dag_id, Backfill.completed_at.is_(None))
                             .values(completed_at=datetime.now(timezone.utc)))
        self.session.commit()

        bf = _create_backfill(dag_id=self.dag_id, from_date=first, to_date=last,
                              max_active_runs=10, reverse=False, dag_run_conf=None, triggering_user_name="test",
                              reprocess_behavior=ReprocessBehavior(behavior))
        self.session.expire_all()
        ids = self.session.scalars(select(BackfillDagRun.dag_run_id).where(
            BackfillDagRun.backfill_id == bf.id, BackfillDagRun.dag_run_id.is_not(None))
            .order_by(BackfillDagRun.sort_ordinal)).all()
        return [self.session.scalar(select(DagRun).where(DagRun.id == i)) for i in ids]

    def range_run(self, first: int, last: int) -> Any:
        """A manual run of ``first``'s month asking for the range up to ``last``'s (the README's trigger)."""
        return self.range_between(month(first), month(last))

    def range_between(self, iv: Any, last: Any) -> Any:
        """A manual run of interval ``iv`` asking for the range up to interval ``last``."""
        dr = self.sdag.create_dagrun(
            run_id=f"manual__range_{iv.token}", logical_date=iv.end + timedelta(microseconds=1),
            data_interval=(iv.start, iv.end),
            run_after=iv.end, run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.REST_API,
            conf={"eo_batch": {"end": last.start.isoformat()}}, state=DagRunState.RUNNING,
            session=self.session)
        self.session.commit()
        return dr

    def manual(self, m: int, conf: dict[str, Any], n: int) -> Any:
        """The ``n``-th manual run of month ``m`` with ``conf`` (a reprocess, a table action: what the table
        page, ``eo`` and the REST API create), as the REST API creates it."""
        iv = month(m)
        dr = self.sdag.create_dagrun(
            run_id=f"manual__{m}_{n}", logical_date=iv.end + timedelta(microseconds=n), data_interval=(iv.start, iv.end),
            run_after=iv.end, run_type=DagRunType.MANUAL, triggered_by=DagRunTriggeredByType.REST_API, conf=conf,
            state=DagRunState.RUNNING, session=self.session)
        self.session.commit()
        return dr

    def summaries(self) -> list[str]:
        folder = Path(self.cfg.reports_url) / "runs" / self.cfg.pipeline
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def dag_id_of(request: Any) -> str:
    """The test's DAG id - its pipeline name too: short enough for a run name (at most 128 characters)."""
    import hashlib

    name = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    return name if len(name) <= 48 else f"{name[:40]}_{hashlib.sha1(name.encode()).hexdigest()[:7]}"


@pytest.fixture
def pipe(session, tmp_path, request) -> Endings:  # noqa: F811 - the metadata DB fixture
    for m in MONTHS:
        land(tmp_path, f"2013-{m:02d}", "a.csv", [m, 10 * m])
    return Endings(session, tmp_path, dag_id_of(request))


def announced(pipe: Endings) -> tuple[list[str], list[str]]:
    """(the versions of the asset events, the versions of the OpenLineage outputs), each sorted."""
    return (sorted(e["version"] for e in pipe.events()),
            sorted(v for _, versions in pipe.lineage for v in versions))


@pytest.mark.parametrize("way", WAYS)
def test_every_publish_ends_with_one_asset_event_one_lineage_output_a_note_and_a_summary(pipe, way):
    """N months published one way: N asset events and N lineage outputs, one per version that went live
    (a batched backfill's published none before), each run's note names what it published, every version
    has its run summary, and every run succeeded."""
    runs = pipe.run(way, MONTHS)
    live = pipe.versions()
    assert len(live) == 3 and {pipe.run_state(dr) for dr in runs} == {"success"}
    assert announced(pipe) == (live, live)
    assert pipe.summaries() == live
    notes = [pipe.note(dr) for dr in runs]
    if way == "range":
        [only] = notes
        assert only.startswith("published e1: 1 row, 1 file in batch b-") and \
            only.endswith(f"and 2 other intervals of the range published ({month(2).start.isoformat()} .. "
                          f"{month(3).start.isoformat()})"), only
    else:
        assert all(n.startswith("published e1: 1 row, 1 file") for n in notes), notes
        assert all(("in batch b-" in n) == (way == "backfill") for n in notes), notes
    events = pipe.events()
    assert [e["interval"]["start"] for e in events] == [month(m).start.isoformat() for m in MONTHS]


@pytest.mark.parametrize("way", WAYS)
def test_a_decided_publish_whose_commit_died_is_finished_and_announced_once_by_whoever_runs_next(pipe, way, monkeypatch):
    """February's commit decided COMMITTED and died before publishing, and its teardown never ran (the worker
    was lost). Whoever runs February next - its own run cleared, a backfill's run, or a range run over it
    whose batch rolls the publish forward - finishes the publish and announces it: one event and one lineage
    output for it, none lost, none twice. (Before, a range run kept it in a list nothing read, reported the
    month "skipped", and it was never announced.)"""
    dr = pipe.create_run(2)
    monkeypatch.setenv("EO_FAILPOINTS", "commit.before_publish=error")
    pipe.drive(dr, until="t.abort")
    monkeypatch.delenv("EO_FAILPOINTS")
    from airflow.utils.state import DagRunState

    dr.set_state(DagRunState.FAILED)  # the teardown's worker was lost too: the run is over
    pipe.session.commit()
    decided = pipe.sink.committed(month(2))
    assert decided is not None and not decided[1].published and pipe.events() == []
    if way == "single":
        pipe.drive(pipe.create_run(1))
        pipe.drive(pipe.create_run(3))
        pipe.sdag.clear(run_id=dr.run_id, session=pipe.session)  # February's run again (Clear the run)
        pipe.session.commit()
        pipe.drive(dr)
    else:
        pipe.run(way, MONTHS, behavior="failed")  # a backfill re-runs the failed February
    assert pipe.sink.status(month(2))[decided[0].epoch].published
    events, lineage = announced(pipe)
    assert decided[0].name in events and events.count(decided[0].name) == 1, events
    assert lineage.count(decided[0].name) == 1, pipe.lineage
    live = pipe.versions()
    assert len(live) == 3 and set(live) <= set(events) and events == lineage, (live, events, lineage)


@pytest.mark.parametrize("way", ["single", "backfill"])
def test_a_try_failing_after_it_announced_is_announced_once_by_its_retry(pipe, way, monkeypatch):
    """The task that publishes (commit; a batch's host, begin) announces, then its try fails (its note's XCom
    push: the execution API did not answer). Airflow drops that try's asset event; its FAIL event must not
    carry the version's lineage, since the retry re-announces both: one asset event and one lineage output
    per version. (Before, the FAIL event reported it too: the version's output twice.)"""
    from exactly_once.airflow import endings

    real, failed = endings.leave_note, []

    def flaky(operator: Any, context: Any) -> None:
        if operator.phase == ("commit" if way == "single" else "begin") and not failed:
            failed.append(context["ti"].task_id)
            raise ConnectionError("the execution API did not answer")
        real(operator, context)

    monkeypatch.setattr(endings, "leave_note", flaky)
    months = MONTHS[:1] if way == "single" else MONTHS[:2]  # a gate (~8 s) a month in a single run
    runs = pipe.run(way, months)
    live = pipe.versions()
    assert failed and len(live) == len(months) and {pipe.run_state(dr) for dr in runs} == {"success"}
    assert pipe.tries(runs[0], failed[0].removeprefix("t.")) == 2
    assert announced(pipe) == (live, live), pipe.lineage


@pytest.mark.parametrize("way", ["backfill", "range"])
def test_a_range_or_backfill_starting_at_a_committed_month_runs_the_rest(pipe, way):
    """January is committed (its scheduled run announced it). A range run from January to March - the
    README's trigger - publishes February and March (before: it ended at once, green, "nothing to do", the
    later months never written); a backfill does the same. January is not announced again."""
    pipe.drive(pipe.create_run(1))
    jan = pipe.versions()
    runs = pipe.run(way, MONTHS)
    live = pipe.versions()
    assert len(live) == 3 and set(jan) <= set(live) and {pipe.run_state(dr) for dr in runs} == {"success"}
    assert announced(pipe) == (live, live)
    if way == "range":
        assert pipe.note(runs[0]).startswith("published e1: 1 row, 1 file before this run; and 2 other intervals")


@pytest.mark.parametrize("way", WAYS)
def test_a_rollback_to_a_version_any_way_published_ends_like_every_publish(pipe, way):
    """Parity of the table actions (issue 46): the months published ``way`` (e1 each - a batch's versions in a
    backfill and a range run); February landed again and reprocessed by a run of its own (e2); then the
    table page's rollback of February to e1 - a run of the pipeline's own DAG with conf ``eo_action`` -
    republishes e1's rows as e3: exactly one more asset event and one more lineage output, both for e3, the
    action run's note, the rows exactly e1's. A recover action after it publishes and announces nothing,
    and says so in its note."""
    pipe.run(way, MONTHS)
    first = {r["month"]: (r["n"], r["total"]) for r in pipe.rows()}
    land(pipe.root, "2013-02", "b.csv", [100])
    re = pipe.manual(2, {"reprocess": True}, 1)
    assert set(pipe.drive(re).values()) == {"success"}
    assert {r["month"]: (r["n"], r["total"]) for r in pipe.rows()} == {**first, "2013-02": (3, 122)}
    events, lineage = announced(pipe)
    rollback = pipe.manual(2, {"eo_action": "rollback", "to_version": "e1", "sinks": [pipe.cfg.sink]}, 2)
    states = pipe.drive(rollback)
    assert states["begin"] == "success" and pipe.run_state(rollback) == "success", states
    e3 = pipe.sink.committed(month(2))[0]
    assert e3.epoch == 3 and announced(pipe) == (sorted([*events, e3.name]), sorted([*lineage, e3.name]))
    assert pipe.note(rollback) == "published e3: 1 row, 1 file (rollback to e1)"
    assert {r["month"]: (r["n"], r["total"]) for r in pipe.rows()} == first
    recover = pipe.manual(2, {"eo_action": "recover", "sinks": [pipe.cfg.sink]}, 3)
    pipe.drive(recover)
    assert pipe.note(recover) == "recover by a run: nothing to do" and pipe.run_state(recover) == "success"
    assert announced(pipe) == (sorted([*events, e3.name]), sorted([*lineage, e3.name]))


# ------------------------------------------------------------------------------------------ local time, DST
BERLIN = ZoneInfo("Europe/Berlin")
SPRING = [date(2026, 3, 27) + timedelta(days=d) for d in range(4)]   # .., ends at the jump, the 23 h day, a 24 h day
AUTUMN = [date(2026, 10, 24) + timedelta(days=d) for d in range(2)]  # the 25 h day, a 24 h day


def in_berlin(cron: str, layout: Any) -> dict[str, Any]:
    """The settings of a pipeline whose DAG runs on ``cron`` in Berlin time, its inputs landed and its table
    partitioned by ``layout`` (a function of the interval)."""
    from airflow.sdk import CronDataIntervalTimetable

    from exactly_once.protocol.layout import Source

    return {"schedule": CronDataIntervalTimetable(cron, timezone="Europe/Berlin"),
            "start_date": datetime(2026, 1, 1, tzinfo=timezone.utc),
            "sources": Source("s", format="csv", path=layout), "partitions": layout}


def local_day(iv: Any) -> str:
    """The interval's local date in Berlin: its partition, and its landing folder."""
    return f"dt={iv.start.astimezone(BERLIN):%Y-%m-%d}"


class BerlinDaily(Endings):
    """A daily DAG at 02:00 Berlin time, partitioned and landed by the local date, batched."""

    def __init__(self, session: Any, root: Path, dag_id: str) -> None:
        super().__init__(session, root, dag_id, **in_berlin("0 2 * * *", local_day))

    def intervals(self, days: list[date]) -> list[Any]:
        from exactly_once.protocol.timetables import intervals_of_day

        return [iv for d in days for iv in intervals_of_day(self.dag.timetable, d)]

    def published(self, days: list[date]) -> dict[str, tuple[int, int]]:
        """``{local date: (rows, total)}`` as a plain reader of the table sees it."""
        import pyarrow.dataset as ds

        rows = ds.dataset(self.cfg.table_url, format="parquet", partitioning="hive").to_table().to_pylist()
        return {r["dt"]: (r["n"], r["total"]) for r in rows}

    def run_jump_alone(self) -> Any:
        """A manual run of the interval ending at the spring jump as ``airflow dags test`` makes it: Airflow's
        inference gives it the zero-length interval [03-29 01:00Z, 03-29 01:00Z)."""
        from airflow.utils.state import DagRunState
        from airflow.utils.types import DagRunTriggeredByType, DagRunType

        jump = datetime(2026, 3, 29, 1, tzinfo=timezone.utc)
        dr = self.sdag.create_dagrun(run_id="manual__jump", logical_date=jump, data_interval=(jump, jump),
                                     run_after=jump, run_type=DagRunType.MANUAL,
                                     triggered_by=DagRunTriggeredByType.TEST, state=DagRunState.RUNNING,
                                     session=self.session)
        self.session.commit()
        return dr


@pytest.fixture
def berlin(session, tmp_path, request) -> BerlinDaily:  # noqa: F811 - the metadata DB fixture
    for n, d in enumerate(SPRING + AUTUMN, 1):
        land(tmp_path, f"dt={d.isoformat()}", "a.csv", [n, 100 * n])
    return BerlinDaily(session, tmp_path, dag_id_of(request))


@pytest.mark.parametrize("way", ["backfill", "range"])
def test_a_berlin_daily_dag_across_both_dst_changes_publishes_every_interval_exactly(berlin, way):
    """Issue 46 case 6: local days around both 2026 changes (the interval ending at the spring jump, the 23 h
    and the 25 h day) backfilled by Airflow's backfill (batched) or as range runs: every interval publishes
    exactly its local day's rows once, under its local date, each announced once. (Airflow's own backfill
    skips the interval ending at the spring jump when asked to start exactly there - its first-interval
    search: the range here starts a day earlier; ``make backfill`` asks the timetable and has no such gap.)"""
    ivs = berlin.intervals(SPRING + AUTUMN)
    assert sorted({iv.end - iv.start for iv in ivs}) == [timedelta(hours=23), timedelta(days=1), timedelta(hours=25)]
    for days in (SPRING, AUTUMN):
        first, last = berlin.intervals(days[:1])[0], berlin.intervals(days[-1:])[0]
        runs = berlin.backfill_between(first.start, last.start) if way == "backfill" else \
            [berlin.range_between(first, last)]
        for dr in runs:
            berlin.drive(dr)
    want = {f"{d.isoformat()}": (2, 101 * n) for n, d in enumerate(SPRING + AUTUMN, 1)}
    assert berlin.published(SPRING + AUTUMN) == want
    versions = sorted(berlin.sink.committed(iv)[0].name for iv in ivs)
    assert announced(berlin) == (versions, versions)


def test_the_interval_ending_at_the_spring_jump_runs_by_itself_and_again(berlin):
    """The run ``make run-interval START=2026-03-28T01:00:00Z`` makes (Airflow gives it a zero-length
    interval) publishes the 03-28 local day; a second run of it publishes a new version of that same day,
    never a neighbour's."""
    dr = berlin.run_jump_alone()
    assert set(berlin.drive(dr).values()) == {"success"}
    iv = berlin.intervals([date(2026, 3, 28)])[0]
    assert berlin.published([]) == {"2026-03-28": (2, 202)}
    berlin.sdag.clear(run_id=dr.run_id, session=berlin.session)
    berlin.session.commit()
    assert set(berlin.drive(dr).values()) == {"success"}
    assert {e: st.state.value for e, st in berlin.sink.status(iv).items()} == {1: "COMMITTED", 2: "COMMITTED"}
    assert berlin.published([]) == {"2026-03-28": (2, 202)} and berlin.sink.log.intervals() == [iv]


def local_hour(iv: Any) -> str:
    """The interval's local date and hour in Berlin with its UTC offset: the repeated 02:00 of the autumn
    change is two partitions (docs/LAYOUT.md, "Time zones")."""
    s = iv.start.astimezone(BERLIN)
    return f"dt={s:%Y-%m-%d}/hour={s:%H%z}"


class BerlinHourly(Endings):
    """An hourly DAG in Berlin time, partitioned and landed by local date and hour (with the offset), batched."""

    def __init__(self, session: Any, root: Path, dag_id: str) -> None:
        super().__init__(session, root, dag_id, max_batch=8, **in_berlin("0 * * * *", local_hour))


@pytest.mark.parametrize("way", ["backfill", "range"])
def test_a_berlin_hourly_dag_across_both_dst_changes_publishes_every_hour_exactly(session, tmp_path, request, way):  # noqa: F811
    """The local nights of both 2026 changes, hour by hour, backfilled (batched) or as range runs: the spring
    night has no 02:00 (three hours from 01:00 to 04:00), the autumn night has 02:00 twice (+0200 and +0100,
    two partitions); every hour publishes exactly its own landed rows once, each announced once."""
    from exactly_once.ids import Interval

    utc = timezone.utc
    nights = [[Interval(datetime(2026, 3, 28, 23, tzinfo=utc) + timedelta(hours=h),
                        datetime(2026, 3, 29, 0, tzinfo=utc) + timedelta(hours=h)) for h in range(3)],
              [Interval(datetime(2026, 10, 24, 23, tzinfo=utc) + timedelta(hours=h),
                        datetime(2026, 10, 25, 0, tzinfo=utc) + timedelta(hours=h)) for h in range(4)]]
    for n, iv in enumerate([iv for night in nights for iv in night], 1):
        land(tmp_path, local_hour(iv), "a.csv", [n, 100 * n])
    pipe = BerlinHourly(session, tmp_path, dag_id_of(request))
    for night in nights:
        runs = pipe.backfill_between(night[0].start, night[-1].start) if way == "backfill" else \
            [pipe.range_between(night[0], night[-1])]
        for dr in runs:
            pipe.drive(dr)
    import pyarrow.dataset as ds

    rows = ds.dataset(pipe.cfg.table_url, format="parquet", partitioning="hive").to_table().to_pylist()
    got = {f"dt={r['dt']}/hour={r['hour']}": (r["n"], r["total"]) for r in rows}
    ivs = [iv for night in nights for iv in night]
    assert got == {local_hour(iv): (2, 101 * n) for n, iv in enumerate(ivs, 1)}
    assert "dt=2026-10-25/hour=02+0200" in got and "dt=2026-10-25/hour=02+0100" in got
    assert not any(k.startswith("dt=2026-03-29/hour=02") for k in got)
    versions = sorted(pipe.sink.committed(iv)[0].name for iv in ivs)
    assert announced(pipe) == (versions, versions)
