"""Ownership (DESIGN §3): a table belongs to one pipeline, and each partition to one interval.

Both are exclusive-create records next to the table's log, written on first use and compared on every
later use, so a second DAG writing the same table, or two intervals whose output lands in the same
partition (an hourly job writing ``dt=<day>``), are refused before anything is decided - instead of
silently replacing each other's rows.
"""
from __future__ import annotations

import hashlib
import logging
import posixpath
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import OwnershipError
from ..ids import Interval, TxnRef
from ..storage import Storage, to_json
from .txlog import State, TxLog

log = logging.getLogger(__name__)

LOCATION_CLAIM = "_eo_owner.json"  # in a files / Delta table's own location: the owner publishing there


@dataclass(frozen=True)
class Owner:
    """Who publishes a table: the pipeline and sink, and where its log lives (``home``, a URL without
    credentials), identified by ``id`` - drawn once, when the owner record is created, so two sinks with
    the same names but different logs are different owners. Records written before owner ids existed get
    an id derived from pipeline, sink and home (``legacy``)."""

    id: str
    pipeline: str
    sink: str
    home: str
    legacy: bool = False

    def describe(self) -> str:
        return f"pipeline {self.pipeline!r} (sink {self.sink!r}, log at {self.home}, owner id {self.id})"

    def to_dict(self) -> dict[str, str]:
        return {"owner_id": self.id, "pipeline": self.pipeline, "sink": self.sink, "home": self.home}

    @classmethod
    def of(cls, record: dict[str, Any], home: str) -> "Owner":
        """The owner a record (an owner record, a target's claim) names."""
        pipeline, sink, home = str(record.get("pipeline")), str(record.get("sink")), record.get("home") or home
        if record.get("owner_id"):
            return cls(str(record["owner_id"]), pipeline, sink, home)
        digest = hashlib.sha256(f"{pipeline}/{sink}/{home}".encode()).hexdigest()[:16]
        return cls(f"legacy-{digest}", pipeline, sink, home, legacy=True)


def refuse_other_owner(where: str, holder: Owner, me: Owner) -> None:
    """OwnershipError if ``where`` (a target location) is bound to ``holder`` and that is not ``me``."""
    if holder.id != me.id:
        raise OwnershipError(
            f"{where} belongs to {holder.describe()}; {me.describe()} cannot publish there: nothing was "
            "decided. Give each pipeline its own target (table, namespace, prefix); if the other owner's log "
            "was deleted on purpose, remove its claim at the target and what it published there (partition links "
            "or manifests, markers, rows: a deleted log's versions can be neither rolled back nor recovered), then "
            "run the intervals again (docs/TARGETS.md, 'Ownership')")


def owner_record(storage: Storage, home: str) -> dict[str, Any] | None:
    """The table's owner record (``pipeline``, ``sink``, ``format``: ``files`` when written before formats
    existed; ``owner_id``, ``home``, and ``target``: the bound target's ``{kind, location, spec}``, when
    written by a version that binds them), or None if no writer has bound the table yet."""
    try:
        owner = storage.read_json(storage.join(home, "_owner.json"))
    except FileNotFoundError:
        return None
    return {**owner, "format": owner.get("format", "files")}


