"""Deterministic sample landing data for the page-view demo (DESIGN §5).

:func:`generate` writes ``<landing_root>/app_logs/dt=<day>/hour=HH/part-NNN.jsonl``: one JSON object per
line ``{"event_id", "app_id", "user_id", "event", "ts"}`` (sometimes with an extra ``ref`` field), with
what real at-least-once delivery brings: re-delivered events (the identical line, or the same event
re-serialised with other spacing, in the same or another file of the day), malformed lines of every
kind the job quarantines (not JSON, blank, not an object, a missing / wrongly typed / empty field, a bad
timestamp), a few events other than ``page_view``, ``ts`` with ``Z`` or a ``+02:00`` offset, and unicode
app and user ids.

Contract: the same arguments give byte-identical files (the random stream is seeded from
``(seed, day)`` only). Files are written atomically (temp file + ``rename``), and a file whose bytes
would not change is left alone, so re-generating keeps sizes and mtimes of frozen inputs stable.
"""
from __future__ import annotations

import argparse
import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from exactly_once.storage import LocalStorage

FIELDS = ("event_id", "app_id", "user_id", "event", "ts")
OTHER_EVENTS = ("click", "scroll", "purchase")
_PLUS2 = timezone(timedelta(hours=2))
_BAD_VALUES: tuple[Any, ...] = (123, True, None, {"nested": "x"}, ["a"])
_BAD_TS = ("2026-13-01T10:00:00Z", "2026-01-01", "yesterday", "2026-01-01 10:00:00", "2026-02-30T00:00:00Z")

Record = dict[str, Any]
Maker = Callable[[random.Random, Record], str]


def _dumps(record: Record, pretty: bool = False) -> str:
    if pretty:  # a re-delivery that another serializer produced: same event, other bytes
        return json.dumps(record, ensure_ascii=False, separators=(", ", ": "))
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _without(field: str) -> Maker:
    return lambda rng, rec: _dumps({k: v for k, v in rec.items() if k != field})


def _bad_type(field: str) -> Maker:
    return lambda rng, rec: _dumps({**rec, field: rng.choice(_BAD_VALUES)})


def _empty(field: str) -> Maker:
    return lambda rng, rec: _dumps({**rec, field: ""})


MALFORMED: tuple[tuple[str, Maker], ...] = (
    ("not_json", lambda rng, rec: _dumps(rec)[: rng.randrange(1, 40)]),
    ("not_json", lambda rng, rec: rng.choice(["", "   ", "\t"])),
    ("not_object", lambda rng, rec: rng.choice(['["page_view", 1]', "42", '"page_view"', "null"])),
    *((f"missing:{f}", _without(f)) for f in FIELDS),
    *((f"bad_type:{f}", _bad_type(f)) for f in FIELDS),
    *((f"empty:{f}", _empty(f)) for f in FIELDS),
    ("bad_ts", lambda rng, rec: _dumps({**rec, "ts": rng.choice(_BAD_TS)})),
)


def _names(apps: int, users: int) -> tuple[list[str], list[str]]:
    app_ids = [f"app-{i:02d}" if i % 4 != 3 else f"app-{i:02d}-ünïcødé-应用" for i in range(apps)]
    user_ids = [f"u{i:05d}" if i % 50 != 7 else f"пользователь-{i:05d}" for i in range(users)]
    return app_ids, user_ids


