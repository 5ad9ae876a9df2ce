"""Rollback through the protocol: make an earlier committed version of an interval live again.

A rollback is an ordinary transaction of the interval - a new epoch that fences every older attempt -
whose staged output is a copy of the chosen version's files (and of its checkpoint: state, counts),
taken from the target's version store. It is pre-committed, carries the old version's verdict, and is
committed and published like any other version, so every guarantee of the protocol holds: readers see
the current version or the rolled-back one, never a mix; a crash anywhere is finished or cleaned up by
recovery. Later intervals of a stateful pipeline that read the replaced state are reported stale.

Only versions the target still keeps can be rolled back to: gc deletes superseded versions (data and
checkpoint) after the grace period. Files and Delta targets keep each version's files themselves;
database and Redis targets replace rows in place, so the protocol keeps each version's sealed staged
files (its write-ahead log) in its checkpoint (:func:`~exactly_once.protocol.staging.kept_copies`). Beside gc, a rollback never publishes a version without its state: it copies the version's
files and checkpoint into its own staging (which gc never touches while the rollback is alive) and
checks each copy against the old manifest (size, sha256) before it pre-commits; a piece gc deleted
meanwhile makes it refuse (TransactionStateError, nothing published) instead of skipping it.

A stateful pipeline's version is rolled back *with its lineage*: the new epoch reads (``reads``) the
predecessor state the old version was computed on, so ordering and staleness treat it like any version
computed on that state. Such a version only goes live while that state is live: if the predecessor
interval's live version has another state now, the rollback is refused (InputChangedError, nothing
begun) - roll the predecessor back first, or re-run the interval instead.

A rollback asked by a ``request`` (an idempotency key, e.g. an Airflow DAG run) is done once: a retry or a
re-execution of that request finds its committed epoch and returns it instead of rolling back again.
"""
from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from ..errors import ExactlyOnceError, InputChangedError, TransactionStateError
from ..ids import Interval, TxnRef, parse_txn_name
from ..records.manifest import ManifestFile
from ..protocol.ordering import same_state, state_fingerprint
from ..protocol.staging import kept_copies
from ..protocol.transaction import CommitResult, TwoPhaseCommitSink
from ..records.txlog import EpochStatus, State

log = logging.getLogger(__name__)


def parse_version(value: str | int, interval: Interval | None = None) -> int:
    """An epoch from ``3``, ``"3"``, ``"e3"``, ``"e000003"`` or a full transaction name - which must be a
    version of ``interval`` when given (a version of another interval is refused, never read as this
    interval's epoch of the same number)."""
    text = str(value).strip()
    if ".e" in text or "_" in text:  # a transaction name: <interval token>.e<epoch>
        parsed = parse_txn_name(text)
        if parsed is None:
            raise TransactionStateError(f"not a version: {value!r} (give e.g. e2, the epoch number, or the "
                                        "full name `eo history` shows)")
        if interval is not None and parsed[0] != interval.token:
            raise TransactionStateError(f"{text} is a version of interval {parsed[0]}, not of {interval.token}: "
                                        "a rollback stays within its interval; `eo history` lists each "
                                        "interval's versions")
        return parsed[1]
    text = text.lstrip("e")
    if not re.fullmatch(r"[0-9]{1,18}", text) or int(text) < 1:  # ASCII digits only: "²".isdigit() is True
        raise TransactionStateError(f"not a version: {value!r} (give e.g. e2, or the epoch number)")
    return int(text)


def find_interval(sink: TwoPhaseCommitSink, start: str) -> Interval:
    """The interval of the log that starts at ``start`` (ISO-8601)."""
    from ..ids import utc

    at = utc(start)
    found = [iv for iv in sink.intervals() if iv.start == at]
    if len(found) != 1:
        raise TransactionStateError(f"no interval of {sink.storage.url(sink.table)} starts at {at.isoformat()}"
                                    + (f" ({len(found)} do)" if found else "; `eo history` lists them"))
    return found[0]