def bound_target(storage: Storage, home: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """The target binding of the owner record (``_target.json`` for records written before it existed)."""
    if record.get("target"):
        return record["target"]
    try:
        return storage.read_json(storage.join(home, "_target.json"))
    except FileNotFoundError:
        return None


def bind_table(storage: Storage, home: str, table: str, pipeline: str, sink: str,
               table_format: str = "files", target: dict[str, Any] | None = None,
               claimed_by: Callable[[str], bool] | None = None) -> Owner:
    """Record ``pipeline``/``sink`` (the table format, a fresh owner id and the ``target`` binding
    ``{kind, location, spec}``) as the table's owner if it has none; refuse any other owner, a switch of
    the table's format, and a target at another location than the bound one. Returns the owner."""
    path, url = storage.join(home, "_owner.json"), storage.url(home)
    storage.create_exclusive(path, to_json({"pipeline": pipeline, "sink": sink, "format": table_format,
                                            "owner_id": uuid.uuid4().hex, "home": url,
                                            **({"target": target} if target else {})}))
    owner = storage.read_json(path)
    bound = owner.get("format", "files")  # records written before formats existed: files
    if bound != table_format:
        raise OwnershipError(
            f"the table {storage.url(table)} is a {bound!r} table; it cannot be published as "
            f"{table_format!r}: keep table_format={bound!r}, or give the {table_format!r} table its own location")
    if (owner.get("pipeline"), owner.get("sink")) != (pipeline, sink):
        raise OwnershipError(
            f"the table {storage.url(table)} belongs to pipeline {owner.get('pipeline')!r} (sink "
            f"{owner.get('sink')!r}); pipeline {pipeline!r} (sink {sink!r}) cannot write it: give each "
            "pipeline its own table")
    if target:
        if not owner.get("target"):  # a record written before targets were bound: bind it beside
            storage.create_exclusive(storage.join(home, "_target.json"), to_json(target))
        was = bound_target(storage, home, owner) or target
        moved = _where(was, owner.get("home") or url) != _where(target, url)
        if moved and not (was.get("kind") == target.get("kind") and claimed_by and owner.get("owner_id")
                          and claimed_by(owner["owner_id"])):  # the same table reached by another name
            raise OwnershipError(
                f"{pipeline}/{sink} publishes to the {was.get('kind')} target {was.get('location')} (bound at "
                f"its first run, {storage.url(home)}); it is now configured with the {target.get('kind')} "
                f"target {target.get('location')}, which holds no claim of this sink (another server or "
                "database, or its claim was removed). A sink keeps its target: restore the configuration, or "
                "give the new target its own pipeline table (a new log)")
        refuse_spec_change(was, target, f"{pipeline}/{sink}", storage.url(home))
    return Owner.of(owner, url)


def _where(target: dict[str, Any], home: str) -> tuple[Any, Any]:
    """A binding's kind and location; a storage target's (files, Delta) location relative to the log's
    home, so a data root copied or moved whole (table and log together: a restored backup) keeps it."""
    kind, location = target.get("kind"), target.get("location")
    if kind in ("files", "delta") and isinstance(location, str):
        return kind, posixpath.relpath(location, home)
    return kind, location


def refuse_spec_change(was: dict[str, Any], now: dict[str, Any], who: str, home: str) -> None:
    """OwnershipError if a setting that decides what a publish writes (a spec key the target does not
    list as ``tunable``: mode, keys, ...) differs from the bound one: ``eo recover`` finishes a decided
    epoch with the bound spec, so a changed one would publish it otherwise than the sink now does."""
    tunable = set(now.get("tunable", ()))
    old, new = ({k: v for k, v in (b.get("spec") or {}).items() if k not in tunable} for b in (was, now))
    # a key newer than the record, or one the target could not tell now (unreachable): not compared
    changed = sorted(k for k in old if k in new and old[k] != new[k])
    if was.get("spec") is not None and changed:
        hints = "".join(f" {now['hints'][k]}." for k in changed if k in (now.get("hints") or {}))
        raise OwnershipError(
            f"{who} was bound at its first run ({home}) to publish with "
            f"{', '.join(f'{k}={old.get(k)!r}' for k in changed)}; it is now configured with "
            f"{', '.join(f'{k}={new.get(k)!r}' for k in changed)}.{hints} A decided epoch is finished (by `eo recover` "
            "too) with the bound settings, so they cannot change under it: restore the configuration, or "
            "start the new one as a new pipeline table (a new log) on a new target (docs/TARGETS.md, 'Ownership')")


def claim_location(storage: Storage, location: str, owner: Owner, kind: str) -> None:
    """Bind a files / Delta table location to ``owner`` (``<location>/_eo_owner.json``, hidden from
    readers) unless it is bound already; OwnershipError if another owner holds it."""
    path = storage.join(location, LOCATION_CLAIM)
    storage.create_exclusive(path, to_json({**owner.to_dict(), "kind": kind}))
    check_location(storage, location, owner)


def check_location(storage: Storage, location: str, owner: Owner) -> None:
    """OwnershipError unless ``location``'s claim (if any) names ``owner`` (a publish checks it)."""
    try:
        holder = storage.read_json(storage.join(location, LOCATION_CLAIM))
    except FileNotFoundError:
        return
    refuse_other_owner(f"the table {storage.url(location)}", Owner.of(holder, ""), owner)


class PartitionClaims:
    """``<home>/_claims/<partition>.json`` names the interval owning each partition; ``_shape.json`` the
    table's partition keys.

    A claim names the claiming interval *and transaction*. It is a chain of exclusive-create records:
    ``<partition>.json`` is generation 1, ``<partition>~<n>.json`` generation n; the newest generation is
    the current claim. A claim binds the partition to its interval only while that interval *holds* it:
    a COMMITTED or PRE_COMMITTED epoch that wrote the partition, or an OPEN epoch that claimed it (it may
    be between its claim and its PRE_COMMITTED record). An interval whose every such attempt was aborted
    (a job bug that wrote another interval's partition, then failed) holds nothing: the next interval
    that writes the partition takes the claim over by creating the next generation. Every attempt that
    claims a partition it does not hold for good creates a generation naming itself, so a takeover and a
    new attempt of the old owner race for one exclusive create - the loser looks again and is refused.
    """

    def __init__(self, storage: Storage, home: str, log: TxLog | None = None) -> None:
        self.storage = storage
        self.root = storage.join(home, "_claims")
        self.log = log or TxLog(storage, storage.join(home, "_txlog"))
        self._shape: tuple[str, ...] | None = None

    def claim(self, txn: TxnRef, partitions: list[str]) -> None:
        """Claim ``partitions`` for ``txn``'s interval. Raises OwnershipError for a partition another
        interval holds, or for partition keys other than the table's."""
        if partitions:
            shape = tuple(seg.split("=", 1)[0] for seg in partitions[0].split("/"))
            if self._shape is None:
                path = self.storage.join(self.root, "_shape.json")
                self.storage.create_exclusive(path, to_json({"keys": list(shape)}))
                self._shape = tuple(self.storage.read_json(path)["keys"])
            if shape != self._shape:
                raise OwnershipError(f"{txn.name}: partitions keyed {'/'.join(shape)} in a table partitioned "
                                     f"by {'/'.join(self._shape)}; keep one partitioning per table")
        ours: list[set[str]] = []  # held for good by a committed version of our interval (read when needed)

        def committed(part: str) -> bool:
            if not ours:
                ours.append({p for st in self.log.statuses(txn.interval).values() if st.state is State.COMMITTED
                             for p in st.published_partitions})
            return part in ours[0]

        for part in partitions:
            self._claim_one(txn, part, committed)

    def chain(self, partition: str) -> list[dict[str, Any]]:
        """Every generation of ``partition``'s claim, oldest first (``[]``: never claimed)."""
        found = []
        while True:
            try:
                found.append(self.storage.read_json(self._path(partition, len(found) + 1)))
            except FileNotFoundError:
                return found

    def holders(self, interval: str, partition: str, chain: list[dict[str, Any]]) -> list[str]:
        """The attempts (``e3 PRE_COMMITTED``) by which ``interval`` holds ``partition`` now."""
        named = {rec.get("epoch") for rec in chain if rec.get("interval") == interval}
        legacy = None in named  # a claim written before claims named their transaction
        iv = Interval.from_token(interval)
        found = []
        for epoch, st in self.log.statuses(iv).items():
            if st.state is State.ABORTED:
                continue
            if partition in st.published_partitions or (
                    st.state is State.OPEN and (legacy or epoch in named)):
                found.append(f"e{epoch} {st.state.value}")
        return found

    def _claim_one(self, txn: TxnRef, part: str, committed: Callable[[str], bool]) -> None:
        mine = txn.interval.token
        while True:
            chain = self.chain(part)
            current = chain[-1] if chain else None
            if current is not None:
                owner = current.get("interval")
                if owner == mine and (current.get("txn") == txn.name or committed(part)):
                    return  # ours: this attempt's own claim, or a committed version of ours holds it for good
                held = self.holders(owner, part, chain) if owner != mine else []
                if held:
                    raise OwnershipError(
                        f"{txn.name}: partition {part} belongs to interval {owner}, not {mine} (it holds it "
                        f"by {', '.join(held)}); two intervals may never publish one partition - declare "
                        "partitions that each interval owns alone (e.g. add hour=HH for hourly runs). An "
                        f"unfinished attempt of {owner} releases it once it ends: by its run's teardown, or "
                        "`eo recover <table-url>` once it is stale (--stale-after 0: now)")
            record = {"interval": mine, "txn": txn.name, "epoch": txn.epoch, "generation": len(chain) + 1,
                      **({"took_over": {k: current.get(k) for k in ("interval", "txn")}}
                         if current and current.get("interval") != mine else {})}
            if self.storage.create_exclusive(self._path(part, len(chain) + 1), to_json(record)):
                if "took_over" in record:
                    log.warning("%s: took over partition %s from interval %s (no attempt of it holds the "
                                "partition any more)", txn.name, part, current.get("interval"))  # type: ignore[union-attr]
                return
            # another attempt created that generation first: look again

    def _path(self, partition: str, generation: int) -> str:
        suffix = "" if generation == 1 else f"~{generation}"  # '~' never occurs in a partition value
        return self.storage.join(self.root, f"{partition}{suffix}.json")
