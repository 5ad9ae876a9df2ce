"""Identities (DESIGN §3): names that reach storage paths are allow-listed and rendered as safe tokens.

* pipeline / sink names: ``[A-Za-z0-9][A-Za-z0-9_.-]*`` (at most 128 characters, no ``..``);
* an interval ``[start, end)`` in UTC renders as ``20260101T000000Z_20260102T000000Z``; its years have four
  digits: from 1000 (historical data, before 1970, included) to 9999 (MySQL/MariaDB's DATETIME, where a
  database target keeps the interval, has the same range);
* a transaction is (pipeline, sink, interval, epoch) and names its staging dir ``<interval>.e000007``;
* a partition is ``key=value[/key=value...]`` with allow-listed keys and values.

A raw Airflow run id never reaches a path.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from .errors import UnsafeIdentifierError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
NAME_MAX = 128
_PART_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PART_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}")
_TOKEN_FMT = "%Y%m%dT%H%M%SZ"
FIRST_YEAR = 1000  # four-digit years: the tokens sort in time order, strftime pads nothing it need not
_TXN = re.compile(r"([0-9]{8}T[0-9]{6}Z_[0-9]{8}T[0-9]{6}Z)\.e([0-9]{6,})")


def check_name(value: str, what: str = "identifier", max_len: int = NAME_MAX) -> str:
    """Return ``value`` if it is a safe name for a path segment, else raise UnsafeIdentifierError.

    ``max_len`` is 128 for a name a user gives; a composed name (``<pipeline>.<txn>``, ~170) passes a larger one,
    still within a file name's 255 bytes."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value:
        raise UnsafeIdentifierError(f"unsafe {what} {value!r}: allowed are letters, digits, '_', '.', '-'")
    if len(value) > max_len:
        raise UnsafeIdentifierError(f"unsafe {what} {value!r}: at most {max_len} characters, not {len(value)}")
    return value


def check_partition(partition: str) -> str:
    """Validate a hive partition path such as ``dt=2026-01-01`` (or ``a=1/b=x``) and return it."""
    segments = partition.split("/") if isinstance(partition, str) else []
    for seg in segments:
        key, sep, value = seg.partition("=")
        if not sep or not _PART_KEY.fullmatch(key) or not _PART_VALUE.fullmatch(value) or ".." in value:
            raise UnsafeIdentifierError(f"unsafe partition {partition!r}: expected key=value[/key=value]")
    if not segments:
        raise UnsafeIdentifierError(f"unsafe partition {partition!r}")
    return partition


def safe_join(root: str, *parts: str) -> str:
    """Join relative ``parts`` under ``root`` and refuse any result that is not strictly inside it."""
    for p in parts:
        if not isinstance(p, str) or p.startswith("/") or "\\" in p or "\x00" in p:
            raise UnsafeIdentifierError(f"unsafe path component {p!r}")
        if any(seg in ("..", ".") for seg in p.split("/")):
            raise UnsafeIdentifierError(f"path component {p!r} would escape {root!r}")
    joined = posixpath.normpath(posixpath.join(root, *parts))
    base = posixpath.normpath(root)
    if joined != base and not joined.startswith(base.rstrip("/") + "/"):
        raise UnsafeIdentifierError(f"path {joined!r} escapes root {root!r}")
    return joined


