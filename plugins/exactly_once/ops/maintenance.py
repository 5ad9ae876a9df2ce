"""Garbage collection: delete only what the transaction log says is finished (DESIGN §4 "Garbage").

``gc`` never touches a transaction that could still commit: it first runs ``recover`` (which finishes
decided commits and aborts attempts with no sign of life for ``stale_after`` seconds on the storage's
clock - :func:`exactly_once.protocol.liveness.is_stale`: a write whose heartbeat is fresh is left alone), then removes

* staging dirs of ABORTED or COMMITTED-and-published transactions (and orphans with no log record),
  and their heartbeats;
* superseded versions - their data in the target, their checkpoint (state, counts) and their log
  records - only once a *newer* version of the interval has been published for ``min_age`` seconds (the
  grace period), so a reader that resolved the old version just before the switch, or a successor that
  read its state, can still finish; the log's ``outcome`` and ``published`` records stay as tombstones
  (a zombie of that epoch stays fenced, recovery sees it finished, and a later publish still knows every
  partition the interval ever had);
* checkpoints of aborted transactions at once (they were never live).

The grace is judged on the STORAGE's clock (:class:`StorageClock`), like takeovers
(:mod:`exactly_once.protocol.liveness`): a version stopped being live when the newer epoch's ``published``
record was stored - that object's storage timestamp, never a time a publisher wrote into it (a commit
worker whose clock is hours slow must not make gc delete a version replaced a moment ago) - and never
judged by data files' mtimes.

One broken interval never stops the others: its failure is reported under ``failed``.
"""
from __future__ import annotations

import logging
from typing import Callable

from ..protocol import liveness
from ..protocol.batch import collect as collect_batches
from ..errors import ExactlyOnceError
from ..ids import Interval, parse_txn_name
from ..protocol.transaction import TwoPhaseCommitSink
from ..records.txlog import EpochStatus, State

log = logging.getLogger(__name__)
COMPACTABLE = ("open", "pre_committed", "validated", "intent")  # outcome + published stay: tombstones


Stamp = Callable[[int, str], "float | None"]  # (epoch, record kind) -> its storage timestamp


class StorageClock:
    """gc's clock: the storage's own. ``now`` is the timestamp the storage gives a probe object written
    now (:func:`~exactly_once.protocol.liveness.storage_now`); :meth:`stamps` gives a log record's storage
    timestamp (local mtime, S3 ``LastModified``) - when it was stored, whatever clock its writer had."""

    def __init__(self, sink: TwoPhaseCommitSink) -> None:
        self.sink = sink
        self.now = liveness.storage_now(sink.storage, sink.home)
        self._seen: dict[str, float | None] = {}

    def stamps(self, interval: Interval) -> Stamp:
        """``(epoch, kind) -> storage timestamp`` of that record of ``interval``; None if it is absent."""
        def stamp(epoch: int, kind: str) -> float | None:
            path = self.sink.log.record_path(interval, epoch, kind)
            if path not in self._seen:
                try:
                    self._seen[path] = self.sink.storage.modified_at(path)
                except FileNotFoundError:
                    self._seen[path] = None
            return self._seen[path]

        return stamp


def retired_at(statuses: dict[int, EpochStatus], epoch: int, stamp: Stamp) -> float | None:
    """When epoch ``epoch``'s version stopped being live, on the storage's clock: the earliest stored
    ``published`` record of a newer committed epoch of the interval (every newer publish covers every
    partition an older epoch had; the record is stored after the switch, so the grace never starts
    early). None: still current."""
    times = [stamp(e, "published") for e, st in statuses.items()
             if e > epoch and st.state is State.COMMITTED and st.published]
    return min((t for t in times if t is not None), default=None)


def grace_over(statuses: dict[int, EpochStatus], epoch: int, min_age: float, clock: StorageClock,
               interval: Interval) -> bool:
    """True when a newer version of the interval has been live for ``min_age`` s of the storage clock:
    only then may epoch ``epoch``'s data, checkpoint and log records go."""
    since = retired_at(statuses, epoch, clock.stamps(interval))
    return since is not None and clock.now - since >= min_age


