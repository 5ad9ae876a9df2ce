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

from bisect import bisect_right
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import Any, Callable

from ..errors import LayoutError
from ..ids import Interval

MARGINS = (timedelta(hours=3), timedelta(days=3), timedelta(days=40), timedelta(days=400))  # how far back a walk starts
MAX_STEPS = 600_000  # a year of 1-minute intervals
SLOW_STEPS = 2_000   # a timetable this module cannot step fast (a custom one): at most this many steps asked of it
YEAR = timedelta(days=366)


def core_timetable(timetable: Any) -> Any:
    """The timetable as the scheduler uses it (an SDK timetable coerced to Airflow's core one)."""
    if hasattr(timetable, "next_dagrun_info"):
        return timetable
    from airflow.serialization.encoders import coerce_to_core_timetable

    return coerce_to_core_timetable(timetable)


def zone(timetable: Any) -> tzinfo:
    """The time zone the timetable's schedule is written in (UTC for a delta)."""
    tz = getattr(core_timetable(timetable), "_timezone", None)
    return tz if isinstance(tz, tzinfo) else timezone.utc


def walk(timetable: Any, earliest: Any, *, until: datetime | None = None, count: int | None = None) -> list[Interval]:
    """The timetable's chain of intervals from the first one at or after ``earliest``: the first ``count``,
    or up to the first ending at or after ``until`` - exactly what its scheduler would run in a catch-up.

    The first interval is asked of the timetable (``next_dagrun_info``); each next one starts where the one
    before ends. Its end comes from a closed form where that is exact (:func:`_fast_step`: a delta; a cron,
    from its fire times on the local calendar, in a stretch of the time zone's UTC offset that no change comes
    near) and from the timetable otherwise - around every daylight-saving change, and on any other timetable
    (at most :data:`SLOW_STEPS` steps there). A year of an hourly cron costs ~0.1 s instead of ~20 s.

    LayoutError for a timetable without real data intervals (zero-length ones, such as Airflow 3's default
    ``CronTriggerTimetable``) or one that schedules nothing.
    """
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction  # only inside Airflow

    core = core_timetable(timetable)
    _refuse_continuous(core)
    restriction = TimeRestriction(earliest=pendulum.instance(earliest), latest=None, catchup=True)
    fast = _fast_step(core, until)
    out: list[Interval] = []
    limit = min(count or MAX_STEPS, MAX_STEPS if fast else SLOW_STEPS)
    while len(out) < limit:
        end = fast(out[-1].end) if fast is not None and out else None
        if end is not None:
            iv = Interval(out[-1].end, end)
        else:
            last = DataInterval(pendulum.instance(out[-1].start), pendulum.instance(out[-1].end)) if out else None
            info = core.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
            if info is None:
                break
            di = info.data_interval
            if not di.start < di.end:
                raise LayoutError(
                    f"the timetable {type(timetable).__name__} gives zero-length data intervals ({di.start}); "
                    "an exactly-once pipeline needs real intervals: use CronDataIntervalTimetable("
                    "'<cron>', timezone='UTC') or DeltaDataIntervalTimetable")
            iv = Interval(di.start, di.end)
        out.append(iv)
        if until is not None and iv.end >= until:
            break
    if not out:
        raise LayoutError(f"the timetable {type(timetable).__name__} schedules no interval after {earliest}; "
                          "give the DAG a data-interval timetable and a start_date")
    return out


def _refuse_continuous(core: Any) -> None:
    from airflow.timetables.simple import ContinuousTimetable

    if isinstance(core, ContinuousTimetable):
        raise LayoutError("the schedule '@continuous' (ContinuousTimetable) starts a run as soon as the last one "
                          "ends, over whatever time passed since: no fixed intervals to publish exactly once "
                          "or run again; use CronDataIntervalTimetable('<cron>', timezone='UTC') or "
                          "DeltaDataIntervalTimetable(<timedelta>) (e.g. every 5 minutes: '*/5 * * * *')")


def timetable_intervals(timetable: Any, start: Any, count: int = 48) -> list[Interval]:
    """The first ``count`` scheduled data intervals of an Airflow timetable from ``start`` (:func:`walk`)."""
    return walk(timetable, start, count=count)


def year_of_intervals(timetable: Any, start: Any) -> list[Interval]:
    """Every interval of the timetable's first year from ``start`` (both daylight-saving changes of a
    local-time schedule): what the DAG-build layout check renders."""
    first = walk(timetable, start, count=1)[0]
    return walk(timetable, first.start, until=first.start + YEAR)


def _fast_step(core: Any, until: datetime | None) -> Callable[[datetime], datetime | None] | None:
    """``start -> end`` of the chain's next interval by a closed form, or None for a timetable without one.
    The returned function gives None where the closed form is not known to be exact (the caller asks the
    timetable then)."""
    from airflow.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable

    if isinstance(core, DeltaDataIntervalTimetable):  # _get_next: current + delta, in UTC; aligned as given
        delta = core._delta
        return lambda start: start + delta
    if isinstance(core, CronDataIntervalTimetable):
        return _CronSteps.of(core._expression, zone(core))
    return None


