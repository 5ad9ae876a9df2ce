"""What a reader sees of a protocol test's table (tests/protocol_helpers.py re-exports all of it).

* :func:`visible_rows`: on the local filesystem through ``pyarrow.dataset`` with hive partitioning
  (which follows the partition symlink and skips ``_``/``.`` names) AND through the exact reader
  ``sink.live_files``; on S3 (and for Delta tables) through ``sink.live_files``;
* :func:`assert_exact_version`: the visible files are byte-for-byte (sha256) the files a pre-committed
  manifest lists, and the rows are exactly the expected row set.

Imported by protocol_helpers' child processes too: nothing here may import pandas at module level.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterable, Sequence

import pyarrow.parquet as pq

from exactly_once import Interval, Manifest, TwoPhaseCommitSink, TxnRef
from exactly_once.storage import LocalStorage

import delta_helpers as delta
from delta_helpers import is_delta

Row = tuple[int, str]


def is_local(sink: TwoPhaseCommitSink) -> bool:
    return isinstance(sink.storage, LocalStorage)


def refresh(sink: TwoPhaseCommitSink) -> None:
    """Forget s3fs's listing cache: other processes changed the bucket."""
    fs = getattr(sink.storage, "fs", None)
    if fs is not None:
        fs.invalidate_cache()


def _read_rows(sink: TwoPhaseCommitSink, paths: Sequence[str]) -> list[Row]:
    rows: list[Row] = []
    for p in paths:
        with sink.storage.open(p, "rb") as f:
            t = pq.read_table(f, columns=["k", "v"])
        rows.extend(zip(t.column("k").to_pylist(), t.column("v").to_pylist()))
    return sorted(rows, key=null_first)


def null_first(row: Row) -> Any:
    """Sort key of a row: the natural order, a NULL ``k`` first (rows a target refused may hold one)."""
    return (row[0] is not None, row)


def plain_reader_rows(table: str) -> dict[str, list[Row]]:
    """What ``pyarrow.dataset.dataset(table, partitioning="hive")`` reads, per partition path."""
    import pyarrow.dataset as ds  # imported lazily: it pulls in pandas (1 s per child process)

    if not os.path.isdir(table):
        return {}
    dset = ds.dataset(table, format="parquet", partitioning="hive")
    out: dict[str, list[Row]] = {}
    for frag in dset.get_fragments():
        part = os.path.relpath(os.path.dirname(frag.path), table)
        t = frag.to_table(columns=["k", "v"])
        out.setdefault(part, []).extend(zip(t.column("k").to_pylist(), t.column("v").to_pylist()))
    return {p: sorted(r, key=null_first) for p, r in out.items()}


def exact_reader_rows(sink: TwoPhaseCommitSink, partition: str) -> list[Row]:
    """What the manifest-based exact reader (``sink.live_files``) reads."""
    refresh(sink)
    return _read_rows(sink, sink.live_files(partition))


def visible_rows(sink: TwoPhaseCommitSink, partition: str) -> list[Row]:
    """The sorted rows a reader sees in ``partition``. Locally the plain pyarrow reader and the exact
    reader must agree (asserted); on S3 the exact reader is the contract."""
    exact = exact_reader_rows(sink, partition)
    if is_local(sink) and not is_delta(sink):
        plain = plain_reader_rows(sink.table).get(partition, [])
        assert plain == exact, f"plain reader {plain} != exact reader {exact} in {partition}"
    return exact


def rows_checksum(rows: Iterable[Row]) -> str:
    return hashlib.sha256(json.dumps(sorted(rows)).encode()).hexdigest()


def sha256_of(sink: TwoPhaseCommitSink, path: str) -> str:
    with sink.storage.open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def manifest_of(sink: TwoPhaseCommitSink, interval: Interval, epoch: int) -> Manifest:
    rec = sink.log.read(interval, epoch, "pre_committed")
    assert rec is not None, f"epoch {epoch} of {interval} was never pre-committed"
    return Manifest.from_dict(rec["manifest"])


def assert_exact_version(sink: TwoPhaseCommitSink, partition: str, expected: Sequence[Row],
                         txn: TxnRef | None = None) -> None:
    """The reader sees exactly ``expected`` (row set and checksum) in ``partition``; with ``txn``, the live
    version is ``txn`` and its live files are byte-identical to the ones its manifest lists."""
    seen = visible_rows(sink, partition)
    assert seen == sorted(expected), f"{partition}: reader sees {seen}, expected {sorted(expected)}"
    assert rows_checksum(seen) == rows_checksum(expected)
    live = sink.live_version(partition)
    if not expected and txn is None:
        assert live is None, f"{partition}: expected nothing live, found {live}"
        return
    if txn is None:
        return
    if live is None and is_delta(sink) and delta.dropped_by(sink, txn, expected):
        return  # Delta has no empty partition: txn, the interval's live version, dropped it
    assert live == txn.name, f"{partition}: live version {live}, expected {txn.name}"
    files = manifest_of(sink, txn.interval, txn.epoch).partitions.get(partition, ())
    live_paths = sink.live_files(partition)
    assert len(live_paths) == len(files)
    for path, entry in zip(live_paths, files):
        assert path.endswith(f"{txn.name}--{entry.name}") or (is_delta(sink) and delta.is_version_file(
            path, txn, entry.name)), (path, entry)
        assert sha256_of(sink, path) == entry.sha256, f"{path} differs from its manifest entry"
    assert sum(f.rows for f in files) == len(expected)
