"""Helpers for the batched-backfill fault tests (tests/integration/test_batch_faults.py), no JVM.

* :func:`stage_batch_write` - a batch's write job without Spark: ``pv_counts.compute_batch``'s output
  contract, computed interval after interval by the independent oracle ``tests/reference_pv.py`` (a
  chained entry starts from the state computed for the entry before it), written the way
  ``BatchContext`` hands it out: stale counts removed first, every interval's data and quarantine, then
  ``failpoint("write.partial")`` (where the job has it), every state, and each interval's counts last.
* :func:`batch_task` - one "task" of a batch (``all`` = begin, the write, finish - what the Airflow host
  task runs; or ``begin`` / ``write`` / ``finish`` / ``abort`` alone), in this process or in a fresh child
  process forked from fault_helpers' preloaded forkserver, so that a ``crash`` failpoint really kills it.
"""
from __future__ import annotations

import json
from pathlib import Path
import os
import tempfile
import traceback
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import reference_pv as ref
from fault_helpers import Outcome, Setup, _context, join_child, report_child
from pv_standin import DATA_SCHEMA, STATE_SCHEMA, _parquet_bytes

from exactly_once.protocol.batch import BatchRun
from exactly_once.contracts import BatchSpec, JobSpec
from exactly_once.errors import StorageError
from exactly_once.failpoints import failpoint
from exactly_once.ids import Interval
from exactly_once.storage import storage_for, to_json


def _read_state(url: str, options: dict[str, Any]) -> dict[str, int]:
    store, path = storage_for(url, **options)
    out: dict[str, int] = {}
    for entry in store.walk_files(path):
        if entry.rel.endswith(".parquet") and not entry.rel.rsplit("/", 1)[-1].startswith(("_", ".")):
            with store.open(store.join(path, entry.rel), "rb") as f:
                out.update({r["app_id"]: r["cumulative_pv"] for r in pq.read_table(f).to_pylist()})
    return out


def _compute(spec: JobSpec, prev: dict[str, int], options: dict[str, Any], tmp: str) -> tuple:
    local, by_local = [], {}
    for i, item in enumerate(spec.source().inputs):
        store, key = storage_for(item.path, **options)
        if store.file_meta(key)["size"] != item.size:
            raise StorageError(f"source {item.path} changed since it was frozen")
        path = os.path.join(tmp, f"{spec.txn}-{i:05d}.jsonl")
        with open(path, "wb") as f:
            f.write(store.read_bytes(key))
        local.append(path)
        by_local[path] = item.path
    rows, state, counts = ref.compute(local, prev, spec.partitions[0])
    counts["input_bytes"] = sum(i.size for i in spec.source().inputs)
    bad = [dict(q, file=by_local[q["file"]]) for q in ref.quarantine(local)]
    return rows, state, counts, bad


def stage_batch_write(batch_url: str, options: dict[str, Any]) -> list[dict[str, Any]]:
    """The write of a batch of pv_pipeline intervals without Spark (module docstring); returns the counts."""
    store, key = storage_for(batch_url, **options)
    batch = BatchSpec.from_json(store.read_bytes(key))
    specs = []
    for entry in batch.entries:
        s, k = storage_for(entry.spec, **options)
        specs.append(JobSpec.from_json(s.read_bytes(k)))
    staging = [storage_for(spec.staging_dir, **options)[1] for spec in specs]
    for path in staging:
        store.remove_tree(store.join(path, "_counts.json"))
    results, state = [], {}
    with tempfile.TemporaryDirectory(prefix="eo-batch-write-") as tmp:
        for entry, spec in zip(batch.entries, specs):
            prev = state if entry.chained else (_read_state(entry.prev_state, options) if entry.prev_state else {})
            rows, state, counts, bad = _compute(spec, dict(prev), options, tmp)
            results.append((rows, dict(state), counts, bad))
    for path, spec, (rows, _, _, bad) in zip(staging, specs, results):
        store.remove_tree(store.join(path, "data"))
        store.write_atomic(store.join(path, "data", spec.partitions[0], "part-0.parquet"),
                           _parquet_bytes(pa.Table.from_pylist(rows, schema=DATA_SCHEMA)))
        store.remove_tree(store.join(path, "_quarantine"))
        if bad:
            lines = "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in bad)
            store.write_atomic(store.join(path, "_quarantine", "part-0.json"), lines.encode())
    failpoint("write.partial")
    for path, (_, new_state, _, _) in zip(staging, results):
        table = pa.Table.from_pylist([{"app_id": a, "cumulative_pv": n} for a, n in
                                      sorted(new_state.items(), key=lambda kv: kv[0].encode())], schema=STATE_SCHEMA)
        store.remove_tree(store.join(path, "_state"))
        store.write_atomic(store.join(path, "_state", "part-0.parquet"), _parquet_bytes(table))
    for path, (_, _, counts, _) in zip(staging, results):
        store.write_atomic(store.join(path, "_counts.json"), to_json(counts))
    return [r[2] for r in results]


