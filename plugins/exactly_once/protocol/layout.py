"""Layout declarations: which partitions an interval owns, and where each source's files are.

A *template* is a ``str.format`` string over the interval - ``start`` and ``end`` are UTC datetimes, so
``"dt={start:%Y-%m-%d}/hour={start:%H}"`` - or a callable ``Interval -> str | list[str]``.

* :class:`Partitions` - the output partitions an interval owns. Two intervals must never own one
  partition: :meth:`Partitions.check_distinct` proves it for a list of intervals (the DAG's schedule at
  DAG build time, an interval and its neighbours at ``begin``) and refuses with :class:`LayoutError`.
* :class:`Source` - one input: its Spark format (anything ``spark.read.format(...)`` takes), a path
  template relative to the source's landing root (a folder - every file below it - or a glob such as
  ``"dt={start:%Y-%m-%d}/flights_{start:%Y%m%d%H}*.csv"``), reader options, and whether an interval with
  no files is normal. :func:`list_inputs` freezes the matching files (hidden and temp names skipped).

Everything is checked before anything is written: unsafe partition values, paths that escape the
landing root, unknown formats. See ``docs/LAYOUT.md``.
"""
from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field
from datetime import tzinfo
from itertools import combinations
from typing import Callable, Mapping, Sequence, Union

from ..contracts import FrozenInput
from ..errors import LayoutError, UnsafeIdentifierError
from ..ids import Interval, check_name, check_partition
from ..storage import Storage, is_hidden

Template = Union[str, Callable[[Interval], Union[str, Sequence[str]]]]

# the file name endings of each Spark source format (a compression suffix may follow them)
FORMATS: dict[str, tuple[str, ...]] = {
    "json": (".json", ".jsonl", ".ndjson"), "csv": (".csv", ".tsv"), "text": (".txt", ".log", ".text"),
    "parquet": (".parquet",), "orc": (".orc",), "avro": (".avro",), "xml": (".xml",),
    "binaryFile": ("",),
}
COMPRESSION = ("", ".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")
_GLOB = set("*?[")
TEMP_SUFFIXES = (".tmp", ".temp", ".part", ".crc", ".swp", ".inprogress", ".COPYING")


def describe(template: Template) -> str:
    return template if isinstance(template, str) else getattr(template, "__name__", repr(template))


def render(template: Template, interval: Interval) -> list[str]:
    """The strings ``template`` gives for ``interval`` (one for a format string)."""
    if callable(template):
        out = template(interval)
        values = [out] if isinstance(out, str) else list(out)
    else:
        try:
            values = [template.format(start=interval.start, end=interval.end)]
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise LayoutError(f"template {template!r} does not render for {interval}: {exc!r}; use the "
                              "fields {start} and {end} (UTC datetimes), e.g. dt={start:%Y-%m-%d}") from None
    if not all(isinstance(v, str) for v in values):
        raise LayoutError(f"template {describe(template)} must give strings, gave {values!r}")
    return values


def _collision(a: Interval, b: Interval, zone: tzinfo | None, coarse: bool = True) -> str:
    """What two intervals that render one partition have in common, and what to add to the template
    (``coarse``: they are the first two it rendered - it cannot tell intervals of this length apart)."""
    if zone is not None and a.start != b.start:
        la, lb = a.start.astimezone(zone), b.start.astimezone(zone)
        if la.replace(tzinfo=None) == lb.replace(tzinfo=None):
            return (f"gives both the local time {la:%Y-%m-%d %H:%M} ({zone}), which occurs twice when daylight "
                    f"saving time ends (UTC offsets {la:%z} and {lb:%z}); put the UTC offset in the partition, "
                    "e.g. a callable giving f\"dt={s:%Y-%m-%d}/hour={s:%H%z}\" of the local start s "
                    "(hour=02+0200, hour=02+0100) - docs/LAYOUT.md, Time zones")
    if not coarse:  # it told earlier intervals apart: it repeats a value here
        return (f"gives the same partition to two intervals {abs(b.start - a.start)} apart, after telling the "
                "earlier ones apart; every interval needs partitions of its own - make the template tell them apart")
    return (f"cannot express intervals of this length ({b.end - b.start}); add the finer fields, e.g. "
            "hour={start:%H} for hourly runs")


