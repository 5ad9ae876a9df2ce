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
US, SECOND, HOUR = timedelta(microseconds=1), timedelta(seconds=1), timedelta(hours=1)


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
    Airflow would create no task. The run is dated in the second before the start (no scheduled run's date)."""
    got = dates(monkeypatch, earliest=IV.start - timedelta(days=90), latest=IV.start)
    assert all(IV.start - SECOND < d < IV.start for d in got), got


def test_an_end_inside_the_interval_bounds_the_date(monkeypatch):
    got = dates(monkeypatch, latest=IV.start + HOUR)
    assert all(IV.start < d <= IV.start + HOUR for d in got) and max(got) == IV.start + HOUR


def test_a_start_date_inside_the_interval_bounds_the_date(monkeypatch):
    got = dates(monkeypatch, earliest=IV.start + HOUR)
    assert all(IV.start + HOUR <= d < IV.end for d in got) and min(got) == IV.start + HOUR


@pytest.mark.parametrize("earliest, latest, advice", [
    (None, IV.start - timedelta(days=1), "set the DAG's end_date to a time inside the interval, e.g. "
                                         "2026-03-31T00:01:00+00:00"),       # an interval after the DAG's end
    (IV.start, IV.start, "set the DAG's end_date to a time inside the interval"),  # a DAG of one interval
    (IV.end + HOUR, None, "set the DAG's start_date to 2026-03-31T00:00:00+00:00 or earlier"),
])
def test_dates_that_leave_no_room_are_refused_and_the_advice_works(monkeypatch, earliest, latest, advice):
    with pytest.raises(ConfigError, match="no date is left for a run of 2026-03-31") as err:
        rest.logical_date_inside(IV, earliest, latest)
    assert advice in str(err.value) and "then run this again" in str(err.value)
    fixed = (earliest, IV.start + timedelta(minutes=1)) if "end_date" in advice else (IV.start, latest)
    assert all(IV.start <= d < IV.end for d in dates(monkeypatch, *fixed))