def rollback(sink: TwoPhaseCommitSink, interval: Interval, to_epoch: int,
             meta: dict[str, Any] | None = None, *, request: str | None = None) -> CommitResult:
    """Make epoch ``to_epoch``'s version of ``interval`` live again, as a new epoch. Returns the commit;
    ``extra["rollback_of"]`` names the version, ``extra["stale"]`` later intervals to re-run. ``meta``
    (e.g. ``{"run": {...}}``: who asked, through which run) is recorded in the new epoch's begin. A decided
    commit of the interval is finished first, through the sink's target (even when the rollback is then
    refused).

    ``request``: what asked for it (an Airflow run: ``"<dag_id>/<run_id>"``); recorded with the new epoch,
    it makes the rollback happen once per request. An epoch of the same request that committed is
    returned as it is (``extra["already"]`` True: nothing rolled back again, whatever committed since
    stays); one that did not commit was ended by recovery (a validated one is committed by it, the rest
    aborted) and the rollback is done afresh - unless a version of the interval committed after that
    attempt began: then it is refused (TransactionStateError), never rolled back over unseen."""
    sink.recover(interval)
    statuses = sink.status(interval)
    if request is not None:
        done = _done_for(sink, interval, statuses, request)
        if done is not None:
            return done
    old, st, stored, checkpoint, extras, reads = _checked(sink, interval, to_epoch, statuses)
    manifest = st.manifest  # never None here: _checked refuses a version without one
    sources = (st.records.get("open") or {}).get("sources", [])
    asked = {**(meta or {}), "rollback_of": old.name, **({"request": request} if request else {})}
    txn = sink.begin(interval, sources=sources, meta=asked, reads=reads)
    try:
        # gc may delete the old version meanwhile: every piece is copied and checked against the old
        # manifest BEFORE pre_commit (from then on a recovery may commit the copy), never skipped
        todo = [(sink.storage.join(sink.data_dir(txn), part, f.name), (stored[part] or {})[f.name], f)
                for part, files in manifest.partitions.items() for f in files]
        todo += [(sink.storage.join(sink.staging_dir(txn), f.name), sink.storage.join(checkpoint, f.name), f)
                 for f in extras]
        for dst, src, entry in todo:
            _checked_copy(sink, src, dst, entry, old)
        # the old version's own facts (counts, its state's fingerprint: a successor computed on it is
        # not stale once it is live again), minus what pre_commit records itself
        facts = {k: v for k, v in (st.records.get("pre_committed") or {}).items() if k not in ("manifest", "gated")}
        sink.pre_commit(txn, extra={"counts": {}, **facts, "rollback_of": old.name})
        verdict = st.validation or {}
        sink.record_validation(txn, True, {**(verdict.get("summary") or {}), "rollback_of": old.name})
        result = sink.commit(txn)
    except BaseException:
        sink.abort(txn, reason=f"rollback to {old.name} failed")
        raise
    result.extra["rollback_of"] = old.name
    log.info("rolled %s back to %s as %s; stale: %s", interval, old.name, txn.name, result.extra.get("stale"))
    return result


def rollback_refusal(sink: TwoPhaseCommitSink, interval: Interval, to_epoch: int) -> str | None:
    """Why :func:`rollback` to ``to_epoch`` would be refused now (the same checks, read-only: nothing is
    recovered, begun or copied), or None if it would go ahead - e.g. for a page that offers rollbacks."""
    try:
        _checked(sink, interval, to_epoch, sink.status(interval))
    except ExactlyOnceError as exc:
        return str(exc)
    return None