def garbage_judge(sink: TwoPhaseCommitSink, min_age: float, clock: StorageClock) -> Callable[[str], bool]:
    """``version name -> bool``: True when the log says a newer version has been live for ``min_age``."""
    cache: dict[str, dict[int, EpochStatus]] = {}

    def judge(version: str) -> bool:
        parsed = parse_txn_name(version)
        if parsed is None:
            return False
        token, epoch = parsed
        if token not in cache:
            cache[token] = sink.status(Interval.from_token(token))
        return grace_over(cache[token], epoch, min_age, clock, Interval.from_token(token))

    return judge


def compactable(statuses: dict[int, EpochStatus], epoch: int, current: bool, min_age: float,
                clock: StorageClock, interval: Interval) -> bool:
    """May epoch ``epoch``'s records be compacted (all but its tombstones)? Only when it is not the
    interval's current version, a newer epoch has been *published* (a publish still running needs the
    older epochs' manifests to know every partition the interval had) and ``min_age`` has passed on the
    storage clock since it stopped being live (aborted epochs: since their abort was stored)."""
    if current or not any(e > epoch and s.published for e, s in statuses.items()):
        return False
    if statuses[epoch].state is State.COMMITTED:
        return grace_over(statuses, epoch, min_age, clock, interval)
    since = clock.stamps(interval)(epoch, "outcome")
    return since is not None and clock.now - since >= min_age


def gc(sink: TwoPhaseCommitSink, *, min_age: float = 3600.0,
       stale_after: float = 6 * 3600.0) -> dict[str, list[str]]:
    """Collect garbage of one sink; returns what was removed, by kind (and ``failed`` intervals)."""
    report: dict[str, list[str]] = {"recovered": sink.recover(stale_after=stale_after), "staging": [],
                                    "checkpoints": [], "versions": [], "log_records": [], "heartbeats": [],
                                    "batches": [], "failed": []}
    storage, clock = sink.storage, StorageClock(sink)
    for iv in sink.log.intervals():
        try:
            _collect_interval(sink, iv, min_age, clock, report)
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
    report["batches"] = collect_batches(sink, min_age=min_age, stale_after=stale_after, now=clock.now)
    report["versions"] = sink.target.sweep(garbage_judge(sink, min_age, clock))
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


def _collect_interval(sink: TwoPhaseCommitSink, iv: Interval, min_age: float, clock: StorageClock,
                      report: dict[str, list[str]]) -> None:
    statuses = sink.status(iv)
    current = sink.committed(iv)
    for epoch, st in statuses.items():
        txn = sink.ref(iv, epoch)
        finished = st.state is State.ABORTED or (st.state is State.COMMITTED and st.published)
        if not finished:
            continue
        is_current = current is not None and current[0] == txn
        checkpoint = sink.checkpoint_dir(txn)  # it has its version's grace; none if never live (aborted)
        if sink.storage.exists(checkpoint) and (st.state is State.ABORTED or (
                not is_current and grace_over(statuses, epoch, min_age, clock, iv))):
            _remove(sink, "checkpoints", checkpoint, report)
        if not (st.state is State.COMMITTED and sink.target.publishes_in_place):
            _remove(sink, "staging", sink.staging_dir(txn), report)  # a Delta version's staging holds its
            # data files: the target's sweep decides
        if any(k in st.records for k in COMPACTABLE) and compactable(statuses, epoch, is_current, min_age,
                                                                      clock, iv):
            for kind in COMPACTABLE:
                if kind in st.records:
                    sink.log.remove(iv, epoch, kind)
                    report["log_records"].append(f"{txn.name}.{kind}")


def _remove(sink: TwoPhaseCommitSink, kind: str, path: str, report: dict[str, list[str]]) -> None:
    if sink.storage.exists(path):
        sink.storage.remove_tree(path)
        report[kind].append(path)
