"""The logical date of a run the table page or ``eo reprocess`` starts for an interval (``airflow.run_dates``).
Airflow creates a task of a manual run only if the run's date lies within the task's ``start_date`` and
``end_date``: a run dated after the end of the tasks it needs does nothing, and still ends successfully. The
date is checked at both ends of its range (the time-derived offset at 0 and at its largest), and against
Airflow's own per-task rule on real serialized DAGs. Airflow's check on the runs the actions create is in
``tests/integration/table_actions``."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from exactly_once.airflow import run_dates as rd
from exactly_once.airflow.run_dates import RunDates
from exactly_once.errors import ConfigError
from exactly_once.ids import Interval

IV = Interval.daily("2026-03-31")
US, MINUTE, HOUR = timedelta(microseconds=1), timedelta(minutes=1), timedelta(hours=1)
UTC = timezone.utc


def dates(monkeypatch, earliest=None, latest=None, extra=()) -> list:
    """The dates chosen with the offset at 0, 1 and its largest (the clock's microseconds modulo the span: -1
    stands for the clock's value one below a multiple of any span)."""
    got = []
    bounds = earliest if isinstance(earliest, RunDates) else RunDates(earliest, latest, "task begin", "task commit")
    for now_us in (0, 1, -1, *extra):
        monkeypatch.setattr(rd.time, "time_ns", lambda v=now_us: v * 1000)
        got.append(rd.logical_date_inside(IV, bounds))
    return got


def test_a_run_is_dated_inside_its_interval_never_at_its_start(monkeypatch):
    got = dates(monkeypatch)
    assert all(IV.start < d < IV.end for d in got) and min(got) == IV.start + US and max(got) == IV.end - US


def test_the_last_interval_of_a_dag_that_ended_is_dated_just_before_its_start(monkeypatch):
    """A DAG whose end is its last interval's start (its last scheduled run's date): after the start, Airflow
    would create no task. The run is dated in the minute before the start, never on a whole second (a
    scheduled run's date under any cron timetable; the offsets 999,999 and 59,999,999 land on one)."""
    got = dates(monkeypatch, IV.start - timedelta(days=90), IV.start, extra=(999_999, 59 * 10**6 + 999_999))
    assert all(IV.start - MINUTE < d < IV.start and d.microsecond for d in got), got


def test_an_end_or_a_start_inside_the_interval_bounds_the_date(monkeypatch):
    got = dates(monkeypatch, latest=IV.start + HOUR)
    assert all(IV.start < d <= IV.start + HOUR for d in got) and max(got) == IV.start + HOUR
    got = dates(monkeypatch, earliest=IV.start + HOUR)
    assert all(IV.start + HOUR <= d < IV.end for d in got) and min(got) == IV.start + HOUR


def test_pendulum_dates_of_a_serialized_dag_bound_the_date(monkeypatch):
    """A serialized DAG's dates are pendulum DateTimes, whose differences are pendulum Durations: an end or
    start inside the interval must bound the date, not raise (the table page's path)."""
    import pendulum

    got = dates(monkeypatch, RunDates.of([rd.TaskDates("begin", "BeginOperator", frozenset(),
                                                       pendulum.datetime(2026, 3, 31, 0, 0, 30),
                                                       pendulum.datetime(2026, 3, 31, 0, 1))]))
    assert all(IV.start + 30 * timedelta(seconds=1) <= d <= IV.start + MINUTE for d in got), got
    assert all(type(d).__module__ == "datetime" for d in got)


@pytest.mark.parametrize("earliest, latest, says", [
    (None, IV.start - timedelta(days=1), "the end_date 2026-03-30 00:00:00+00:00 of task commit"),  # after the end
    (IV.start, IV.start, "the end_date 2026-03-31 00:00:00+00:00 of task commit"),   # a DAG of one interval
    (IV.end + HOUR, None, "the start_date 2026-04-01 01:00:00+00:00 of task begin"),  # before the start
])
def test_dates_that_leave_no_room_are_refused_naming_the_task_that_sets_them(earliest, latest, says):
    with pytest.raises(ConfigError, match="no date for a run of 2026-03-31, which would do nothing") as err:
        rd.logical_date_inside(IV, RunDates(earliest, latest, "task begin", "task commit"))
    assert says in str(err.value), err.value


@pytest.mark.parametrize("action, way_out", [
    ("reprocess", "`airflow backfill create --dag-id sales --from-date 2026-03-31T00:00:00+00:00 --to-date "
                  "2026-03-31T00:00:00+00:00 --reprocess-behavior completed --dag-run-conf '{\"reprocess\": true, "
                  "\"sinks\": [\"orders\"]}'`"),
    ("shrinking", "--dag-run-conf '{\"reprocess\": true, \"sinks\": [\"orders\"], \"allow_shrinking\": true}'"),
    ("rollback", "run `eo rollback '/data/my orders' --interval 2026-03-31T00:00:00+00:00 --to e1` (it needs no DAG "
                 "run)"),
    ("recover", "run `eo recover '/data/my orders'` (it needs no DAG run)"),
])
def test_the_way_out_suits_the_action(action, way_out):
    """A rollback or a recover needs no run (`eo rollback`, `eo recover`; the table's path quoted for a shell); a
    reprocess goes as a backfill of the interval, for the table's group only (conf sinks: other tables of the
    DAG are left alone), allowing shrinking where the reprocess asked to."""
    why = rd.first_refusal(RunDates(latest=IV.start - HOUR, end_by="task commit"), [IV], "sales",
                           lambda: rd.no_date_advice("reprocess" if action == "shrinking" else action, "sales",
                                                     "orders", "/data/my orders", [IV], "e1", action == "shrinking",
                                                     lambda iv: iv.start))
    assert why.startswith("sales: Airflow creates a task") and "a run of 2026-03-31" in why and way_out in why, why


def test_a_backfill_of_stale_intervals_covers_them_in_order_by_their_runs_logical_dates():
    """Re-running stale intervals that cannot be dated: one backfill from the first to the last (in order, as a
    stateful chain needs), dated as the timetable keys their runs; where that is not known, the advice says how
    to find the dates (a trigger timetable's run of an interval is at its end, not its start)."""
    days = [Interval.daily(d) for d in ("2026-03-29", "2026-03-30", "2026-03-31")]
    known = rd.no_date_advice("rerun-stale", "sales", "orders", "/t", days, logical_of=lambda iv: iv.end)
    assert "--from-date 2026-03-30T00:00:00+00:00 --to-date 2026-04-01T00:00:00+00:00" in known, known
    unknown = rd.no_date_advice("rerun-stale", "sales", "orders", "/t", days)
    assert "--from-date A --to-date B (A, B: the dates a backfill selects the runs of 2026-03-29 and 2026-03-31" \
        in unknown
    gap = rd.no_date_advice("rerun-stale", "sales", "orders", "/t", [days[0], days[2]], logical_of=lambda iv: iv.start)
    assert gap.count("airflow backfill create") == 2 and "as backfills, in this order" in gap, gap  # not the one
    assert "--from-date 2026-03-29T00:00:00+00:00 --to-date 2026-03-29T00:00:00+00:00" in gap      # between


@pytest.mark.parametrize("timetable, logical", [("data-interval", "2026-03-31"), ("trigger", "2026-04-01")])
def test_the_backfill_date_is_the_one_the_timetable_gives_the_intervals_run(timetable, logical):
    """``backfill_date`` asks Airflow's own selection (``iter_dagrun_infos_between``, what a backfill uses): a
    data-interval timetable selects the run of [03-31, 04-01) by its start, a trigger timetable with a one-day
    interval by when it runs, its end (a backfill from the start would re-run the day before)."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, CronDataIntervalTimetable, CronTriggerTimetable
    from airflow.serialization.serialized_objects import DagSerialization

    schedule = CronDataIntervalTimetable("0 0 * * *", timezone="UTC") if timetable == "data-interval" else \
        CronTriggerTimetable("0 0 * * *", timezone="UTC", interval=timedelta(days=1))
    with DAG("t", schedule=schedule, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        EmptyOperator(task_id="x")
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert rd.backfill_date(serialized, IV) == datetime.fromisoformat(logical).replace(tzinfo=UTC)
    assert rd.backfill_date(serialized, Interval(IV.start, IV.start + HOUR)) is None   # no run has it


def _serialized(**task_ends):
    """A DAG as the api-server holds it (serialized and read back): an exactly-once group's phases behind an
    upstream sensor, and a task of its own beside them; ``task_ends``: tasks' own end dates."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, CronDataIntervalTimetable
    from airflow.serialization.serialized_objects import DagSerialization

    from exactly_once.airflow.operators import BeginOperator, CommitOperator
    from exactly_once.protocol.config import PipelineConfig

    config = PipelineConfig(pipeline="sales", sink="orders", application="job.py", root="/tmp/eo-unused",
                            sources="events")
    with DAG("sales", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=UTC), end_date=datetime(2026, 4, 5, tzinfo=UTC)) as dag:
        sensor = EmptyOperator(task_id="wait_for_files", end_date=task_ends.get("wait_for_files"))
        begin = BeginOperator(task_id="orders.begin", config=config, begin_task_id="orders.begin",
                              end_date=task_ends.get("orders.begin"))
        commit = CommitOperator(task_id="orders.commit", config=config, begin_task_id="orders.begin")
        EmptyOperator(task_id="legacy_export", end_date=task_ends.get("legacy_export"))
        sensor >> begin >> commit
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _two_groups(retired: datetime):
    """A DAG of two tables' groups made by ``exactly_once_group``: ``orders`` retired (its tasks end at
    ``retired``) under the group id ``orders_main``, and ``eu_orders`` live under the group id ``orders``."""
    from airflow.sdk import DAG, CronDataIntervalTimetable
    from airflow.serialization.serialized_objects import DagSerialization

    from exactly_once.airflow import exactly_once_group
    from exactly_once.protocol.config import PipelineConfig

    with DAG("sales", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        for sink, group_id, end in (("orders", "orders_main", retired), ("eu_orders", "orders", None)):
            config = PipelineConfig(pipeline="sales", sink=sink, application="job.py", root="/tmp/eo-unused",
                                    sources="events")
            group = exactly_once_group(config, group_id=group_id)
            for task in group.children.values():
                task.end_date = end
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def test_a_group_is_known_by_the_table_its_tasks_announce_not_by_its_name():
    """Group ids may be chosen freely (``group_id=``) and nested: a group named ``orders`` inside ``big`` is not
    the table ``big.orders``'s, nor is a custom-id group named ``orders`` the table ``orders``'s. The table's
    group is the one whose commit announces ``exactly_once:<pipeline>/<sink>``; where nothing says (the REST
    API's tasks), every group bounds the run - refused, never a run that misses the retired group's tasks."""
    retired = datetime(2026, 2, 1, tzinfo=UTC)
    tasks = [rd.TaskDates("big_orders.begin", "BeginOperator", frozenset(), None, retired),
             rd.TaskDates("big_orders.commit", "CommitOperator", frozenset({"big_orders.begin"}), None, retired,
                          frozenset({"sales/big.orders"})),
             rd.TaskDates("big.orders.begin", "BeginOperator", frozenset(), None, None),
             rd.TaskDates("big.orders.commit", "CommitOperator", frozenset({"big.orders.begin"}), None, None,
                          frozenset({"sales/orders"}))]
    assert RunDates.of(tasks, "sales/big.orders").latest == retired
    assert RunDates.of(tasks, "sales/orders").latest is None
    assert RunDates.of(tasks).latest == retired


def test_another_tables_group_in_the_dag_does_not_bound_this_tables_runs(monkeypatch):
    """Two tables' groups in one DAG, made by ``exactly_once_group`` with group ids of their own: one retired (its
    tasks' end) blocks nothing of the other's, whose group id is the retired table's sink name; its own runs are
    still bounded by its own end (found by what its tasks announce, not by a group's name)."""
    dag = _two_groups(retired=datetime(2026, 2, 1, tzinfo=UTC))
    assert RunDates.of_dag(dag, "sales/eu_orders").latest is None      # its group's id is "orders"
    assert all(IV.start < d < IV.end for d in dates(monkeypatch, RunDates.of_dag(dag, "sales/eu_orders")))
    assert RunDates.of_dag(dag, "sales/orders").latest == datetime(2026, 2, 1, tzinfo=UTC)
    assert RunDates.of_dag(dag).latest == datetime(2026, 2, 1, tzinfo=UTC)   # a group not known: every group's


def _every_needed_task_created(dag, logical) -> bool:
    """Airflow's own rule for a manual run (``DagRun.verify_integrity``), for the group and its upstream."""
    return all((t.start_date is None or t.start_date <= logical) and (t.end_date is None or logical <= t.end_date)
               for t in dag.task_dict.values() if t.task_id != "legacy_export")


@pytest.mark.parametrize("ended", ["orders.begin", "wait_for_files"])
def test_a_phase_or_an_upstream_task_that_ends_bounds_the_date_so_every_needed_task_is_created(ended, monkeypatch):
    """An end on the group's own task, or on a task upstream of it: a run of the interval that starts there
    is dated so that Airflow creates every task the group needs."""
    dag = _serialized(**{ended: datetime(2026, 3, 31, tzinfo=UTC)})
    bounds = RunDates.of_dag(dag, "sales/orders")
    assert (bounds.latest, bounds.end_by) == (datetime(2026, 3, 31, tzinfo=UTC), f"task {ended}")
    got = dates(monkeypatch, bounds)
    assert all(_every_needed_task_created(dag, d) and IV.start - MINUTE < d < IV.start for d in got), got
    with pytest.raises(ConfigError, match=f"end_date 2026-03-31 00:00:00\\+00:00 of task {ended} leaves"):
        rd.logical_date_inside(Interval.daily("2026-04-01"), bounds)


def test_a_task_retired_with_its_own_end_blocks_nothing(monkeypatch):
    """Retiring a task with an end_date of its own is Airflow's usual way: the group does not need it, so a
    run after it is dated inside its interval as ever (Airflow leaves out only the retired task)."""
    dag = _serialized(legacy_export=datetime(2026, 2, 1, tzinfo=UTC))
    bounds = RunDates.of_dag(dag)
    assert bounds.latest == datetime(2026, 4, 5, tzinfo=UTC)   # the DAG's end, which every task inherits
    assert all(IV.start < d < IV.end and _every_needed_task_created(dag, d) for d in dates(monkeypatch, bounds))


def test_the_rest_apis_tasks_give_the_same_dates_as_the_serialized_dag():
    """``eo reprocess`` reads the tasks from ``GET /api/v2/dags/<dag>/tasks`` (downstream ids, class_ref):
    the same bounds and the same task named as the api-server's own serialized DAG gives."""
    dag = _serialized(**{"wait_for_files": datetime(2026, 3, 20, tzinfo=UTC),
                         "legacy_export": datetime(2026, 2, 1, tzinfo=UTC)})
    tasks = [{"task_id": t.task_id, "class_ref": {"class_name": t.task_type},
              "downstream_task_ids": sorted(t.downstream_task_ids),
              "start_date": t.start_date.isoformat().replace("+00:00", "Z"),
              "end_date": t.end_date.isoformat() if t.end_date else None} for t in dag.task_dict.values()]
    assert RunDates.of_api(tasks) == RunDates.of_dag(dag)
    assert RunDates.of_dag(dag).end_by == "task wait_for_files"


def test_a_dag_without_a_begin_task_of_ours_counts_every_task():
    got = RunDates.of([rd.TaskDates("a", "MyBegin", frozenset(), None, datetime(2026, 3, 1, tzinfo=UTC)),
                       rd.TaskDates("b", "EmptyOperator", frozenset(), None, datetime(2026, 2, 1, tzinfo=UTC))])
    assert (got.latest, got.end_by) == (datetime(2026, 2, 1, tzinfo=UTC), "task b")


def test_an_end_every_needed_task_shares_is_called_the_dags():
    dag = _serialized()
    assert RunDates.of_dag(dag).end_by == "every task the group needs (the DAG's date, or default_args')"


def test_the_confirm_steps_date_check_names_the_way_out_and_leaves_an_empty_log_to_the_trigger(monkeypatch, tmp_path):
    """``actions.dates_refusal`` (the confirm page's check): a reprocess of an interval after the end is refused
    with the backfill for the table's group only; a recover of a table whose log has no interval yet is not
    this check's to refuse (the confirm page rendered a 500 when it raised)."""
    from exactly_once.airflow import actions
    from exactly_once.airflow.tables import TableRef
    from exactly_once.protocol.config import PipelineConfig

    config = PipelineConfig(pipeline="sales", sink="orders", application="job.py", root=str(tmp_path), sources="events")
    table = TableRef("sales", "orders", config.table_url, config)
    monkeypatch.setattr(actions, "_dag", lambda session, dag_id: _serialized())
    assert actions.dates_refusal(actions.parse("recover", table, {}, []), session=object()) == ""
    late = Interval.daily("2026-04-06")
    why = actions.dates_refusal(actions.parse("reprocess", table, {"interval": late.token}, []), session=object())
    assert why.startswith("sales: Airflow creates a task") and "a run of 2026-04-06" in why, why
    assert "--dag-run-conf '{\"reprocess\": true, \"sinks\": [\"orders\"]}'" in why, why
    assert "--from-date 2026-04-06T00:00:00+00:00 --to-date 2026-04-06T00:00:00+00:00" in why, why  # its timetable
