"""Test oracle: the page-view computation of ``spark_jobs/pv_counts.py`` in plain Python, no Spark.

Written from the rules (DESIGN §5 and the job's docstring), not from the job's code: nothing is shared.
It reads whole files into memory, so it is for test-sized data only.

* :func:`read_lines` - a file's lines: split on ``\\n`` only, a final ``\\n`` ends the last line, a
  leading UTF-8 BOM is skipped, bytes decoded as UTF-8 with invalid sequences replaced by U+FFFD.
* :func:`classify` - ``(reason, record)`` of one line; ``reason`` is None for a valid line.
* :func:`quarantine` - the malformed lines of some files as the job writes them to ``_quarantine``.
* :func:`compute` - ``(rows, new_state, counts)`` of one interval.
"""
from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime, timedelta
from typing import Any, Iterator

FIELDS = ("event_id", "app_id", "user_id", "event", "ts")
MAX_LINE_CHARS = 2_000_000   # longer lines are beyond the parser: not_json
MAX_DEPTH = 64               # deepest nesting of arrays/objects a line may have
MAX_DIGITS = 1000            # digits a number literal may have
MAX_KEY_UNITS = 50_000       # UTF-16 code units an object key may have
RAW_CHARS = 10_000
_TS = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))",
                 re.ASCII)
_EPOCH = datetime(1970, 1, 1)


class _Reject(ValueError):
    """The text is JSON-ish but not acceptable (duplicate key, NaN, too long a number or key)."""


def read_lines(path: str) -> list[str]:
    """The lines of ``path`` as the job sees them (see the module docstring)."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", errors="replace") for p in parts]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Reject(f"duplicate key {key!r}")
        if len(key.encode("utf-16-le", "surrogatepass")) // 2 > MAX_KEY_UNITS:
            raise _Reject("key too long")
        out[key] = value
    return out


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if sum(c.isdigit() for c in text) > MAX_DIGITS:
            raise _Reject("number too long")
        return kind(text)
    return parse


def _constant(name: str) -> Any:
    raise _Reject(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_number(int), parse_float=_number(float),
                            parse_constant=_constant, strict=True)


def _depth(line: str) -> int:
    """Maximum nesting of ``[``/``{`` outside string literals."""
    depth = deepest = 0
    in_str = escaped = False
    for c in line:
        if in_str:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _parse(line: str) -> tuple[bool, Any]:
    """``(True, value)`` if ``line`` is exactly one acceptable JSON value, else ``(False, None)``."""
    if len(line) > MAX_LINE_CHARS:
        return False, None
    if line.count("[") + line.count("{") > MAX_DEPTH and _depth(line) > MAX_DEPTH:
        return False, None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * MAX_DEPTH))
    try:
        return True, _DECODER.decode(line)
    except (ValueError, RecursionError):
        return False, None
    finally:
        sys.setrecursionlimit(limit)


def ts_micros(ts: str) -> int | None:
    """Microseconds since the epoch of a valid ``ts`` (extra fraction digits truncated), else None."""
    m = _TS.fullmatch(ts)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zulu, sign, off_h, off_m = m.group(7), m.group(8), m.group(9), m.group(10), m.group(11)
    try:
        local = datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None
    offset = 0
    if not zulu:
        if int(off_m) > 59 or int(off_h) * 60 + int(off_m) > 18 * 60:
            return None
        offset = (int(off_h) * 60 + int(off_m)) * (1 if sign == "+" else -1)
    micros = int((frac or "")[:6].ljust(6, "0"))
    return (local - _EPOCH) // timedelta(microseconds=1) + micros - offset * 60_000_000


def classify(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """``(reason, None)`` for a malformed line, ``(None, record)`` for a valid one.

    ``record`` holds the five fields (strings; a lone surrogate becomes ``?``) and ``ts_us``.
    """
    ok, doc = _parse(line)
    if not ok:
        return "not_json", None
    if not isinstance(doc, dict):
        return "not_object", None
    for field in FIELDS:
        if field not in doc:
            return f"missing:{field}", None
        if not isinstance(doc[field], str):
            return f"bad_type:{field}", None
        if doc[field] == "":
            return f"empty:{field}", None
    record = {f: doc[f].encode("utf-8", "replace").decode("utf-8") for f in FIELDS}
    micros = ts_micros(record["ts"])
    if micros is None:
        return "bad_ts", None
    record["ts_us"] = micros
    return None, record


def _classified(files: list[str]) -> Iterator[tuple[str, str, str | None, dict[str, Any] | None]]:
    for path in files:
        for line in read_lines(path):
            reason, record = classify(line)
            yield path, line, reason, record


def quarantine(files: list[str]) -> list[dict[str, str]]:
    """``{"file", "raw" (first 10,000 chars), "reason"}`` for every malformed line, in input order."""
    return [{"file": path, "raw": line[:RAW_CHARS], "reason": reason}
            for path, line, reason, _ in _classified(files) if reason is not None]


def compute(files: list[str], prev_state: dict[str, int], partition: str | None = None
            ) -> tuple[list[dict[str, Any]], dict[str, int], dict[str, Any]]:
    """One interval: ``(rows sorted by app_id, new_state, counts)``.

    ``counts`` is the job's ``_counts.json`` (the counts schema); ``rows_written`` names ``partition``
    only if it is given.
    """
    lines = malformed = 0
    by_reason: dict[str, int] = {}
    best: dict[str, tuple[int, bytes, dict[str, Any]]] = {}
    valid = 0
    for _, line, reason, record in _classified(files):
        lines += 1
        if reason is not None:
            malformed += 1
            by_reason[reason] = by_reason.get(reason, 0) + 1
            continue
        valid += 1
        key = (record["ts_us"], line.encode("utf-8"))
        held = best.get(record["event_id"])
        if held is None or key < held[:2]:
            best[record["event_id"]] = (*key, record)
    pv: dict[str, int] = {}
    users: dict[str, set[str]] = {}
    for _, _, record in best.values():
        if record["event"] == "page_view":
            pv[record["app_id"]] = pv.get(record["app_id"], 0) + 1
            users.setdefault(record["app_id"], set()).add(record["user_id"])
    new_state = dict(prev_state)
    for app, n in pv.items():
        new_state[app] = prev_state.get(app, 0) + n
    rows = [{"app_id": app, "pv": pv[app], "uv": len(users[app]), "cumulative_pv": new_state[app]}
            for app in sorted(pv, key=lambda a: a.encode("utf-8"))]
    counts: dict[str, Any] = {  # the counts schema of docs/JOB_API.md, as the job writes it
        "version": 1, "records_in": lines, "records_out": len(best), "records_rejected": malformed,
        "records_deduplicated": valid - len(best), "records_filtered": 0,
        "rows_written": {partition: len(rows)} if partition is not None else {},
        "state_rows": len(new_state), "input_files": len(files),
        "input_bytes": sum(os.path.getsize(p) for p in files),
        "rejected_by_reason": dict(sorted(by_reason.items())), "metrics": {"page_views": sum(pv.values())},
    }
    return rows, new_state, counts