def _checked(sink: TwoPhaseCommitSink, interval: Interval, to_epoch: int, statuses: dict[int, EpochStatus]
             ) -> tuple[TxnRef, EpochStatus, dict[str, Any], str, list[ManifestFile], TxnRef | None]:
    """The checks before a rollback to ``to_epoch`` (refusals raise): the old version, its status, where
    its files are kept by partition, its checkpoint dir, its extras (state files) and the predecessor
    version it reads."""
    st = statuses.get(to_epoch)
    old = sink.ref(interval, to_epoch)
    if st is None or st.state is not State.COMMITTED:
        raise TransactionStateError(f"{old.name} is not a committed version of {interval}; `eo history` lists "
                                    "the versions")
    manifest = st.manifest
    if manifest is None:
        raise TransactionStateError(f"gc removed {old.name} after the grace period (its manifest is gone, "
                                    "compacted): it can no longer be rolled back to; `eo history` lists the "
                                    "versions that still can")
    stored, missing = {}, {}
    for part, files in manifest.partitions.items():
        stored[part], missing[part] = _stored(sink, old, part, [f.name for f in files])
    checkpoint = sink.checkpoint_dir(old)
    gone = sorted(p for p, paths in stored.items() if paths is None)
    if gone:
        raise TransactionStateError(_gone(sink, old, gone, checkpoint, missing))
    extras = [f for f in manifest.extras if not f.name.startswith("_job")]
    if extras and not sink.storage.exists(checkpoint):
        raise TransactionStateError(f"{old.name}'s checkpoint (state, counts) was deleted by gc: rolling back its "
                                    "data alone would leave later intervals a state it did not commit")
    reads = _reads(sink, old, st)
    return old, st, stored, checkpoint, extras, reads


def _done_for(sink: TwoPhaseCommitSink, interval: Interval, statuses: dict[int, EpochStatus],
              request: str) -> CommitResult | None:
    """The committed rollback of ``request`` (its publish finished), or None if it has none; refuses a
    request whose earlier attempt did not commit when another version of the interval committed since."""
    mine = [e for e, s in statuses.items() if s.request == request]
    committed = [e for e in mine if statuses[e].state is State.COMMITTED]
    if committed:
        epoch = committed[-1]
        result = sink.commit(sink.ref(interval, epoch))  # committed: finishes its publish, decides nothing
        rec = statuses[epoch].records
        result.extra.update(already=True, stale=(rec.get("outcome") or {}).get("stale", []),
                            rollback_of=((rec.get("open") or {}).get("meta") or {}).get("rollback_of"))
        live = sink.committed(interval)
        log.info("%s rolled %s back already as %s (live now: %s): nothing done again", request, interval,
                 result.txn.name, live[0].name if live else None)
        return result
    since = [sink.ref(interval, e).name for e, s in statuses.items()
             if mine and e > mine[0] and s.state is State.COMMITTED]
    if since:
        raise TransactionStateError(
            f"{request} tried this rollback before ({sink.ref(interval, mine[0]).name}, not committed) and "
            f"{', '.join(since)} committed since: not rolling back over a version nobody saw when asking - "
            "look at the interval's history (`eo history`) and ask for the rollback again if still wanted")
    return None


def _reads(sink: TwoPhaseCommitSink, old: TxnRef, st: EpochStatus) -> TxnRef | None:
    """The predecessor version the rollback of ``old`` reads: the one ``old`` was computed on, or the
    predecessor's live version when that has the same state (e.g. a rollback of the predecessor to it).
    InputChangedError when the predecessor's live state is another one."""
    reads = st.reads
    if reads is None:
        return None
    found = sink.committed(reads.interval)
    live, live_st = found if found else (reads, None)
    if live.epoch == reads.epoch:
        return reads
    if live_st is not None and same_state(state_fingerprint(sink.status(reads.interval).get(reads.epoch)),
                                          state_fingerprint(live_st)):
        return live
    raise InputChangedError(
        f"rollback to {old.name} refused: it was computed on {reads.name}'s state, but {live.name} (another "
        f"state) is that interval's live version now - made live again, {old.name} would stand on replaced "
        f"state. Roll the interval {reads.interval} back to e{reads.epoch} first (if it still can be), then "
        "this one; or re-run (reprocess) this interval on the live state instead. Nothing was changed")


