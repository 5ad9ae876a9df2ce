"""Layout declarations (exactly_once.protocol.layout) and the contracts (exactly_once.contracts), without a JVM."""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest

from exactly_once.contracts import Counts, FrozenInput, JobSpec, SourceInputs
from exactly_once.errors import ContractError, LayoutError, UnsafeIdentifierError
from exactly_once.ids import Interval
from exactly_once.protocol.layout import Partitions, Source, list_inputs
from exactly_once.protocol.timetables import timetable_intervals
from exactly_once.storage import LocalStorage

UTC = timezone.utc


def hours(start: datetime, n: int) -> list[Interval]:
    return [Interval(start + timedelta(hours=i), start + timedelta(hours=i + 1)) for i in range(n)]


def test_partition_templates_render_per_interval():
    iv = Interval(datetime(2013, 1, 1, 5, tzinfo=UTC), datetime(2013, 1, 1, 6, tzinfo=UTC))
    assert Partitions("dt={start:%Y-%m-%d}/hour={start:%H}").for_interval(iv) == ("dt=2013-01-01/hour=05",)
    assert Partitions(lambda i: [f"month={i.start:%Y-%m}"]).for_interval(iv) == ("month=2013-01",)
    month = Interval(datetime(2013, 2, 1, tzinfo=UTC), datetime(2013, 3, 1, tzinfo=UTC))
    assert Partitions("month={start:%Y-%m}").check_interval(month) == ("month=2013-02",)


@pytest.mark.parametrize("template, error", [
    ("dt={start:%Y/%m}", UnsafeIdentifierError),              # a '/' inside a value
    ("dt={start:%Y-%m-%d} {start:%H}", UnsafeIdentifierError),  # a space
    (lambda iv: ["app=../../etc"], UnsafeIdentifierError),
    (lambda iv: ["a=1", "a=1/b=2"], LayoutError),             # nested
    (lambda iv: ["a=1", "b=2"], LayoutError),                 # two shapes
    (lambda iv: [], LayoutError),
    ("dt={day}", LayoutError),                                # an unknown field
])
def test_unsafe_or_impossible_partitions_are_refused(template, error):
    iv = Interval(datetime(2013, 1, 1, tzinfo=UTC), datetime(2013, 1, 2, tzinfo=UTC))
    with pytest.raises(error):
        Partitions(template).for_interval(iv)


def test_a_daily_template_cannot_express_hourly_intervals():
    daily = Partitions("dt={start:%Y-%m-%d}")
    with pytest.raises(LayoutError, match=r"would both own partition dt=2013-01-01.*hour=\{start:%H\}"):
        daily.check_distinct(hours(datetime(2013, 1, 1, tzinfo=UTC), 3))
    with pytest.raises(LayoutError, match="cannot express intervals of this length"):
        daily.check_interval(hours(datetime(2013, 1, 1, 10, tzinfo=UTC), 1)[0])  # its neighbour shares dt=
    Partitions("dt={start:%Y-%m-%d}/hour={start:%H}").check_distinct(hours(datetime(2013, 1, 1, tzinfo=UTC), 48))


def test_timetables_give_their_data_intervals_or_are_refused():
    from airflow.sdk import CronDataIntervalTimetable, CronTriggerTimetable

    start = datetime(2013, 1, 1, tzinfo=UTC)
    hourly = timetable_intervals(CronDataIntervalTimetable("0 * * * *", timezone="UTC"), start, 3)
    assert hourly == hours(start, 3)
    monthly = timetable_intervals(CronDataIntervalTimetable("0 0 1 * *", timezone="UTC"), start, 3)
    assert [(i.start.month, i.end.month) for i in monthly] == [(1, 2), (2, 3), (3, 4)]
    custom = timetable_intervals(CronDataIntervalTimetable("30 6,18 * * 1-5", timezone="UTC"), start, 4)
    assert all(a.end == b.start for a, b in zip(custom, custom[1:]))  # contiguous, uneven lengths
    assert {i.end - i.start for i in custom} >= {timedelta(hours=12)}
    with pytest.raises(LayoutError, match="zero-length data intervals.*CronDataIntervalTimetable"):
        timetable_intervals(CronTriggerTimetable("0 * * * *", timezone="UTC"), start, 3)


