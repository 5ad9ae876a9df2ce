"""The logical date of a run the table page or ``eo reprocess`` starts for an interval
(``airflow.rest.logical_date_inside``). Airflow creates a DAG's tasks only for a manual run dated between its
``start_date`` and ``end_date``; a run dated after a DAG's end does nothing and still ends successfully. The
date is checked here at both ends of its range (the time-derived offset at 0 and at its largest). Airflow's
own check of the date, on runs the actions create, is in ``tests/integration/table_actions``."""
from __future__ import annotations

from datetime import timedelta

import pytest

from exactly_once.airflow import rest
from exactly_once.errors import ConfigError
from exactly_once.ids import Interval

IV = Interval.daily("2026-03-31")
US, MINUTE, HOUR = timedelta(microseconds=1), timedelta(minutes=1), timedelta(hours=1)


def dates(monkeypatch, earliest=None, latest=None) -> list:
    """The dates chosen with the offset at 0, 1 and its largest (the clock's microseconds modulo the span: -1
    stands for the clock's value one below a multiple of any span)."""
    got = []
    for now_us in (0, 1, -1):
        monkeypatch.setattr(rest.time, "time_ns", lambda v=now_us: v * 1000)
        got.append(rest.logical_date_inside(IV, earliest, latest))
    return got


def test_a_run_is_dated_inside_its_interval_never_at_its_start(monkeypatch):
    got = dates(monkeypatch)
    assert all(IV.start < d < IV.end for d in got) and min(got) == IV.start + US and max(got) == IV.end - US


def test_the_last_interval_of_a_dag_that_ended_is_dated_just_before_its_start(monkeypatch):
    """A DAG whose end_date is its last interval's start (its last scheduled run's date): after the start,
    Airflow would create no task. The run is dated in the minute before the start, never on a whole second
    (a scheduled run's date under any cron timetable)."""
    got = dates(monkeypatch, earliest=IV.start - timedelta(days=90), latest=IV.start)
    for now_us in (999_999, 59 * 10**6 + 999_999):  # the offsets that land on a whole second
        monkeypatch.setattr(rest.time, "time_ns", lambda v=now_us: v * 1000)
        got.append(rest.logical_date_inside(IV, IV.start - timedelta(days=90), IV.start))
    assert all(IV.start - MINUTE < d < IV.start and d.microsecond for d in got), got


def test_an_end_inside_the_interval_bounds_the_date(monkeypatch):
    got = dates(monkeypatch, latest=IV.start + HOUR)
    assert all(IV.start < d <= IV.start + HOUR for d in got) and max(got) == IV.start + HOUR


def test_a_start_date_inside_the_interval_bounds_the_date(monkeypatch):
    got = dates(monkeypatch, earliest=IV.start + HOUR)
    assert all(IV.start + HOUR <= d < IV.end for d in got) and min(got) == IV.start + HOUR


@pytest.mark.parametrize("earliest, latest, advice", [
    (None, IV.start - timedelta(days=1), "set the end_date to a time inside the interval, e.g. "
                                         "2026-03-31T00:01:00+00:00"),       # an interval after the DAG's end
    (IV.start, IV.start, "set the end_date to a time inside the interval"),  # a DAG of one interval
    (IV.end + HOUR, None, "set the start_date to 2026-03-31T00:00:00+00:00 or earlier"),
])
def test_dates_that_leave_no_room_are_refused_and_the_advice_works(monkeypatch, earliest, latest, advice):
    with pytest.raises(ConfigError, match="no date is left for a run of 2026-03-31") as err:
        rest.logical_date_inside(IV, earliest, latest, dag_id="sales_daily")
    assert advice in str(err.value) and "(the DAG's, or its tasks' if set through default_args)" in str(err.value)
    assert ("`airflow backfill create --dag-id sales_daily --from-date 2026-03-31T00:00:00+00:00 --to-date "
            "2026-03-31T00:00:00+00:00 --reprocess-behavior completed") in str(err.value)
    fixed = (earliest, IV.start + timedelta(minutes=1)) if "end_date" in advice else (IV.start, latest)
    assert all(IV.start <= d < IV.end for d in dates(monkeypatch, *fixed))


