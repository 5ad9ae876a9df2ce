"""Rollback through the protocol: make an earlier committed version of an interval live again.

A rollback is an ordinary transaction of the interval - a new epoch that fences every older attempt -
whose staged output is a copy of the chosen version's files (and of its checkpoint: state, counts),
taken from the target's version store. It is pre-committed, carries the old version's verdict, and is
committed and published like any other version, so every guarantee of the protocol holds: readers see
the current version or the rolled-back one, never a mix; a crash anywhere is finished or cleaned up by
recovery. Later intervals of a stateful pipeline that read the replaced state are reported stale.

Only versions the target still keeps can be rolled back to: gc deletes superseded versions after the
grace period, and database / Redis targets keep no copies (their rows are replaced in place).
"""
from __future__ import annotations

import logging
from typing import Any

from .errors import TransactionStateError
from .ids import Interval
from .transaction import CommitResult, TwoPhaseCommitSink
from .txlog import State

log = logging.getLogger(__name__)


def parse_version(value: str | int) -> int:
    """An epoch from ``3``, ``"3"``, ``"e3"``, ``"e000003"`` or a full transaction name."""
    text = str(value).strip()
    text = text.rsplit(".e", 1)[1] if ".e" in text else text.lstrip("e")
    if not text.isdigit() or int(text) < 1:
        raise TransactionStateError(f"not a version: {value!r} (give e.g. e2, or the epoch number)")
    return int(text)


def find_interval(sink: TwoPhaseCommitSink, start: str) -> Interval:
    """The interval of the log that starts at ``start`` (ISO-8601)."""
    from .ids import utc

    at = utc(start)
    found = [iv for iv in sink.intervals() if iv.start == at]
    if len(found) != 1:
        raise TransactionStateError(f"no interval of {sink.storage.url(sink.table)} starts at {at.isoformat()}"
                                    + (f" ({len(found)} do)" if found else "; `eo history` lists them"))
    return found[0]


def rollback(sink: TwoPhaseCommitSink, interval: Interval, to_epoch: int) -> CommitResult:
    """Make epoch ``to_epoch``'s version of ``interval`` live again, as a new epoch. Returns the commit;
    ``extra["rollback_of"]`` names the version, ``extra["stale"]`` later intervals to re-run."""
    statuses = sink.status(interval)
    st = statuses.get(to_epoch)
    old = sink.ref(interval, to_epoch)
    if st is None or st.state is not State.COMMITTED:
        raise TransactionStateError(f"{old.name} is not a committed version of {interval}; `eo history` lists "
                                    "the versions")
    manifest = st.manifest
    if manifest is None:
        raise TransactionStateError(f"{old.name} was compacted by gc (its manifest is gone): it can no longer "
                                    "be rolled back to")
    stored = {p: sink.target.stored_files(p, old.name, [f.name for f in fs]) for p, fs in manifest.partitions.items()}
    gone = sorted(p for p, paths in stored.items() if paths is None)
    if gone:
        raise TransactionStateError(f"{old.name}'s files of {', '.join(gone)} are gone (gc deleted them after the "
                                    f"grace period, or the target keeps no copies): it cannot be rolled back to")
    checkpoint = sink.checkpoint_dir(old)
    extras = [f.name for f in manifest.extras if not f.name.startswith("_job")]
    if extras and not sink.storage.exists(checkpoint):
        raise TransactionStateError(f"{old.name}'s checkpoint (state, counts) was deleted by gc: rolling back its "
                                    "data alone would leave later intervals a state it did not commit")
    sources = (st.records.get("open") or {}).get("sources", [])
    txn = sink.begin(interval, sources=sources, meta={"rollback_of": old.name})
    try:
        for part, paths in stored.items():
            for name, src in (paths or {}).items():
                _copy(sink, src, sink.storage.join(sink.data_dir(txn), part, name))
        for name in extras:
            src = sink.storage.join(checkpoint, name)
            if sink.storage.exists(src):
                _copy(sink, src, sink.storage.join(sink.staging_dir(txn), name))
        sink.pre_commit(txn, extra={"counts": (st.records.get("pre_committed") or {}).get("counts", {}),
                                    "rollback_of": old.name})
        verdict = st.validation or {}
        sink.record_validation(txn, True, {**(verdict.get("summary") or {}), "rollback_of": old.name})
        result = sink.commit(txn)
    except BaseException:
        sink.abort(txn, reason=f"rollback to {old.name} failed")
        raise
    result.extra["rollback_of"] = old.name
    log.info("rolled %s back to %s as %s; stale: %s", interval, old.name, txn.name, result.extra.get("stale"))
    return result


def _copy(sink: TwoPhaseCommitSink, src: str, dst: str) -> None:
    storage = sink.storage
    storage.makedirs(dst.rsplit("/", 1)[0])
    with storage.open(src, "rb") as fin, storage.open(dst, "wb") as fout:
        for chunk in iter(lambda: fin.read(1 << 20), b""):
            fout.write(chunk)


def describe(result: CommitResult) -> dict[str, Any]:
    """What a rollback did, for the CLI and the Airflow task."""
    return {"version": result.txn.name, "rollback_of": result.extra.get("rollback_of"),
            "partitions": result.partitions, "rows": result.rows, "stale": result.extra.get("stale", [])}
