"""Garbage collection: delete only what the transaction log says is finished (DESIGN §4 "Garbage").

``gc`` never touches a transaction that could still commit: it first runs ``recover`` (which finishes
decided commits and aborts attempts with no sign of life for ``stale_after`` seconds on the storage's
clock - :func:`exactly_once.liveness.is_stale`: a write whose heartbeat is fresh is left alone), then removes

* staging dirs of ABORTED or COMMITTED-and-published transactions (and orphans with no log record),
  and their heartbeats;
* checkpoints that are not their interval's current committed version;
* superseded versions (their data in the target) - only once a *newer* version of the interval has
  been published for ``min_age`` seconds, so a reader that resolved the old version just before the
  switch can still finish; the time comes from the log (the newer epoch's ``published`` record), never
  from file mtimes;
* log records of superseded epochs on the same condition - except each epoch's ``outcome`` and
  ``published`` records, which stay as tombstones (a zombie of that epoch stays fenced, recovery sees it
  finished, and a later publish still knows every partition the interval ever had).

One broken interval never stops the others: its failure is reported under ``failed``.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from . import liveness
from .errors import ExactlyOnceError
from .ids import Interval, parse_txn_name
from .transaction import TwoPhaseCommitSink
from .txlog import EpochStatus, State

log = logging.getLogger(__name__)
COMPACTABLE = ("open", "pre_committed", "validated", "intent")  # outcome + published stay: tombstones


def retired_at(statuses: dict[int, EpochStatus], epoch: int) -> float | None:
    """When epoch ``epoch``'s version stopped being live: the first publish of a newer committed epoch of
    the interval (every newer publish covers every partition an older epoch had). None: still current."""
    times = [st.published_at for e, st in statuses.items()
             if e > epoch and st.state is State.COMMITTED and st.published_at is not None]
    return min(times) if times else None  # type: ignore[type-var]


def garbage_judge(sink: TwoPhaseCommitSink, min_age: float, now: float) -> Callable[[str], bool]:
    """``version name -> bool``: True when the log says a newer version has been live for ``min_age``."""
    cache: dict[str, dict[int, EpochStatus]] = {}

    def judge(version: str) -> bool:
        parsed = parse_txn_name(version)
        if parsed is None:
            return False
        token, epoch = parsed
        if token not in cache:
            cache[token] = sink.status(Interval.from_token(token))
        since = retired_at(cache[token], epoch)
        return since is not None and now - since >= min_age

    return judge


def compactable(statuses: dict[int, EpochStatus], epoch: int, current: bool, min_age: float,
                now: float) -> bool:
    """May epoch ``epoch``'s records be compacted (all but its tombstones)? Only when it is not the
    interval's current version, a newer epoch has been *published* (a publish still running needs the
    older epochs' manifests to know every partition the interval had) and ``min_age`` has passed since
    it stopped being live (aborted epochs: since they began)."""
    st = statuses[epoch]
    since = retired_at(statuses, epoch) if st.state is State.COMMITTED else st.started_at
    return (not current and since is not None and now - since >= min_age
            and any(e > epoch and s.published for e, s in statuses.items()))


def gc(sink: TwoPhaseCommitSink, *, min_age: float = 3600.0,
       stale_after: float = 6 * 3600.0) -> dict[str, list[str]]:
    """Collect garbage of one sink; returns what was removed, by kind (and ``failed`` intervals)."""
    report: dict[str, list[str]] = {"recovered": sink.recover(stale_after=stale_after), "staging": [],
                                    "checkpoints": [], "versions": [], "log_records": [], "heartbeats": [],
                                    "failed": []}
    storage, now = sink.storage, time.time()
    for iv in sink.log.intervals():
        try:
            _collect_interval(sink, iv, min_age, now, report)
        except (ExactlyOnceError, OSError) as exc:
            log.error("gc %s/%s %s failed: %s", sink.pipeline, sink.sink, iv, exc)
            report["failed"].append(f"{iv.token}: {type(exc).__name__}: {exc}")
    staging_root = storage.join(sink.home, "_staging")
    for name in storage.list_names(staging_root):
        parsed = parse_txn_name(name)
        if parsed and not sink.status(Interval.from_token(parsed[0])).get(parsed[1]):
            path = storage.join(staging_root, name)
            storage.remove_tree(path)
            report["staging"].append(path)
    report["heartbeats"] = _collect_heartbeats(sink)
    report["versions"] = sink.target.sweep(garbage_judge(sink, min_age, now))
    return report


def _collect_heartbeats(sink: TwoPhaseCommitSink) -> list[str]:
    """Delete the heartbeats of finished (or unknown) transactions and the temp files of beats whose
    process died mid-write (a live beat that loses its temp file just logs it and beats again); an
    unfinished transaction keeps its heartbeat."""
    storage, removed = sink.storage, []
    root = storage.join(sink.home, liveness.HEARTBEATS)
    for name in storage.list_names(root):
        parsed = parse_txn_name(name)
        if parsed is None:
            if name.startswith(".tmp-"):
                storage.remove_tree(storage.join(root, name))
                removed.append(name)
            continue  # else the storage clock's probe
        st = sink.status(Interval.from_token(parsed[0])).get(parsed[1])
        if st is None or st.state is State.ABORTED or (st.state is State.COMMITTED and st.published):
            storage.remove_tree(storage.join(root, name))
            removed.append(name)
    return removed


def _collect_interval(sink: TwoPhaseCommitSink, iv: Interval, min_age: float, now: float,
                      report: dict[str, list[str]]) -> None:
    statuses = sink.status(iv)
    current = sink.committed(iv)
    for epoch, st in statuses.items():
        txn = sink.ref(iv, epoch)
        finished = st.state is State.ABORTED or (st.state is State.COMMITTED and st.published)
        if not finished:
            continue
        for kind, path in (("staging", sink.staging_dir(txn)), ("checkpoints", sink.checkpoint_dir(txn))):
            if kind == "checkpoints" and current and current[0] == txn:
                continue
            if kind == "staging" and st.state is State.COMMITTED and sink.target.publishes_in_place:
                continue  # a Delta version's staging holds its data files: the target's sweep decides
            if sink.storage.exists(path):
                sink.storage.remove_tree(path)
                report[kind].append(path)
        if compactable(statuses, epoch, current is not None and current[0] == txn, min_age, now):
            for kind in COMPACTABLE:
                if kind in st.records:
                    sink.log.remove(iv, epoch, kind)
                    report["log_records"].append(f"{txn.name}.{kind}")
