"""How a transaction is decided, for :mod:`.transaction`: the checks before the decision (its staged
files, the gate's verdict) and the decision itself, the exclusive create of its ``outcome`` record.

* :func:`staged_refusal` - seal the staged files, verify them against the manifest and let the target
  refuse them: the abort's cause and reason, or None.
* :func:`published_version` - the version a publish writes, as the target's check and publish both see it.
* :func:`gated`, :func:`validation_ok`, :func:`check_validated` - may the gate's verdict let it commit?
  :func:`claim_verdict` - recovery's passing verdict for an ungated transaction that has none.
* :func:`decide` - the outcome record (the linearization point): the first decision recorded wins.
* :func:`raise_aborted` - a decided abort as the error its recorded cause stands for.
* :func:`known_status` - a transaction's status, refused for one the log does not know.

The helpers read and write the log through the sink's :class:`~exactly_once.protocol.sinkview.SinkView`
and :class:`~exactly_once.records.txlog.TxLog`; they never import the protocol module that calls them.
"""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Mapping, NoReturn, Sequence

from ..errors import ABORT_CAUSES, FencedError, StagedFileChangedError, TargetSchemaError, TransactionStateError
from ..ids import TxnRef
from ..records import manifest as manifests
from ..records.manifest import Manifest
from ..records.txlog import EpochStatus, State, TxLog
from ..targets.base import StagedVersion

if TYPE_CHECKING:
    from .sinkview import SinkView


def staged_refusal(sink: "SinkView", txn: TxnRef, manifest: Manifest) -> tuple[str, str] | None:
    """Seal and verify the staged files of ``txn`` (what commits is what pre_commit sealed and the gate
    read: sha256 of every byte locally, sizes and ETags of one LIST per 1,000 files on S3), then let the
    target refuse them. Returns the abort's ``(cause, reason)``, or None if they may be committed."""
    changed = "staged output changed after pre_commit: "
    if problem := manifests.seal(sink.storage, sink.data_dir(txn), sink.sealed_dir(txn), manifest,
                                 content=sink.storage.can_rename):
        return "staged_changed", f"{changed}{problem} (a second writer?)"
    try:  # the target refuses here whatever its publish would refuse (schema, types, keys), not after
        sink.target.check(txn, published_version(sink, txn, manifest))
    except TargetSchemaError as exc:
        return "target_refused", str(exc)
    except FileNotFoundError as exc:  # unverified files gone: only a decided abort removes them
        return "staged_changed", f"{changed}{exc.filename or exc} vanished (a concurrent abort or gc?)"
    except StagedFileChangedError as exc:  # the same, as the target's own read of a staged file says it
        return "staged_changed", f"{changed}{exc.path} {exc.what} (a concurrent abort or gc?)"
    return None


def published_version(sink: "SinkView", txn: TxnRef, manifest: Manifest,
                      statuses: Mapping[int, EpochStatus] | None = None) -> StagedVersion:
    """The version a publish of ``txn`` writes, as its target sees it - the check before the decision and the
    publish after it alike: the manifest's partitions and, empty (``dropped``), each partition an earlier
    COMMITTED epoch of the interval published that this one no longer produces."""
    parts = dict(manifest.partitions)
    if statuses is None:  # a first epoch has no earlier version: no log read (a batch checks a year of them)
        statuses = sink.log.statuses(txn.interval) if txn.epoch > 1 else {}
    for epoch, other in statuses.items():
        if epoch < txn.epoch and other.state is State.COMMITTED:
            for part in other.published_partitions:
                parts.setdefault(part, ())  # no longer produced: publish an empty version of it
    return StagedVersion.on(sink.storage, sink.sealed_dir(txn), parts, partial(sink.log.newest_committed, txn.interval),
                            partial(sink.log.committed_files, txn.interval),
                            frozenset(parts) - frozenset(manifest.partitions))


def gated(st: EpochStatus, required: bool) -> bool:
    """No commit without a passing verdict: the sink ``required`` it, or pre_commit recorded ``gated``."""
    return required or bool((st.records.get("pre_committed") or {}).get("gated"))


def validation_ok(st: EpochStatus, required: bool) -> bool:
    """May ``st`` commit as far as the gate goes? A failing verdict blocks, gated or not."""
    passed = (st.validation or {}).get("passed")
    return passed is True or (passed is not False and not gated(st, required))


def check_validated(txn: TxnRef, st: EpochStatus, required: bool) -> None:
    """TransactionStateError unless :func:`validation_ok`."""
    if not validation_ok(st, required):
        verdict = "failed" if st.validation else "has not run"
        raise TransactionStateError(f"{txn.name}: commit refused, validation {verdict}")


def claim_verdict(log: TxLog, txn: TxnRef) -> EpochStatus:
    """Record a passing verdict on ``txn`` (ungated, none recorded) before recovery commits it, so that a
    validation still running can no longer record a failure on it; returns the status then (the first
    verdict recorded wins: it may be that validation's)."""
    log.append(txn.interval, txn.epoch, "validated",
               {"passed": True, "summary": {"note": "committed by recovery without a verdict"}})
    return log.status(txn.interval, txn.epoch)


def decide(log: TxLog, txn: TxnRef, state: State, cause: str = "", reason: str = "",
           stale: Sequence[str] = (), request: str | None = None) -> State:
    """Create the outcome record (the linearization point) unless it exists; return the decision.
    An abort records its ``cause`` and ``reason``; a commit the successors it made ``stale`` and the
    begin's ``meta["request"]`` (which outlives gc's compaction there: ``EpochStatus.request``)."""
    payload = {"state": state.value, **({"cause": cause, "reason": reason} if state is State.ABORTED
                                        else {"stale": list(stale), **({"request": request} if request else {})})}
    log.append(txn.interval, txn.epoch, "outcome", payload)
    rec = log.read(txn.interval, txn.epoch, "outcome")
    return State(rec["state"]) if rec else state


def raise_aborted(log: TxLog, txn: TxnRef) -> NoReturn:
    """Raise what the recorded abort of ``txn`` stands for (its cause's error; FencedError by default)."""
    rec = log.read(txn.interval, txn.epoch, "outcome") or {}
    reason, cause = rec.get("reason") or "aborted", rec.get("cause")
    if cause in ABORT_CAUSES:
        raise ABORT_CAUSES[cause](f"{txn.name} aborted: {reason}; re-run the interval (fixed, if need be)")
    raise FencedError(f"{txn.name} was not committed: {reason}")


def known_status(log: TxLog, pipeline: str, sink: str, txn: TxnRef) -> EpochStatus:
    """``txn``'s status in the ``log`` of ``pipeline``'s ``sink``; TransactionStateError for another
    sink's or an unknown transaction."""
    if (txn.pipeline, txn.sink) != (pipeline, sink):
        raise TransactionStateError(f"{txn.name} belongs to {txn.pipeline}/{txn.sink}, not this sink")
    st = log.status(txn.interval, txn.epoch)
    if not st.records or ("open" not in st.records and "outcome" not in st.records):
        raise TransactionStateError(f"{txn.name}: no such transaction in the log (epochs are "
                                    "allocated by begin)")
    return st