class _CronSteps:
    """A cron timetable's next fire time after an instant, without croniter per step: its fire times on
    each local date (the expression's hours x minutes, on the dates it matches) converted with the UTC
    offset of the stretch the step lies in. Exact there - Airflow's ``_get_next`` converts a naive fire time
    with that same offset when no offset change is near - and None within ``|shift| + 1 h`` of a change,
    where the timetable is asked (its DST rules: a skipped or repeated local time)."""

    CHUNK = 40  # local days of fire times made at a time

    def __init__(self, expression: str, tz: tzinfo, times: list[time], every_day: bool) -> None:
        self.expression, self.tz, self.times, self.every_day = expression, tz, times, every_day
        self.fires: list[datetime] = []
        self.days: tuple[date, date] | None = None  # the local dates self.fires covers
        self.changes: list[tuple[datetime, timedelta]] = []  # (instant, margin) of each offset change seen
        self.scanned: tuple[datetime, datetime] | None = None

    @classmethod
    def of(cls, expression: str, tz: tzinfo) -> "_CronSteps | None":
        from croniter import croniter

        fields = croniter(expression).expanded
        if len(fields) != 5:  # a seconds field: asked of the timetable
            return None
        minutes, hours = (list(range(n)) if f == ["*"] else f for f, n in ((fields[0], 60), (fields[1], 24)))
        if not all(isinstance(v, int) for v in [*minutes, *hours]):
            return None
        every_day = all(f == ["*"] for f in fields[2:])
        return cls(expression, tz, sorted(time(h, m) for h in hours for m in minutes), every_day)

    def __call__(self, start: datetime) -> datetime | None:
        offset = start.astimezone(self.tz).utcoffset()
        if offset is None:
            return None
        naive = (start + offset).replace(tzinfo=None)
        self._cover(naive.date(), naive.date() + timedelta(days=2))
        i = bisect_right(self.fires, naive)
        while i >= len(self.fires):  # no fire in the next days (a yearly cron): make more, within reason
            if self.days is not None and self.days[1] > naive.date() + timedelta(days=4 * 366):
                return None
            self._cover(naive.date(), self.days[1] + timedelta(days=self.CHUNK) if self.days else naive.date())
            i = bisect_right(self.fires, naive)
        end = (self.fires[i] - offset).replace(tzinfo=timezone.utc)
        return end if self._far_from_changes(start, end) else None

    def _cover(self, first: date, last: date) -> None:
        """Make the fire times of the local dates up to ``last`` (from ``first`` on a fresh start)."""
        from croniter import croniter

        if self.days is not None and self.days[0] <= first and last <= self.days[1]:
            return
        if self.days is None or first < self.days[0] or first > self.days[1] + timedelta(days=1):
            self.fires, self.days = [], (first, first - timedelta(days=1))
        day, stop = self.days[1] + timedelta(days=1), max(last, self.days[1] + timedelta(days=self.CHUNK))
        while day <= stop:
            if self.every_day or croniter.match(self.expression, datetime.combine(day, self.times[0])):
                self.fires.extend(datetime.combine(day, t) for t in self.times)
            day += timedelta(days=1)
        self.days = (self.days[0], stop)

    def _far_from_changes(self, start: datetime, end: datetime) -> bool:
        """No UTC-offset change of the zone within its margin of ``[start, end]``."""
        lo, hi = start - timedelta(days=1), end + timedelta(days=1)
        if self.scanned is None or lo < self.scanned[0] or hi > self.scanned[1]:
            self.changes = _offset_changes(self.tz, lo, max(hi, lo + timedelta(days=self.CHUNK)))
            self.scanned = (lo, max(hi, lo + timedelta(days=self.CHUNK)))
        return all(not (start - margin <= at <= end + margin) for at, margin in self.changes)


def _offset_changes(tz: tzinfo, lo: datetime, hi: datetime) -> list[tuple[datetime, timedelta]]:
    """Each instant in ``[lo, hi]`` where ``tz`` changes its UTC offset (to the second), with the margin
    around it that a step must keep: the size of the change plus an hour."""
    if tz is timezone.utc:
        return []
    out = []
    step, t = timedelta(hours=6), lo
    before = lo.astimezone(tz).utcoffset()
    while t < hi:
        nxt = min(t + step, hi)
        after = nxt.astimezone(tz).utcoffset()
        if after != before:
            a, b = t, nxt  # the change is in (a, b]: bisect to the second
            while b - a > timedelta(seconds=1):
                mid = a + (b - a) / 2
                if mid.astimezone(tz).utcoffset() == before:
                    a = mid
                else:
                    b = mid
            out.append((b, abs(after - before) + timedelta(hours=1)))  # type: ignore[operator]
        t, before = nxt, after
    return out


def around(timetable: Any, instant: datetime) -> list[Interval]:
    """The timetable's intervals from a few before ``instant`` to the one ending at or after it."""
    for margin in MARGINS:
        ivs = walk(timetable, instant - margin, until=instant)
        if ivs and ivs[0].start < instant:
            return ivs
    return walk(timetable, instant - MARGINS[-1], until=instant)


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
    ahead = walk(timetable, after, until=after + timedelta(seconds=1))
    return next((iv.start for iv in ahead if iv.start > after), None)


def intervals_between(timetable: Any, first: datetime, last: datetime) -> list[Interval]:
    """The timetable's intervals whose start lies in ``[first, last]``, in order."""
    lead = [iv for iv in around(timetable, first) if iv.start >= first]
    begin = lead[0].start if lead else first
    return [iv for iv in walk(timetable, begin, until=last + timedelta(microseconds=1)) if first <= iv.start <= last]


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
