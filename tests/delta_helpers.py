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


def table_rows_by_partition(sink: TwoPhaseCommitSink, columns: list[str], key: str) -> dict[str, list[tuple]]:
    """``{partition value: sorted rows}`` a Delta reader (delta-rs, the table's newest snapshot) sees,
    partitions with rows only."""
    import pyarrow as pa

    dt = sink.target.snapshot()
    if dt is None:
        return {}
    table = pa.table(dt.to_pyarrow_dataset().to_table(columns=[*columns, key]))
    out: dict[str, list[tuple]] = {}
    for row in zip(*(table.column(c).to_pylist() for c in [key, *columns])):
        out.setdefault(str(row[0]), []).append(tuple(row[1:]))
    return {k: sorted(v) for k, v in out.items()}


def live_partitions(sink: TwoPhaseCommitSink) -> list[str]:
    """The partitions (``key=value``) with live files in the newest snapshot."""
    found = set()
    for action in sink.target.live_actions(sink.target.snapshot()):
        found.add("/".join(f"{k[len('partition.'):]}={v}" for k, v in action.items() if k.startswith("partition.")))
    return sorted(found)


def version_dirs(sink: TwoPhaseCommitSink, partition: str) -> list[str]:
    """``<table>/<txn>/`` dirs holding files of ``partition`` (the physical copies: one per kept version)."""
    st = sink.storage
    return sorted(name for name in st.list_names(sink.table) if parse_txn_name(name) and any(
        ("/" + e.rel).rsplit("/", 1)[0].endswith("/" + partition) for e in st.walk_files(st.join(sink.table, name))))