def _stored(sink: TwoPhaseCommitSink, old: TxnRef, partition: str,
            names: list[str]) -> tuple[dict[str, str] | None, list[str]]:
    """Where ``old``'s files of ``partition`` are kept: by the target (files, Delta) or, for a target that
    replaces rows in place (database, Redis), in ``old``'s checkpoint; None if gone. Second: the kept
    files that are missing from a checkpoint that has the others."""
    paths = sink.target.stored_files(partition, old.name, names)
    if paths is not None:
        return paths, []
    kept = kept_copies(sink, old, partition, names)
    if kept is None:
        return None, []
    return (None if kept[1] else kept[0]), kept[1]


def _gone(sink: TwoPhaseCommitSink, old: TxnRef, parts: list[str], checkpoint: str,
          missing: dict[str, list[str]]) -> str:
    """Why ``old``'s files of ``parts`` are gone, for the refusal."""
    what = f"{old.name}'s files of {', '.join(parts)}"
    if not sink.target.keeps_staged_copies:
        return f"{what} are gone (gc deleted them after the grace period): it cannot be rolled back to"
    if not sink.storage.exists(checkpoint):
        return (f"gc removed version {old.name} after the grace period (its staged rows, kept in its checkpoint "
                f"for rollback, went with it): it cannot be rolled back to; `eo history` lists the versions "
                "that still can")
    lost = sorted(f for p in parts for f in missing.get(p, []))
    if lost:
        return (f"rollback to {old.name} refused: {len(lost)} of its kept staged files are missing from its "
                f"checkpoint {sink.storage.url(checkpoint)}: {', '.join(lost)} (gc removes a whole checkpoint, "
                "never single files: they were deleted or lost outside the protocol). Restore them from a "
                "backup, or roll back to another version (`eo history` lists them); nothing was changed")
    return (f"{what} were not kept ({old.name} was published before {sink.target.describe()} kept staged rows "
            "for rollback): it cannot be rolled back to")


def _checked_copy(sink: TwoPhaseCommitSink, src: str, dst: str, entry: ManifestFile, old: TxnRef) -> None:
    """Copy one file of ``old``'s version and check the copy against its manifest ``entry`` (size, and
    sha256 where recorded): the copy is what will be published, so checking it - not the source - makes
    the rollback immune to whatever gc does to the source afterwards. TransactionStateError if the
    source is gone or the copy differs (gc deleted it mid-read)."""
    try:
        size, sha = _copy(sink, src, dst)
    except FileNotFoundError as exc:
        raise _refusal(old, f"{entry.name} was deleted while the rollback copied it") from exc
    if size != entry.size or (entry.sha256 and sha != entry.sha256):
        raise _refusal(old, f"{entry.name} changed while the rollback copied it ({size} bytes, sealed {entry.size})")


def _refusal(old: TxnRef, what: str) -> TransactionStateError:
    return TransactionStateError(
        f"rollback to {old.name} refused: its {what} (gc removes a version's files and checkpoint once it has "
        "been superseded for the grace period); nothing was published - `eo history` lists the versions that "
        "can still be rolled back to")


def _copy(sink: TwoPhaseCommitSink, src: str, dst: str) -> tuple[int, str]:
    """Copy ``src`` to ``dst``; returns the bytes copied and their sha256."""
    storage, digest, size = sink.storage, hashlib.sha256(), 0
    storage.makedirs(dst.rsplit("/", 1)[0])
    with storage.open(src, "rb") as fin, storage.open(dst, "wb") as fout:
        for chunk in iter(lambda: fin.read(1 << 20), b""):
            fout.write(chunk)
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def describe(result: CommitResult, sink: TwoPhaseCommitSink | None = None) -> dict[str, Any]:
    """What a rollback did, for the CLI and the Airflow task (``already``: its request had done it before).
    ``stale``: with ``sink``, the table's stale intervals now - what its page lists
    (:func:`~exactly_once.ops.inspection.stale_intervals`) -, else the successors the commit fenced."""
    from .inspection import stale_intervals

    stale = stale_intervals(sink) if sink is not None else result.extra.get("stale", [])
    out = {"version": result.txn.name, "rollback_of": result.extra.get("rollback_of"),
           "partitions": result.partitions, "rows": result.rows, "stale": stale}
    return {**out, "already": True} if result.extra.get("already") else out