def test_pendulum_dates_of_a_serialized_dag_bound_the_date(monkeypatch):
    """A serialized DAG's dates are pendulum DateTimes, whose differences are pendulum Durations: an end or
    start inside the interval must bound the date, not raise (the table page's path)."""
    import pendulum

    end, start = pendulum.datetime(2026, 3, 31, 0, 1), pendulum.datetime(2026, 3, 31, 0, 0, 30)
    got = dates(monkeypatch, earliest=start, latest=end)
    assert all(IV.start + 30 * timedelta(seconds=1) <= d <= IV.start + MINUTE for d in got), got
    assert all(type(d).__module__ == "datetime" for d in got)


def _serialized(**dag_kwargs):
    """A DAG of two tasks as the api-server holds it (serialized and read back: pendulum dates, each task's)."""
    from datetime import datetime, timezone

    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, CronDataIntervalTimetable
    from airflow.serialization.serialized_objects import DagSerialization

    task_end = dag_kwargs.pop("task_end", None)
    with DAG("ended", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
             start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), **dag_kwargs) as dag:
        EmptyOperator(task_id="begin")
        EmptyOperator(task_id="commit", **({"end_date": task_end} if task_end else {}))
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _every_task_created(dag, logical) -> bool:
    """Airflow's own rule for a manual run (``DagRun.verify_integrity``'s task filter), per task."""
    return all((t.start_date is None or t.start_date <= logical) and (t.end_date is None or logical <= t.end_date)
               for t in dag.task_dict.values())


@pytest.mark.parametrize("how", ["end_date", "default_args"])
def test_an_end_set_on_the_dag_or_through_default_args_dates_the_last_interval_so_every_task_runs(how, monkeypatch):
    """``default_args={"end_date": ...}`` leaves the DAG's end_date None and sets each task's: the tasks'
    dates bound the run too (the scheduler stops at them as well)."""
    from datetime import datetime, timezone

    from exactly_once.airflow.actions import run_dates

    end = datetime(2026, 3, 31, tzinfo=timezone.utc)
    dag = _serialized(**({"end_date": end} if how == "end_date" else {"default_args": {"end_date": end}}))
    assert run_dates(dag)[1] == end
    got = dates(monkeypatch, *run_dates(dag))
    assert all(_every_task_created(dag, d) and IV.start - MINUTE < d < IV.start for d in got), got


def test_a_task_that_ends_before_the_interval_refuses_the_run_instead_of_a_partial_one():
    """One task of the DAG ends earlier than the others: a run of a later interval would get some tasks and
    not that one (a begin with no commit). No date fits: refused, saying what to move."""
    from datetime import datetime, timezone

    from exactly_once.airflow.actions import run_dates

    dag = _serialized(end_date=datetime(2026, 4, 5, tzinfo=timezone.utc),
                      task_end=datetime(2026, 3, 3, tzinfo=timezone.utc))
    with pytest.raises(ConfigError, match="no date is left for a run of 2026-03-31.*end_date to a time inside"):
        rest.logical_date_inside(IV, *run_dates(dag))


def test_the_advice_for_an_end_set_through_default_args_works_when_followed_there(monkeypatch):
    """The tasks' end (default_args) before the interval: refused; the advice followed where the end was set
    (default_args, not the DAG's own end_date, which the tasks' would still bound) dates a run with every task."""
    from datetime import datetime, timezone

    from exactly_once.airflow.actions import run_dates

    early = _serialized(default_args={"end_date": datetime(2026, 3, 30, tzinfo=timezone.utc)})
    with pytest.raises(ConfigError, match="its tasks' if set through default_args"):
        rest.logical_date_inside(IV, *run_dates(early))
    advised = IV.start + MINUTE
    still = _serialized(end_date=advised, default_args={"end_date": datetime(2026, 3, 30, tzinfo=timezone.utc)})
    with pytest.raises(ConfigError):
        rest.logical_date_inside(IV, *run_dates(still))  # the DAG's own end moved: the tasks' still bounds
    fixed = _serialized(default_args={"end_date": advised})
    assert all(_every_task_created(fixed, d) for d in dates(monkeypatch, *run_dates(fixed)))
