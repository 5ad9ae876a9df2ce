"""Issue 46 cases 5 and 6: every interval a timetable produces can be found and run by its start - local-time
schedules across both daylight-saving changes of a year included - and the local runner's tools resolve
``START=``, ``DATE=`` and ``END=`` to the timetable's own intervals, never a neighbour. Airflow's timetables,
no scheduler."""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from airflow.timetables.interval import CronDataIntervalTimetable
from airflow.timetables.trigger import CronTriggerTimetable

from exactly_once.errors import LayoutError
from exactly_once.ids import Interval
from exactly_once.protocol import timetables as tt
from exactly_once.protocol.layout import Partitions
from eo_testing import berlin_hour, berlin_hour_offset

UTC, BERLIN = timezone.utc, ZoneInfo("Europe/Berlin")
DAILY = CronDataIntervalTimetable("0 2 * * *", timezone="Europe/Berlin")
HOURLY = CronDataIntervalTimetable("0 * * * *", timezone="Europe/Berlin")
SPRING, AUTUMN = date(2026, 3, 29), date(2026, 10, 25)


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)


def local_days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=d) for d in range((last - first).days + 1)]


def test_every_daily_local_interval_around_both_dst_changes_is_found_by_its_start_its_end_and_its_date():
    """The Berlin daily schedule of 2026 around both changes: one interval per local date, starting at 02:00
    local (03:00 on the spring day, whose 02:00 does not exist), 23 h and 25 h where the clock jumps. Each is
    found by its start and by its end - also the one ending at the spring jump, which Airflow's manual-run
    inference makes zero-length and whose start Airflow's first-interval search skips."""
    seen = []
    for day in local_days(SPRING - timedelta(days=3), SPRING + timedelta(days=2)) + \
            local_days(AUTUMN - timedelta(days=3), AUTUMN + timedelta(days=2)):
        [iv] = tt.intervals_of_day(DAILY, day)
        assert iv.start.astimezone(BERLIN).date() == day
        assert iv.start.astimezone(BERLIN).hour == (3 if day == SPRING else 2)
        assert tt.interval_starting_at(DAILY, iv.start) == iv and tt.interval_ending_at(DAILY, iv.end) == iv
        seen.append(iv)
    lengths = {iv.start.astimezone(BERLIN).date(): iv.end - iv.start for iv in seen}
    assert lengths[SPRING] == timedelta(hours=23) and lengths[AUTUMN - timedelta(days=1)] == timedelta(hours=25)
    assert sum(lengths[d] != timedelta(days=1) for d in lengths) == 2
    jump = Interval(utc(2026, 3, 28, 1), utc(2026, 3, 29, 1))  # ends at the jump: the lost interval
    assert jump in seen
    assert DAILY.infer_manual_data_interval(run_after=__import__("pendulum").instance(jump.end)).end == jump.end
    assert tt.interval_starting_at(DAILY, utc(2026, 3, 28, 2)) is None  # not a start: none, never a neighbour
    assert tt.next_start(DAILY, utc(2026, 3, 28, 2)) == jump.end


def test_hourly_local_days_have_23_and_25_intervals_and_each_is_found_by_its_start():
    for day, n in ((SPRING, 23), (AUTUMN, 25), (SPRING + timedelta(days=1), 24)):
        ivs = tt.intervals_of_day(HOURLY, day)
        assert len(ivs) == n and all(iv.end - iv.start == timedelta(hours=1) for iv in ivs)
        assert all(a.end == b.start for a, b in zip(ivs, ivs[1:]))
        assert all(tt.interval_starting_at(HOURLY, iv.start) == iv for iv in ivs)
    assert tt.offset_changes(HOURLY, utc(2026, 1, 1)) == [utc(2026, 3, 29), utc(2026, 10, 25)]


def test_a_timetable_without_real_intervals_is_refused_with_the_way_out(monkeypatch):
    """A trigger timetable (zero-length intervals) and ``@continuous`` (intervals that end at the clock: they
    crashed on their microseconds) are refused by the local runner's lookups and ``make backfill``."""
    from airflow.timetables.simple import ContinuousTimetable

    import tools.localrun
    from tools.backfill import intervals_between

    with pytest.raises(LayoutError, match="zero-length data intervals.*CronDataIntervalTimetable"):
        tt.interval_starting_at(CronTriggerTimetable("0 0 * * *", timezone="UTC"), utc(2026, 1, 1))
    continuous = "'@continuous' .* starts a run as soon as the last one ends.*use CronDataIntervalTimetable"
    with pytest.raises(SystemExit, match=continuous):
        intervals_between(ContinuousTimetable(), utc(2026, 1, 1), utc(2026, 1, 2))
    monkeypatch.setattr(tools.localrun, "load_dag", lambda dag_id: SimpleNamespace(timetable=ContinuousTimetable()))
    with pytest.raises(SystemExit, match=continuous):
        tools.localrun.dag_interval("always", utc(2026, 1, 1))


