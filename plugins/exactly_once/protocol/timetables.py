"""The intervals of an Airflow timetable, asked of the timetable itself - never inferred from one instant.

Airflow's own shortcuts go wrong on local-time schedules: a manual run's inferred interval is
zero-length when it ends at a daylight-saving jump (``CronDataIntervalTimetable("0 2 * * *",
timezone="Europe/Berlin")``, the interval ending 2026-03-29 01:00Z), and the first interval it finds
from an instant skips the one starting there when the next one starts at the jump. These helpers walk
the timetable's chain of intervals (each starts where the one before ends), which is exact on every
schedule Airflow ships: a delta, a cron in UTC, a cron in any time zone (23 h and 25 h days included).
A timetable without real data intervals (``CronTriggerTimetable``, ``@continuous``) is refused with
LayoutError. Only inside Airflow (the timetables are Airflow's).
"""
from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import Any

from ..errors import LayoutError
from ..ids import Interval
from .layout import _core_timetable, timetable_intervals

MARGINS = (timedelta(hours=3), timedelta(days=3), timedelta(days=40), timedelta(days=400))  # how far back a walk starts
MAX_STEPS = 20_000


def zone(timetable: Any) -> tzinfo:
    """The time zone the timetable's schedule is written in (UTC for a delta)."""
    tz = getattr(_core_timetable(timetable), "_timezone", None)
    return tz if isinstance(tz, tzinfo) else timezone.utc


def _walk(timetable: Any, earliest: datetime, until: datetime) -> list[Interval]:
    """The timetable's intervals from the first one at or after ``earliest`` up to the first ending at or
    after ``until`` (a chain: each starts where the one before ended)."""
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction

    core = _core_timetable(timetable)
    restriction = TimeRestriction(earliest=pendulum.instance(earliest), latest=None, catchup=True)
    out: list[Interval] = []
    last: Any = None
    for _ in range(MAX_STEPS):
        info = core.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        if info is None:
            break
        di = info.data_interval
        if not di.start < di.end:
            timetable_intervals(timetable, earliest, 1)  # raises the LayoutError that explains it
        out.append(Interval(di.start, di.end))
        if di.end >= until:
            break
        last = DataInterval(di.start, di.end)
    return out


def around(timetable: Any, instant: datetime) -> list[Interval]:
    """The timetable's intervals from a few before ``instant`` to the one ending at or after it."""
    for margin in MARGINS:
        ivs = _walk(timetable, instant - margin, instant)
        if ivs and ivs[0].start < instant:
            return ivs
    return _walk(timetable, instant - MARGINS[-1], instant)


def interval_starting_at(timetable: Any, start: datetime) -> Interval | None:
    """The timetable's interval that starts exactly at ``start``, or None when none does."""
    for iv in around(timetable, start + timedelta(microseconds=1)):
        if iv.start == start:
            return iv
    return None


def interval_ending_at(timetable: Any, end: datetime) -> Interval | None:
    """The timetable's interval that ends exactly at ``end``, or None when none does."""
    for iv in around(timetable, end):
        if iv.end == end:
            return iv
    return None


def next_start(timetable: Any, after: datetime) -> datetime | None:
    """The start of the first interval that starts after ``after`` (for a refusal's advice)."""
    later = [iv.start for iv in around(timetable, after + timedelta(microseconds=1)) if iv.start > after]
    if later:
        return later[0]
    ahead = _walk(timetable, after, after + timedelta(seconds=1))
    return next((iv.start for iv in ahead if iv.start > after), None)


def intervals_between(timetable: Any, first: datetime, last: datetime) -> list[Interval]:
    """The timetable's intervals whose start lies in ``[first, last]``, in order."""
    lead = [iv for iv in around(timetable, first) if iv.start >= first]
    begin = lead[0].start if lead else first
    return [iv for iv in _walk(timetable, begin, last + timedelta(microseconds=1)) if first <= iv.start <= last]


def local_midnight(timetable: Any, day: date) -> datetime:
    """The instant ``day`` begins in the timetable's time zone, in UTC."""
    return datetime.combine(day, time(), tzinfo=zone(timetable)).astimezone(timezone.utc)


def intervals_of_day(timetable: Any, day: date) -> list[Interval]:
    """The intervals that start on ``day``, a date in the timetable's time zone."""
    return intervals_between(timetable, local_midnight(timetable, day),
                             local_midnight(timetable, day + timedelta(days=1)) - timedelta(microseconds=1))


def offset_changes(timetable: Any, first: datetime, days: int = 366) -> list[datetime]:
    """The days (UTC midnight before each) on which the timetable's time zone changes its UTC offset in
    the ``days`` after ``first``: its daylight-saving changes."""
    tz = zone(timetable)
    base = datetime.combine(first.astimezone(timezone.utc).date(), time(), tzinfo=timezone.utc)
    offsets = [(base + timedelta(days=d)).astimezone(tz).utcoffset() for d in range(days + 2)]
    return [base + timedelta(days=d) for d in range(days + 1) if offsets[d] != offsets[d + 1]]


def dst_windows(timetable: Any, first: datetime, length: timedelta, days: int = 366) -> list[Interval]:
    """The intervals around each UTC-offset change of the timetable's time zone in the ``days`` after
    ``first`` (two intervals of ``length`` before the change's day to two days after it)."""
    out: list[Interval] = []
    for day in offset_changes(timetable, first, days):
        out += _walk(timetable, day - 2 * length - timedelta(hours=1), day + timedelta(days=2))
    return out
