"""The durable transaction log: one small JSON record per transition, never overwritten.

Layout, next to the table (``<table>/_txlog/`` - hidden from readers by the ``_`` prefix)::

    _txlog/<interval token>/e000001.open.json           begin: owner, frozen sources, meta
    _txlog/<interval token>/e000001.pre_committed.json  pre_commit: the manifest
    _txlog/<interval token>/e000001.validated.json      validate: the gate's verdict and summary
    _txlog/<interval token>/e000001.intent.json         about to decide COMMITTED (orders dependents)
    _txlog/<interval token>/e000001.outcome.json        THE decision: {"state": "COMMITTED"|"ABORTED"}
    _txlog/<interval token>/e000001.published.json      commit finished (publish done, staging gone)

Every record is created with an exclusive create (O_EXCL-style ``link(2)`` locally, ``If-None-Match: *``
on S3), so two processes can never both write the same record. The ``outcome`` record is the single
linearization point of a transaction: whoever creates it first decides commit or abort, and the other
side learns the decision by reading it. Epochs are allocated by creating ``e<n+1>.open.json``.
"""
from __future__ import annotations

import enum
import getpass
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from ..ids import Interval, TxnRef
from .manifest import Manifest, ManifestFile
from ..storage import Storage, to_json

KINDS = ("open", "pre_committed", "validated", "intent", "outcome", "published")


class State(str, enum.Enum):
    OPEN = "OPEN"
    PRE_COMMITTED = "PRE_COMMITTED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


def owner() -> dict[str, Any]:
    """Who wrote a record (for people and for the stale-owner check in gc)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = "?"
    return {"host": socket.gethostname(), "pid": os.getpid(), "user": user, "at": time.time()}


@dataclass
class EpochStatus:
    """What the log says about one epoch of one interval."""

    epoch: int
    records: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def state(self) -> State:
        outcome = self.records.get("outcome")
        if outcome:
            return State(outcome["state"])
        return State.PRE_COMMITTED if "pre_committed" in self.records else State.OPEN

    @property
    def published(self) -> bool:
        return "published" in self.records

    @property
    def started_at(self) -> float:
        rec = self.records.get("open") or next(iter(self.records.values()), {})
        return float(rec.get("owner", {}).get("at", 0.0))

    @property
    def validation(self) -> dict[str, Any] | None:
        return self.records.get("validated")

    @property
    def manifest(self) -> Manifest | None:
        rec = self.records.get("pre_committed")
        return Manifest.from_dict(rec["manifest"]) if rec else None

    @property
    def published_at(self) -> float | None:
        """When the publish finished (the writer's clock), None if it has not."""
        rec = self.records.get("published")
        return float(rec.get("owner", {}).get("at", 0.0)) if rec else None

    @property
    def reason(self) -> str | None:
        """Why the outcome was decided as it was (e.g. which epoch fenced it), if recorded."""
        return (self.records.get("outcome") or {}).get("reason")

    @property
    def reads(self) -> TxnRef | None:
        """The predecessor's committed transaction whose state this one read (stateful pipelines)."""
        found = (self.records.get("open") or {}).get("reads")
        return TxnRef.from_dict(found) if found else None

    @property
    def request(self) -> str | None:
        """Who asked for this transaction, if its begin said (``meta["request"]``, an idempotency key such
        as an Airflow run's id); a commit decision repeats it, so it survives gc's compaction."""
        meta = (self.records.get("open") or {}).get("meta") or {}
        return meta.get("request") or (self.records.get("outcome") or {}).get("request")

    @property
    def published_partitions(self) -> list[str]:
        """Every partition this epoch ever wrote or published (manifest, and the published record,
        which survives log compaction)."""
        parts = set((self.records.get("published") or {}).get("partitions", {}))
        rec = self.records.get("pre_committed")
        return sorted(parts | set(rec["manifest"]["partitions"] if rec else ()))


class TxLog:
    """Read and append records for one table (sink). All paths stay under ``root``."""

    def __init__(self, storage: Storage, root: str) -> None:
        self.storage = storage
        self.root = root

    def _path(self, interval: Interval, epoch: int | None = None, kind: str | None = None) -> str:
        if epoch is None:
            return self.storage.join(self.root, interval.token)
        assert kind in KINDS, kind
        return self.storage.join(self.root, interval.token, f"e{epoch:06d}.{kind}.json")

    def record_path(self, interval: Interval, epoch: int, kind: str) -> str:
        """Where record ``kind`` of ``epoch`` lives (it may not exist)."""
        return self._path(interval, epoch, kind)

    def append(self, interval: Interval, epoch: int, kind: str, payload: dict[str, Any]) -> bool:
        """Create record ``kind`` of ``epoch``; False if it already existed (someone else wrote it)."""
        body = {"epoch": epoch, "interval": interval.token, "kind": kind, "owner": owner(), **payload}
        return self.storage.create_exclusive(self._path(interval, epoch, kind), to_json(body))

    def read(self, interval: Interval, epoch: int, kind: str) -> dict[str, Any] | None:
        try:
            return self.storage.read_json(self._path(interval, epoch, kind))
        except FileNotFoundError:
            return None

    def statuses(self, interval: Interval) -> dict[int, EpochStatus]:
        """Every epoch of ``interval`` with all its records, from one listing of the interval's dir."""
        out: dict[int, EpochStatus] = {}
        base = self._path(interval)
        for name in self.storage.list_names(base):
            parts = name.split(".")
            if len(parts) != 3 or parts[2] != "json" or parts[1] not in KINDS or not parts[0][1:].isdigit():
                continue
            epoch = int(parts[0][1:])
            try:
                rec = self.storage.read_json(self.storage.join(base, name))
            except FileNotFoundError:  # removed by a concurrent gc compaction
                continue
            out.setdefault(epoch, EpochStatus(epoch)).records[parts[1]] = rec
        return dict(sorted(out.items()))

    def status(self, interval: Interval, epoch: int) -> EpochStatus:
        return self.statuses(interval).get(epoch, EpochStatus(epoch))

    def newest_committed(self, interval: Interval) -> int:
        """The interval's newest COMMITTED epoch in the log now (0: none)."""
        return max((e for e, s in self.statuses(interval).items() if s.state is State.COMMITTED), default=0)

    def committed_files(self, interval: Interval, epoch: int, partition: str) -> tuple[ManifestFile, ...] | None:
        """The files ``partition`` has in the manifest of ``interval``'s ``epoch`` if it is COMMITTED (``()``:
        a partition it does not produce), else None (not committed, or its manifest compacted away)."""
        st = self.status(interval, epoch)
        if st.state is not State.COMMITTED or st.manifest is None:
            return None
        return tuple(st.manifest.partitions.get(partition, ()))

    def intervals(self) -> list[Interval]:
        """Every interval with at least one record, oldest first."""
        found = []
        for name in self.storage.list_names(self.root):
            try:
                found.append(Interval.from_token(name))
            except ValueError:
                continue
        return sorted(found)

    def remove(self, interval: Interval, epoch: int, kind: str) -> None:
        """Drop one record (gc compaction only; never the ``outcome`` record, which fences zombies)."""
        assert kind != "outcome"
        self.storage.remove_tree(self._path(interval, epoch, kind))