def test_the_repeated_local_hour_is_refused_naming_it_and_the_utc_offset_tells_it_apart():
    """An hourly local-time DAG partitioned by local date and hour: the fall-back hour 02 occurs twice. The
    refusal says so and what to add (the UTC offset); with it the same day passes."""
    ivs = tt.intervals_of_day(HOURLY, AUTUMN)
    with pytest.raises(LayoutError, match=r"local time 2026-10-25 02:00 .*occurs twice.*\+0200 and \+0100.*UTC "
                                          r"offset in the partition"):
        Partitions(berlin_hour).check_distinct(ivs, zone=BERLIN)
    Partitions(berlin_hour_offset).check_distinct(ivs, zone=BERLIN)
    with pytest.raises(LayoutError, match="cannot express intervals of this length"):  # not a DST collision
        Partitions("dt={start:%Y-%m-%d}").check_distinct(ivs, zone=BERLIN)


def test_a_manual_run_on_an_hourly_cron_is_resolved_from_a_plain_datetime_and_at_the_jump_by_the_timetable():
    """Case 5: a re-run of an hourly interval handed the cron timetable a plain datetime and crashed
    (``'datetime.datetime' object has no attribute 'in_timezone'``). Case 6: the manual run ending at the
    spring jump resolves to the timetable's interval, not Airflow's zero-length one."""
    from tools.localrun import manual_interval

    hourly_utc = CronDataIntervalTimetable("0 * * * *", timezone="UTC")
    rerun = utc(2013, 1, 1, 11) + timedelta(microseconds=1)
    assert manual_interval(hourly_utc, rerun) == (utc(2013, 1, 1, 10), utc(2013, 1, 1, 11))
    for run_after in (utc(2026, 3, 29, 1), utc(2026, 3, 29, 1) + timedelta(microseconds=1)):
        assert manual_interval(DAILY, run_after) == (utc(2026, 3, 28, 1), utc(2026, 3, 29, 1))
    assert manual_interval(DAILY, utc(2026, 10, 25, 1)) == (utc(2026, 10, 24), utc(2026, 10, 25, 1))


def test_a_phase_takes_the_timetables_interval_where_airflow_gave_a_zero_length_one():
    from exactly_once.airflow.compat import AirflowFailException
    from exactly_once.airflow.operators import interval_of

    jump = utc(2026, 3, 29, 1)
    ctx = {"data_interval_start": jump, "data_interval_end": jump, "dag": SimpleNamespace(timetable=DAILY)}
    assert interval_of(ctx) == Interval(utc(2026, 3, 28, 1), jump)
    with pytest.raises(AirflowFailException, match="no real data interval"):  # no interval of the DAG ends there
        interval_of({**ctx, "data_interval_start": utc(2026, 3, 29, 5), "data_interval_end": utc(2026, 3, 29, 5)})
    with pytest.raises(AirflowFailException, match="no real data interval"):  # a trigger timetable: refused
        interval_of({**ctx, "dag": SimpleNamespace(timetable=CronTriggerTimetable("0 1 * * *", timezone="UTC"))})


def test_backfill_bounds_are_local_dates_and_end_takes_in_the_intervals_starting_on_it():
    """``make backfill START=2026-10-24 END=2026-10-27`` on the Berlin daily DAG: the four local days, 10-27's
    interval (starting 01:00Z) included - a plain date meant UTC midnight and left it out, exit 0."""
    from tools.backfill import intervals_between, parse_bound

    first, last = parse_bound("2026-10-24", DAILY), parse_bound("2026-10-27", DAILY, end=True)
    ivs = intervals_between(DAILY, first, last)
    assert [iv.start.astimezone(BERLIN).date() for iv in ivs] == local_days(date(2026, 10, 24), date(2026, 10, 27))
    assert [iv.end - iv.start for iv in ivs] == [timedelta(hours=25)] + [timedelta(days=1)] * 3
    utc_daily = CronDataIntervalTimetable("0 0 * * *", timezone="UTC")
    assert len(intervals_between(utc_daily, parse_bound("2026-01-01", utc_daily),
                                 parse_bound("2026-01-31", utc_daily, end=True))) == 31
    spring = intervals_between(DAILY, parse_bound("2026-03-27", DAILY), parse_bound("2026-03-29", DAILY, end=True))
    assert Interval(utc(2026, 3, 28, 1), utc(2026, 3, 29, 1)) in spring and len(spring) == 3


