"""The Delta side of the protocol test helpers (tests/protocol_helpers.py): what differs when the table is a
Delta table (``table_format="delta"``). Only Delta readers see exact versions (there is no plain reader);
a version's files live in ``<table>/<txn>/``; and Delta has no empty partition - the interval's newest
version drops a partition it wrote nothing to, instead of publishing an empty version of it."""
from __future__ import annotations

from typing import Any

from exactly_once import Interval, State, TwoPhaseCommitSink, TxnRef
from exactly_once.ids import parse_txn_name


def is_delta(sink: TwoPhaseCommitSink) -> bool:
    """A Delta table (``table_format="delta"``): only Delta readers see exact versions; no plain reader."""
    return sink.table_format == "delta"


def uncommitted_version_dirs(sink: TwoPhaseCommitSink) -> list[str]:
    """``<table>/<txn>/`` of the transactions that did not commit (leftovers once the table is idle)."""
    found = []
    for name in sink.storage.list_names(sink.table):
        parsed = parse_txn_name(name)
        if parsed:
            state = sink.log.status(Interval.from_token(parsed[0]), parsed[1]).state
            if state is not State.COMMITTED:
                found.append(f"{name} ({state.value})")
    return found


def dropped_by(sink: TwoPhaseCommitSink, txn: TxnRef, expected: Any) -> bool:
    """``txn``, the interval's live Delta version, wrote nothing to a partition: it dropped it."""
    return not expected and sink.target.live_epoch(txn.interval) == txn.epoch


def is_version_file(path: str, txn: TxnRef, entry_name: str) -> bool:
    """``path`` is the manifest entry ``entry_name`` of ``txn`` in its Delta version dir."""
    return f"/{txn.name}/" in path and path.endswith(f"/{entry_name}")


def live_version_of_dropped(sink: TwoPhaseCommitSink, interval: Interval, part: str,
                            statuses: dict[int, Any]) -> str | None:
    """A partition with no live Delta version: the interval's live version's name when that version
    dropped the partition (wrote nothing to it), else None."""
    epoch = sink.target.live_epoch(interval)
    manifest = statuses[epoch].manifest if epoch in statuses else None
    dropped = epoch in statuses and part not in (manifest.partitions if manifest else {})
    return sink.ref(interval, epoch).name if dropped else None  # type: ignore[arg-type]