def utc(value: datetime | date | str) -> datetime:
    """``value`` as an aware UTC datetime: a date is its midnight, a naive datetime is taken as UTC,
    a string is ISO-8601 (``Z`` allowed)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise UnsafeIdentifierError(f"not an ISO-8601 date/time: {value!r}") from exc
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    if type(value) is not datetime:  # pendulum's DateTime (Airflow) subtracts to its own Interval type
        value = datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                         value.microsecond, tzinfo=timezone.utc)
    return value


@dataclass(frozen=True, order=True)
class Interval:
    """A data interval ``[start, end)`` in UTC (Airflow's ``data_interval_start/end``)."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", utc(self.start))
        object.__setattr__(self, "end", utc(self.end))
        if not self.start < self.end:
            raise UnsafeIdentifierError(f"empty or reversed interval [{self.start}, {self.end})")
        if self.start.year < FIRST_YEAR:
            raise UnsafeIdentifierError(f"interval out of range: [{self.start}, {self.end}) starts before the year "
                                        f"{FIRST_YEAR}: interval tokens (and a MySQL/MariaDB target's DATETIME) have "
                                        "four-digit years; shift the calendar of older data by whole centuries")
        if self.start.microsecond or self.end.microsecond:  # the token has whole seconds only
            raise UnsafeIdentifierError(f"interval bounds must be whole seconds: [{self.start}, {self.end})")

    @classmethod
    def daily(cls, day: date | datetime | str) -> "Interval":
        """The day starting at midnight UTC of ``day``."""
        start = utc(day).replace(hour=0, minute=0, second=0, microsecond=0)
        try:
            end = start + timedelta(days=1)
        except OverflowError:
            raise UnsafeIdentifierError(f"interval out of range: the day {start.date()} ends after the year 9999, "
                                        "the last a datetime has") from None
        return cls(start, end)

    @classmethod
    def from_token(cls, token: str) -> "Interval":
        """Parse a token made by :attr:`token`; anything else is refused."""
        m = re.fullmatch(r"([0-9]{8}T[0-9]{6}Z)_([0-9]{8}T[0-9]{6}Z)", token) if isinstance(token, str) else None
        if not m:
            raise UnsafeIdentifierError(f"not an interval token: {token!r}")
        try:
            start, end = (datetime.strptime(g, _TOKEN_FMT).replace(tzinfo=timezone.utc) for g in m.groups())
        except ValueError as exc:  # month 13, 30 February ...
            raise UnsafeIdentifierError(f"not an interval token: {token!r} ({exc})") from None
        return cls(start, end)

    @property
    def token(self) -> str:
        """The interval as a path-safe token, e.g. ``20260101T000000Z_20260102T000000Z``."""
        return f"{self.start.strftime(_TOKEN_FMT)}_{self.end.strftime(_TOKEN_FMT)}"

    @property
    def label(self) -> str:
        """For people: ``2026-01-04`` for a day from midnight UTC, else ``2026-01-04 05:00 - 06:00 UTC``
        (the end's date too when it differs)."""
        midnight = (self.start.hour, self.start.minute, self.start.second) == (0, 0, 0)
        if self.end - self.start == timedelta(days=1) and midnight:
            return self.day
        end = f"{self.end:%H:%M}" if self.end.date() == self.start.date() else f"{self.end:%Y-%m-%d %H:%M}"
        return f"{self.start:%Y-%m-%d %H:%M} - {end} UTC"

    @property
    def day(self) -> str:
        """``YYYY-MM-DD`` of the start (the ``dt=`` partition of a daily interval)."""
        return self.start.strftime("%Y-%m-%d")

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"


@dataclass(frozen=True)
class TxnRef:
    """A transaction: one attempt (epoch) to publish one sink's output for one interval.

    It is small and JSON-serialisable (:meth:`to_dict`) so Airflow tasks hand it on through XCom.
    """

    pipeline: str
    sink: str
    interval: Interval
    epoch: int

    def __post_init__(self) -> None:
        check_name(self.pipeline, "pipeline id")
        check_name(self.sink, "sink name")
        if not isinstance(self.epoch, int) or isinstance(self.epoch, bool) or self.epoch < 1:
            raise UnsafeIdentifierError(f"bad epoch {self.epoch!r}")

    @property
    def name(self) -> str:
        """Path-safe transaction name: ``<interval token>.e<epoch>``; unique per (sink, interval, epoch)."""
        return f"{self.interval.token}.e{self.epoch:06d}"

    def to_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "sink": self.sink, "interval": self.interval.token,
                "epoch": self.epoch}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TxnRef":
        """The transaction a dict from :meth:`to_dict` (e.g. XCom) names; anything else is refused."""
        if not isinstance(d, dict) or not {"pipeline", "sink", "interval", "epoch"} <= d.keys():
            raise UnsafeIdentifierError("not a transaction: expected pipeline, sink, interval and epoch")
        epoch = d["epoch"]
        if isinstance(epoch, str) and epoch.isascii() and epoch.isdigit():
            epoch = int(epoch)
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise UnsafeIdentifierError(f"bad epoch {d['epoch']!r}")
        return cls(d["pipeline"], d["sink"], Interval.from_token(d["interval"]), epoch)


def parse_txn_name(name: str) -> tuple[str, int] | None:
    """``(interval token, epoch)`` of a transaction name, or None if ``name`` is not one."""
    m = _TXN.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else None


def published_name(version: str, name: str) -> str:
    """The name a file of ``version`` gets where readers see it: unique per version, so a reader that
    planned its paths on one version can never read another version's bytes under the same name."""
    return f"{version}--{name}"


def version_of(published: str) -> str | None:
    """The version (transaction name) a file named by :func:`published_name` belongs to, else None."""
    head, sep, _ = published.partition("--")
    return head if sep and parse_txn_name(head) else None