def test_date_resolves_to_the_local_dates_interval_or_refuses_never_a_neighbour(monkeypatch):
    """``make run-interval DATE=2026-03-28`` on the Berlin daily DAG ran the 03-27 interval again, silently:
    now DATE is the interval starting on that local date; on an hourly schedule it is refused (use START=);
    on a daily UTC schedule it keeps meaning the UTC day (the public contract)."""
    import tools.localrun
    from tools.dev import date_interval

    def dag(timetable):
        monkeypatch.setattr(tools.localrun, "load_dag", lambda dag_id: SimpleNamespace(timetable=timetable))

    dag(DAILY)
    what, kw = date_interval("berlin_daily", "2026-03-28")
    assert kw == {"start": utc(2026, 3, 28, 1), "end": utc(2026, 3, 29, 1)} and "Europe/Berlin" in what
    dag(HOURLY)
    with pytest.raises(SystemExit, match="23 intervals starting on 2026-03-29.*START="):
        date_interval("berlin_hourly", "2026-03-29")
    dag(CronDataIntervalTimetable("0 0 * * *", timezone="UTC"))
    assert date_interval("pv_pipeline", "2026-03-28")[1] == {"day": "2026-03-28"}
    # West of UTC, after the business day: 19:00 EST is 00:00Z in winter, so the UTC day's interval exists and
    # starts on the local day before; DATE is still the local date's interval (as make backfill reads it)
    dag(CronDataIntervalTimetable("0 19 * * *", timezone="America/New_York"))
    assert date_interval("ny_daily", "2026-01-10")[1] == {"start": utc(2026, 1, 11), "end": utc(2026, 1, 12)}
    assert date_interval("ny_daily", "2026-07-10")[1] == {"start": utc(2026, 7, 10, 23), "end": utc(2026, 7, 11, 23)}


def airflow_chain(timetable, earliest: datetime, until: datetime) -> list[Interval]:
    """The timetable's intervals the way its scheduler makes them: one ``next_dagrun_info`` a step."""
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction

    restriction, out, last = TimeRestriction(pendulum.instance(earliest), None, True), [], None
    while not out or out[-1].end < until:
        di = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction).data_interval
        out.append(Interval(di.start, di.end))
        last = DataInterval(di.start, di.end)
    return out


@pytest.mark.parametrize("timetable, first, days", [
    (HOURLY, utc(2026, 3, 26), 6), (HOURLY, utc(2026, 10, 22), 6),              # both Berlin changes, hour by hour
    (CronDataIntervalTimetable("30 2 * * *", timezone="Europe/Berlin"), utc(2026, 1, 1), 366),  # skipped, repeated 02:30
    (DAILY, utc(2026, 1, 1), 366),
    (CronDataIntervalTimetable("*/20 * * * *", timezone="Europe/Berlin"), utc(2026, 10, 24), 2),  # the repeated hour
    (CronDataIntervalTimetable("0 0 * * *", timezone="America/Santiago"), utc(2026, 1, 1), 366),  # midnight jumps
    (CronDataIntervalTimetable("0 12 * * *", timezone="Pacific/Apia"), utc(2011, 12, 20), 20),  # a day skipped
    (CronDataIntervalTimetable("0 0 1 * 1", timezone="America/New_York"), utc(2026, 1, 1), 366),  # dom OR dow
    (CronDataIntervalTimetable("15 6,18 * * 1-5", timezone="Europe/Berlin"), utc(2026, 1, 1), 366),
    (CronDataIntervalTimetable("0 0 L * *", timezone="UTC"), utc(2026, 1, 1), 366),  # the last day of the month
    (__import__("airflow.timetables.interval", fromlist=["x"]).DeltaDataIntervalTimetable(
        __import__("dateutil.relativedelta", fromlist=["x"]).relativedelta(months=1)), utc(2026, 1, 31), 366),
    (__import__("airflow.timetables.interval", fromlist=["x"]).DeltaDataIntervalTimetable(timedelta(hours=7)),
     utc(2026, 1, 1), 30),
], ids=["berlin-hourly-spring", "berlin-hourly-autumn", "berlin-0230", "berlin-daily", "berlin-20min",
        "santiago-midnight", "apia-2011", "dom-or-dow", "weekdays-twice", "last-of-month", "delta-month",
        "delta-7h"])
def test_the_computed_walk_is_the_timetables_own_chain(timetable, first, days):
    """``walk`` computes most steps (a delta; a cron's fire times on the local calendar with the offset of
    the stretch) and asks the timetable near every UTC-offset change: over a year of each schedule (or the
    days around its changes) it gives exactly the intervals Airflow's scheduler would, one by one."""
    until = first + timedelta(days=days)
    assert tt.walk(timetable, first, until=until) == airflow_chain(timetable, first, until)


def test_a_year_of_an_hourly_local_schedule_has_every_hour_once():
    """The DAG-build check's year: 8760 intervals from a January start, the spring day's 23 and the autumn
    day's 25 among them, contiguous."""
    ivs = tt.year_of_intervals(HOURLY, utc(2026, 1, 1))
    assert len(ivs) == 366 * 24 and all(a.end == b.start for a, b in zip(ivs, ivs[1:]))
    days = [iv.start.astimezone(BERLIN).date() for iv in ivs]
    assert days.count(SPRING) == 23 and days.count(AUTUMN) == 25