def batch_of(setup: Setup, days: list[str], batch_id: str, **kw: Any) -> BatchRun:
    return BatchRun(setup.config(), [Interval.daily(d) for d in days], batch_id=batch_id,
                    storage_options=setup.options(), run={"run_id": f"batch__{batch_id}"}, **kw)


def run_batch_task(setup: Setup, days: list[str], batch_id: str, task: str, **kw: Any) -> Any:
    batch = batch_of(setup, days, batch_id, **kw)
    write = lambda url: stage_batch_write(url, setup.options())  # noqa: E731
    if task == "all":
        return [o.to_dict() for o in batch.run_all(write)]
    if task == "begin":
        return batch.begin()
    if task == "write":
        url = batch.storage.url(batch.storage.join(batch.dir, "_batch.json"))
        with batch.heartbeat():
            return write(url)
    if task == "finish":
        return [o.to_dict() for o in batch.finish()]
    if task == "abort":
        return batch.abort()
    raise ValueError(f"unknown batch task {task!r}")


def _child(setup: Setup, days: list[str], batch_id: str, task: str, failpoints: str | None,
           kw: dict[str, Any], out: str) -> None:
    report_child(setup, failpoints, out, lambda: run_batch_task(setup, days, batch_id, task, **kw))


def batch_task(setup: Setup, days: list[str], batch_id: str, task: str = "all", *, child: bool = True,
               failpoints: str | None = None, timeout: float = 300, **kw: Any) -> Outcome:
    """Run one batch task (module docstring); ``failpoints`` becomes its ``EO_FAILPOINTS``."""
    if not child:
        old = os.environ.pop("EO_FAILPOINTS", None)
        if failpoints:
            os.environ["EO_FAILPOINTS"] = failpoints
        try:
            return Outcome(task, True, run_batch_task(setup, days, batch_id, task, **kw))
        except Exception as exc:  # noqa: BLE001
            return Outcome(task, False, error=type(exc).__name__, message=traceback.format_exc())
        finally:
            os.environ.pop("EO_FAILPOINTS", None)
            if old is not None:
                os.environ["EO_FAILPOINTS"] = old
    fd, out = tempfile.mkstemp(prefix="eo-batch-", suffix=".json")
    os.close(fd)
    os.unlink(out)
    proc = _context().Process(target=_child, args=(setup, days, batch_id, task, failpoints, kw, out))
    proc.start()
    return join_child(proc, out, task, f"batch task {task}", timeout)


def pv_oracle(root: str, days: list[str]) -> dict[str, list]:
    """Interval by interval over the landing as it is now (tests/reference_pv.py): the rows each day must
    show, as ``(app_id, pv, uv, cumulative_pv)`` tuples."""
    state: dict[str, int] = {}
    out = {}
    for day in days:
        files = sorted(str(p) for p in (Path(root) / "landing" / "app_logs" / f"dt={day}").rglob("*.jsonl"))
        rows, state, _ = ref.compute(files, state, f"dt={day}")
        out[day] = sorted((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)
    return out


def first_event(trigger: Any, within: float) -> dict[str, Any] | None:
    """What ``trigger`` fires within ``within`` seconds when run as Airflow's triggerer runs it, or None."""
    import asyncio

    async def one() -> Any:
        async for event in trigger.run():
            return event.payload
    try:
        return asyncio.run(asyncio.wait_for(one(), within))
    except (asyncio.TimeoutError, TimeoutError):
        return None
