"""Replayable sources: the exact input files of an interval, frozen at ``begin`` (DESIGN §4.1, §5).

A position is ``{"path", "rel", "size", "mtime", "etag"}`` for every input file of the interval's landing
folder (``<landing>/dt=YYYY-MM-DD/**/*.jsonl``, hidden and temp names skipped). The first ``begin`` of an
interval freezes them into the transaction log; every later attempt of the interval replays the same
list, so it computes the same answer. Files that land afterwards are *late*: :func:`late_files` finds
them, and an explicit re-run with ``refresh_sources`` takes them in as a new version.
"""
from __future__ import annotations

from typing import Any

from .storage import Storage, is_hidden

SUFFIXES = (".jsonl", ".json")


def list_positions(storage: Storage, landing: str, day: str) -> list[dict[str, Any]]:
    """The current input files of ``dt=<day>`` with size and mtime/etag, sorted by path."""
    folder = storage.join(landing, f"dt={day}")
    out = []
    for entry in storage.walk_files(folder):
        if any(is_hidden(seg) for seg in entry.rel.split("/")) or not entry.rel.endswith(SUFFIXES):
            continue
        path = storage.join(folder, entry.rel)
        meta = storage.file_meta(path)
        out.append({"path": storage.url(path), "rel": entry.rel, "size": entry.size,
                    "mtime": meta["mtime"], "etag": meta["etag"]})
    return out


def late_files(frozen: list[dict[str, Any]], current: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What changed in the landing folder since the positions were frozen.

    ``new``: files that were not frozen (late arrivals); ``changed``: same path, other size (an upstream
    rewrote a file); ``missing``: frozen files that are gone (replay of this interval is impossible).
    """
    old = {p["rel"]: p for p in frozen}
    now = {p["rel"]: p for p in current}
    return {
        "new": sorted(set(now) - set(old)),
        "changed": sorted(r for r in set(now) & set(old) if now[r]["size"] != old[r]["size"]),
        "missing": sorted(set(old) - set(now)),
    }
