"""Ownership (DESIGN §3): a table belongs to one pipeline, and each partition to one interval.

Both are exclusive-create records next to the table's log, written on first use and compared on every
later use, so a second DAG writing the same table, or two intervals whose output lands in the same
partition (an hourly job writing ``dt=<day>``), are refused before anything is decided - instead of
silently replacing each other's rows.
"""
from __future__ import annotations

from typing import Any

from .errors import OwnershipError
from .ids import TxnRef
from .storage import Storage, to_json


def owner_record(storage: Storage, home: str) -> dict[str, Any] | None:
    """The table's owner record (``pipeline``, ``sink``, ``format``: ``files`` when written before formats
    existed), or None if no writer has bound the table yet."""
    try:
        owner = storage.read_json(storage.join(home, "_owner.json"))
    except FileNotFoundError:
        return None
    return {**owner, "format": owner.get("format", "files")}


def bind_table(storage: Storage, home: str, table: str, pipeline: str, sink: str,
               table_format: str = "files") -> None:
    """Record ``pipeline``/``sink`` (and the table format) as the table's owner if it has none; refuse
    any other owner, and a switch of the table's format."""
    path = storage.join(home, "_owner.json")
    storage.create_exclusive(path, to_json({"pipeline": pipeline, "sink": sink, "format": table_format}))
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


class PartitionClaims:
    """``<home>/_claims/<partition>.json`` names the interval owning each partition; ``_shape.json`` the
    table's partition keys."""

    def __init__(self, storage: Storage, home: str) -> None:
        self.storage = storage
        self.root = storage.join(home, "_claims")
        self._shape: tuple[str, ...] | None = None

    def claim(self, txn: TxnRef, partitions: list[str]) -> None:
        """Claim ``partitions`` for ``txn``'s interval. Raises OwnershipError for a partition another
        interval owns, or for partition keys other than the table's."""
        if partitions:
            shape = tuple(seg.split("=", 1)[0] for seg in partitions[0].split("/"))
            if self._shape is None:
                path = self.storage.join(self.root, "_shape.json")
                self.storage.create_exclusive(path, to_json({"keys": list(shape)}))
                self._shape = tuple(self.storage.read_json(path)["keys"])
            if shape != self._shape:
                raise OwnershipError(f"{txn.name}: partitions keyed {'/'.join(shape)} in a table partitioned "
                                     f"by {'/'.join(self._shape)}; keep one partitioning per table")
        for part in partitions:
            path = self.storage.join(self.root, part + ".json")
            self.storage.create_exclusive(path, to_json({"interval": txn.interval.token}))
            owner = self.storage.read_json(path).get("interval")
            if owner != txn.interval.token:
                raise OwnershipError(
                    f"{txn.name}: partition {part} belongs to interval {owner}, not {txn.interval.token}; "
                    "two intervals may never publish one partition - declare partitions that each "
                    "interval owns alone (e.g. add hour=HH for hourly runs)")
