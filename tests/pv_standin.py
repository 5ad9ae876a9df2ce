"""The ``write`` task of ``pv_pipeline`` without Spark: :func:`stage_write`.

``spark_jobs/pv_counts.py``'s output contract, computed by the independent oracle ``tests/reference_pv.py``,
with ``failpoint("write.partial")`` at the same place as in the Spark job (after the data and the
quarantine, before ``_state`` and, last, ``_counts.json``). Works on a local table and on S3 (storage
options = the connection's). Kept apart from ``fault_helpers`` so that a process running only this (the
fleet's ``spark-submit`` stand-in, ``tools/s3_standin.py``, once per write) imports no more than it needs.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import reference_pv as ref
from exactly_once.contracts import JobSpec
from exactly_once.errors import StorageError
from exactly_once.failpoints import failpoint
from exactly_once.storage import LocalStorage, Storage, storage_for, to_json

DATA_SCHEMA = pa.schema([("app_id", pa.string()), ("pv", pa.int64()), ("uv", pa.int64()),
                         ("cumulative_pv", pa.int64())])
STATE_SCHEMA = pa.schema([("app_id", pa.string()), ("cumulative_pv", pa.int64())])


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _rm(store: Storage, path: str) -> None:
    fs = getattr(store, "fs", None)
    if fs is not None and fs.isfile(path):
        fs.rm(path)
    elif isinstance(store, LocalStorage) and os.path.isfile(path) and not os.path.islink(path):
        os.unlink(path)
    else:
        store.remove_tree(path)


def stage_write(spec_url: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """The ``write`` task of ``pv_pipeline`` without Spark (see the module docstring).

    Like the job: deletes a stale ``_counts.json`` first, refuses inputs that changed since they were
    frozen, reads exactly the frozen inputs and the previous checkpoint's ``_state``, writes only below
    the staging dir, and writes ``_counts.json`` last. Returns the counts.
    """
    store, spec_key = storage_for(spec_url, **storage_options)
    spec = JobSpec.from_json(store.read_bytes(spec_key))
    _, staging = storage_for(spec.staging_dir, **storage_options)
    partition = spec.partitions[0]
    counts_path = store.join(staging, "_counts.json")
    if store.exists(counts_path):
        _rm(store, counts_path)
    with tempfile.TemporaryDirectory(prefix="eo-fault-write-") as tmp:
        local_files, by_local = [], {}
        for i, item in enumerate(spec.source().inputs):
            in_store, key = storage_for(item.path, **storage_options)
            meta = in_store.file_meta(key)
            if meta["size"] != item.size or (item.etag and meta.get("etag") and meta["etag"] != item.etag):
                raise StorageError(f"source {item.path} changed since it was frozen; replay is impossible")
            local = os.path.join(tmp, f"{i:05d}.jsonl")
            with open(local, "wb") as f:
                f.write(in_store.read_bytes(key))
            local_files.append(local)
            by_local[local] = item.path
        prev: dict[str, int] = {}
        if spec.prev_state:
            state_store, state_dir = storage_for(spec.prev_state, **storage_options)
            for entry in state_store.walk_files(state_dir):
                if entry.rel.endswith(".parquet") and not entry.rel.startswith(("_", ".")):
                    with state_store.open(state_store.join(state_dir, entry.rel), "rb") as f:
                        prev.update({r["app_id"]: r["cumulative_pv"] for r in pq.read_table(f).to_pylist()})
        rows, new_state, counts = ref.compute(local_files, prev, partition)
        counts["input_bytes"] = sum(i.size for i in spec.source().inputs)
        bad = [dict(q, file=by_local[q["file"]]) for q in ref.quarantine(local_files)]

    store.write_atomic(store.join(staging, "data", partition, "part-0.parquet"),
                       _parquet_bytes(pa.Table.from_pylist(rows, schema=DATA_SCHEMA)))
    quarantine = store.join(staging, "_quarantine")
    if bad:
        lines = "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in bad)
        store.write_atomic(store.join(quarantine, "part-0.json"), lines.encode())
    elif store.exists(quarantine):
        store.remove_tree(quarantine)
    failpoint("write.partial")  # where the Spark job has it: data written, state and counts not yet
    state = pa.Table.from_pylist([{"app_id": a, "cumulative_pv": n}
                                  for a, n in sorted(new_state.items(), key=lambda kv: kv[0].encode())],
                                 schema=STATE_SCHEMA)
    store.write_atomic(store.join(staging, "_state", "part-0.parquet"), _parquet_bytes(state))
    store.write_atomic(counts_path, to_json(counts))
    return counts