def _ts(rng: random.Random, day: str, hour: int) -> str:
    t = datetime.fromisoformat(day).replace(hour=hour, tzinfo=timezone.utc) + timedelta(
        seconds=rng.randrange(3600), milliseconds=rng.choice([0, rng.randrange(1000)]))
    if rng.random() < 0.1:
        t = t.astimezone(_PLUS2)
    text = t.isoformat(timespec="milliseconds" if t.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def _day_files(day: str, rng: random.Random, *, events: int, app_ids: list[str], user_ids: list[str],
               dup_rate: float, malformed_rate: float, hours: Sequence[int], files_per_hour: int
               ) -> tuple[dict[tuple[int, int], list[str]], dict[str, int]]:
    """Lines per (hour, file index) of one day, and what was put in."""
    slots = [(h, f) for h in hours for f in range(files_per_hour)]
    files: dict[tuple[int, int], list[str]] = {s: [] for s in slots}
    stats = {"events": events, "duplicates": 0, "malformed": 0}
    weights = [1.0 / (i + 1) for i in range(len(app_ids))]  # a few big apps, a long tail
    for i in range(events):
        hour, index = slot = rng.choice(slots)
        rec: Record = {"event_id": f"ev-{day}-{i:06d}-{rng.getrandbits(32):08x}",
                       "app_id": rng.choices(app_ids, weights)[0], "user_id": rng.choice(user_ids),
                       "event": "page_view" if rng.random() < 0.85 else rng.choice(OTHER_EVENTS),
                       "ts": _ts(rng, day, hour)}
        if rng.random() < 0.05:
            rec["ref"] = rng.choice(["/home", "/search?q=ü", "../x", "%2e%2e"])
        files[slot].append(_dumps(rec))
        if rng.random() < dup_rate:
            files[rng.choice([slot, rng.choice(slots)])].append(_dumps(rec, pretty=rng.random() < 0.5))
            stats["duplicates"] += 1
        if rng.random() < malformed_rate:
            _, make = MALFORMED[stats["malformed"] % len(MALFORMED)]  # rotate: every kind appears
            files[slot].append(make(rng, rec))
            stats["malformed"] += 1
    return files, stats


def _write_atomic(path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically (temp file + rename); False if it already held ``data``."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    LocalStorage().write_atomic(path, data)
    return True


def generate(landing_root: str, days: list[str], *, seed: int = 42, events_per_day: int = 2000,
             apps: int = 5, users: int = 300, dup_rate: float = 0.05, malformed_rate: float = 0.02,
             hours: Sequence[int] = (0, 6, 12, 18), files_per_hour: int = 1) -> dict[str, Any]:
    """Write sample landing files for ``days`` (``YYYY-MM-DD``) below ``landing_root``.

    Returns ``{"root", "files": [paths], "lines": {day: n}, "events"|"duplicates"|"malformed":
    {day: n}, "written": number of files whose content changed}``.
    """
    app_ids, user_ids = _names(apps, users)
    summary: dict[str, Any] = {"root": landing_root, "files": [], "lines": {}, "events": {},
                               "duplicates": {}, "malformed": {}, "written": 0}
    for day in days:
        datetime.strptime(day, "%Y-%m-%d")  # refuse anything else before it reaches a path
        rng = random.Random(f"{seed}:{day}")
        files, stats = _day_files(day, rng, events=events_per_day, app_ids=app_ids, user_ids=user_ids,
                                  dup_rate=dup_rate, malformed_rate=malformed_rate, hours=hours,
                                  files_per_hour=files_per_hour)
        for (hour, index), lines in sorted(files.items()):
            path = os.path.join(landing_root, "app_logs", f"dt={day}", f"hour={hour:02d}", f"part-{index:03d}.jsonl")
            summary["written"] += _write_atomic(path, "".join(line + "\n" for line in lines).encode())
            summary["files"].append(path)
        summary["lines"][day] = sum(len(lines) for lines in files.values())
        for key in ("events", "duplicates", "malformed"):
            summary[key][day] = stats[key]
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.sample_data --root DIR --days 2026-01-01 ...``; prints the summary."""
    p = argparse.ArgumentParser(description="Write deterministic sample landing data (app_logs).")
    p.add_argument("--root", required=True, help="landing root (the app_logs/ dir goes below it)")
    p.add_argument("--days", nargs="+", required=True, metavar="YYYY-MM-DD")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--events-per-day", type=int, default=2000)
    p.add_argument("--apps", type=int, default=5)
    p.add_argument("--users", type=int, default=300)
    p.add_argument("--dup-rate", type=float, default=0.05)
    p.add_argument("--malformed-rate", type=float, default=0.02)
    p.add_argument("--hours", type=int, nargs="+", default=[0, 6, 12, 18])
    p.add_argument("--files-per-hour", type=int, default=1)
    a = p.parse_args(argv)
    summary = generate(a.root, a.days, seed=a.seed, events_per_day=a.events_per_day, apps=a.apps,
                       users=a.users, dup_rate=a.dup_rate, malformed_rate=a.malformed_rate,
                       hours=tuple(a.hours), files_per_hour=a.files_per_hour)
    print(json.dumps({k: v for k, v in summary.items() if k != "files"} | {"files": len(summary["files"])},
                     ensure_ascii=False, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def pv_spec(landing: str, day: str, staging: str, prev_state: str | None = None) -> Any:
    """A pv_counts job spec over the current files of ``<landing>/dt=<day>/`` (benchmarks, no protocol)."""
    from exactly_once.contracts import JobSpec, SourceInputs
    from exactly_once.ids import Interval
    from exactly_once.protocol.layout import Source, list_inputs

    iv = Interval.daily(day)
    source = Source("app_logs", format="json")
    inputs = tuple(list_inputs(LocalStorage(), landing, source, iv))
    return JobSpec(pipeline="pv_pipeline", sink="app_pv", txn=f"bench-{day}", interval_start=iv.start.isoformat(),
                   interval_end=iv.end.isoformat(), partitions=(f"dt={day}",),
                   sources=(SourceInputs("app_logs", "json", {}, inputs),), staging_dir=staging,
                   data_dir=os.path.join(staging, "data"), prev_state=prev_state, stateful=True)