@dataclass(frozen=True)
class Partitions:
    """The output partitions each interval owns (``key=value[/key=value]`` paths)."""

    template: Template = "dt={start:%Y-%m-%d}"

    def for_interval(self, interval: Interval) -> tuple[str, ...]:
        """The partitions ``interval`` owns: at least one, each safe, none nested in another, one shape."""
        parts = render(self.template, interval)
        if not parts:
            raise LayoutError(f"partition template {describe(self.template)} gives no partition for {interval}")
        for p in parts:
            try:
                check_partition(p)
            except UnsafeIdentifierError as exc:
                raise UnsafeIdentifierError(f"{exc} (rendered from {describe(self.template)} for {interval}); "
                                            "partition values may hold letters, digits and _ . : + -") from None
        shapes = {tuple(seg.split("=", 1)[0] for seg in p.split("/")) for p in parts}
        if len(shapes) > 1:
            raise LayoutError(f"partitions {parts} of {interval} use different keys; use one shape")
        for a, b in combinations(sorted(set(parts)), 2):
            if b.startswith(a + "/"):
                raise LayoutError(f"partition {b} is nested in {a}")
        return tuple(sorted(set(parts)))

    def check_distinct(self, intervals: Sequence[Interval], zone: tzinfo | None = None) -> None:
        """Refuse (LayoutError) if two of ``intervals`` would own the same partition; the message names the
        collision (``zone``: the schedule's time zone, to tell a repeated local hour)."""
        owner: dict[str, Interval] = {}
        for n, iv in enumerate(intervals):
            for p in self.for_interval(iv):
                other = owner.setdefault(p, iv)
                if other != iv:
                    raise LayoutError(f"intervals {other} and {iv} would both own partition {p}: the partition "
                                      f"template {describe(self.template)!r} {_collision(other, iv, zone, n == 1)}")

    def check_interval(self, interval: Interval) -> tuple[str, ...]:
        """The partitions of ``interval``, after checking that its neighbours of the same length
        (``[start - len, start)`` and ``[end, end + len)``) own none of them."""
        length = interval.end - interval.start
        neighbours = [interval]
        for side in (-1, 1):
            try:
                start = interval.start - length if side < 0 else interval.end
                neighbours.append(Interval(start, start + length))
            except (UnsafeIdentifierError, OverflowError):
                pass  # at the edge of the representable range (the years 1000 and 9999)
        self.check_distinct(neighbours)
        return self.for_interval(interval)


@dataclass(frozen=True)
class Source:
    """One input of a pipeline. ``root`` is the source's landing root (default
    ``<data root>/landing/<name>``); ``path`` is relative to it."""

    name: str
    format: str = "json"
    path: Template = "dt={start:%Y-%m-%d}"
    options: Mapping[str, str] = field(default_factory=dict)
    allow_empty: bool = False
    root: str | None = None
    suffixes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "source name")
        if self.suffixes is None and self.format not in FORMATS:
            raise LayoutError(f"source {self.name}: unknown format {self.format!r}; use one of "
                              f"{sorted(FORMATS)} or give suffixes=(...) for another Spark format")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(self.options).items()):
            raise LayoutError(f"source {self.name}: reader options must be strings, e.g. {{'header': 'true'}}")
        object.__setattr__(self, "options", dict(self.options))

    @property
    def endings(self) -> tuple[str, ...]:
        base = self.suffixes if self.suffixes is not None else FORMATS[self.format]
        return tuple(s + c for s in base for c in COMPRESSION)

    def patterns(self, interval: Interval) -> list[str]:
        """The rendered relative paths (folders or globs) of ``interval``; refused if one escapes."""
        out = []
        for rel in render(self.path, interval):
            segs = rel.strip("/").split("/")
            if rel.startswith("/") or "\\" in rel or "\x00" in rel or any(s in ("", ".", "..") for s in segs):
                raise UnsafeIdentifierError(f"source {self.name}: path {rel!r} (from {describe(self.path)}) "
                                            "must be a relative path inside the landing root")
            out.append("/".join(segs))
        return out

    def wanted(self, name: str) -> bool:
        """A data file of this source: the format's ending, not hidden, not a temp file."""
        return (not is_hidden(name) and not name.endswith(TEMP_SUFFIXES) and "._COPYING_" not in name
                and name.endswith(self.endings))

    def landing(self, data_root: str) -> str:
        return self.root or f"{data_root.rstrip('/')}/landing/{self.name}"


def _split_glob(pattern: str) -> tuple[str, str]:
    """``("a/b", "c*/d.csv")``: the longest folder prefix without glob characters, and the rest."""
    segs = pattern.split("/")
    for i, seg in enumerate(segs):
        if _GLOB & set(seg):
            return "/".join(segs[:i]), "/".join(segs[i:])
    return pattern, ""


def list_inputs(storage: Storage, root: str, source: Source, interval: Interval) -> list[FrozenInput]:
    """The current files of ``source`` for ``interval`` with size and mtime/etag, sorted by path.

    A folder pattern takes every file below it; a glob pattern (``*``, ``?``, ``[...]``, matched with
    :mod:`fnmatch` against the path below its folder prefix) the files it matches. Hidden names (``_``/
    ``.``), temp files and files without the format's ending are skipped.
    """
    found: dict[str, FrozenInput] = {}
    for pattern in source.patterns(interval):
        prefix, rest = _split_glob(pattern)
        folder = storage.join(root, prefix) if prefix else root
        for entry in storage.walk_files(folder):
            segs = entry.rel.split("/")
            if any(is_hidden(s) for s in segs) or not source.wanted(segs[-1]):
                continue
            if rest and not fnmatch.fnmatchcase(entry.rel, rest):
                continue
            path = storage.join(folder, entry.rel)
            rel = posixpath.join(prefix, entry.rel) if prefix else entry.rel
            meta = storage.file_meta(path)
            found[rel] = FrozenInput(storage.url(path), rel, entry.size, meta.get("mtime"), meta.get("etag"))
    return [found[k] for k in sorted(found)]


def late_files(frozen: Sequence[FrozenInput], current: Sequence[FrozenInput]) -> dict[str, list[str]]:
    """What changed in a source's files since they were frozen: ``new`` files (late arrivals),
    ``changed`` (same path, other size, etag or - local files - mtime) and ``missing`` (a replay is
    impossible)."""
    old = {p.rel: p for p in frozen}
    now = {p.rel: p for p in current}
    changed = [r for r in set(now) & set(old) if old[r].changed_from(now[r])]
    return {"new": sorted(set(now) - set(old)), "changed": sorted(changed), "missing": sorted(set(old) - set(now))}