def test_sources_freeze_matching_files_only(tmp_path):
    day = tmp_path / "flights" / "dt=2013-01-01"
    day.mkdir(parents=True)
    for name in ("flights_2013010105.csv", "flights_2013010105.part2.csv.gz", "flights_2013010106.csv",
                 ".flights_2013010105.csv.tmp-1", "_flights_2013010105.csv", "flights_2013010105.csv.tmp",
                 "flights_2013010105.json"):
        (day / name).write_text("x\n")
    src = Source("flights", format="csv", path="dt={start:%Y-%m-%d}/flights_{start:%Y%m%d%H}*.csv*")
    iv = hours(datetime(2013, 1, 1, 5, tzinfo=UTC), 1)[0]
    found = list_inputs(LocalStorage(), str(tmp_path / "flights"), src, iv)
    assert [f.rel for f in found] == ["dt=2013-01-01/flights_2013010105.csv",
                                      "dt=2013-01-01/flights_2013010105.part2.csv.gz"]
    assert all(f.size == 2 and os.path.isfile(f.path) for f in found)
    folder = Source("logs", format="json")  # a folder: every JSON file below dt=<day>/, at any depth
    (tmp_path / "logs" / "dt=2013-01-01" / "hour=05").mkdir(parents=True)
    (tmp_path / "logs" / "dt=2013-01-01" / "hour=05" / "a.jsonl").write_text("{}\n")
    assert [f.rel for f in list_inputs(LocalStorage(), str(tmp_path / "logs"), folder, iv)] == \
        ["dt=2013-01-01/hour=05/a.jsonl"]


def test_bad_source_declarations_are_refused():
    with pytest.raises(LayoutError, match="unknown format 'excel'"):
        Source("x", format="excel")
    assert Source("x", format="excel", suffixes=(".xlsx",)).wanted("a.xlsx")
    iv = Interval(datetime(2013, 1, 1, tzinfo=UTC), datetime(2013, 1, 2, tzinfo=UTC))
    with pytest.raises(UnsafeIdentifierError, match="inside the landing root"):
        Source("x", path="../{start:%Y}").patterns(iv)
    with pytest.raises(LayoutError, match="reader options must be strings"):
        Source("x", options={"header": True})  # type: ignore[dict-item]


def test_contracts_round_trip_and_refuse_malformed_documents():
    spec = JobSpec("p", "t", "x.e000001", "2013-01-01T00:00:00+00:00", "2013-01-01T01:00:00+00:00",
                   ("dt=2013-01-01/hour=00",), (SourceInputs("s", "csv", {"header": "true"},
                                                              (FrozenInput("/a.csv", "a.csv", 3),)),),
                   "/staging/x", "/staging/x/data")
    assert JobSpec.from_json(spec.to_json()) == spec
    assert spec.interval == Interval(datetime(2013, 1, 1, tzinfo=UTC), datetime(2013, 1, 1, 1, tzinfo=UTC))
    with pytest.raises(ContractError, match="version"):
        JobSpec.from_dict({**spec.to_dict(), "version": 99})
    with pytest.raises(ContractError, match="inside the staging dir"):
        JobSpec(**{**spec.__dict__, "prev_state": "/staging/x/_state"})
    counts = Counts(records_in=5, records_out=3, records_rejected=1, records_deduplicated=1,
                    rows_written={"dt=2013-01-01/hour=00": 2}, metrics={"flights": 3})
    assert Counts.from_dict(counts.to_dict()) == counts
    for bad, match in (({"records_in": -1}, "non-negative"), ({"records_out": True}, "non-negative"),
                       ({"lines_read": 3}, "unknown fields"), ({"rows_written": {"../x": 1}}, "unsafe partition"),
                       ({"metrics": {"x": float("nan")}}, "finite numbers"),
                       ({"metrics": {"staged_rows": 1}}, "taken by the counts frame")):
        with pytest.raises((ContractError, UnsafeIdentifierError), match=match):
            Counts.from_dict({**counts.to_dict(), **bad})


def test_an_interval_reads_as_dates():
    from datetime import datetime, timezone

    from exactly_once.ids import Interval

    utc = lambda *a: datetime(*a, tzinfo=timezone.utc)  # noqa: E731
    assert Interval.daily("2026-01-04").label == "2026-01-04"
    assert Interval(utc(2026, 1, 4, 5), utc(2026, 1, 4, 6)).label == "2026-01-04 05:00 - 06:00 UTC"
    assert Interval(utc(2026, 1, 1), utc(2026, 2, 1)).label == "2026-01-01 00:00 - 2026-02-01 00:00 UTC"
