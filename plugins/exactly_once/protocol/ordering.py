"""Stateful ordering: no interval commits on a predecessor state that was replaced (PROTOCOL.md).

Interval n+1 of a stateful pipeline records the version of n whose state it read (``reads``). Before
deciding COMMITTED, every transaction writes its ``intent`` record and then

* as a dependent, checks its predecessor with :func:`newer_than` (a newer version there that is
  committed, or announced by an intent and not aborted, aborts it);
* as a predecessor, fences its successors with :func:`fence_successors` (an undecided successor with an
  intent that read an older version is decided ABORTED; one that had already committed is now stale).

Each side writes its intent before it reads the other's, so at least one of them sees the other
(Dekker's handshake, on exclusive-create records).

A transaction chained in a batch reads a predecessor that was not committed when it began
(:func:`read_problem`): it commits only once that predecessor committed, and never if it aborted.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import PredecessorPendingError, TransactionStateError
from ..ids import Interval, TxnRef, parse_txn_name
from ..records.txlog import State

if TYPE_CHECKING:
    from .sinkview import SinkView
    from ..records.txlog import EpochStatus


def state_fingerprint(st: "EpochStatus | None") -> str | None:
    """The fingerprint of the state a version committed (its pre_commit's ``state_fingerprint``: sha256 of
    the keyed state's rows); None if unknown (no state, or its records were compacted by gc)."""
    return (st.records.get("pre_committed") or {}).get("state_fingerprint") if st else None


def same_state(a: Any, b: Any) -> bool:
    """Whether two state fingerprints are known and equal (two versions committed the same state)."""
    return a is not None and a == b


def stale_from(sink: Any, interval: Interval) -> list[str]:
    """Later committed intervals (tokens, in order) whose input state differs from what ``interval``'s
    live version committed: interval n+1 is stale when the state it read (the version of n it ran after)
    is not the state of n's live version; everything after a stale interval is stale too. A re-run or a
    rollback that reproduces the same state makes nothing stale. From the log alone (a stateless table's
    versions read nothing: it has no stale interval), so the table page, ``eo rollback`` and the task
    that reprocesses say the same."""
    stale: list[str] = []
    current, iv = sink.committed(interval), interval
    every = sink.log.intervals()
    while current is not None:
        nxt = [i for i in every if i.start == iv.end]
        found = sink.committed(nxt[0]) if len(nxt) == 1 else None
        if not found:
            break
        used = found[1].reads
        if stale or (used is not None and used.name not in _copies_of(sink, current)
                     and not same_state(_state_of(sink, used.name), state_fingerprint(current[1]))):
            stale.append(nxt[0].token)
        current, iv = found, nxt[0]
    return stale


def _copies_of(sink: Any, version: tuple[TxnRef, "EpochStatus"]) -> set[str]:
    """``version``'s name and those of the versions it is a rollback of (a rollback republishes that
    version's files and state: a successor that read it read this state)."""
    names, (txn, st) = {version[0].name}, version
    for _ in range(64):  # a chain of rollbacks, each of the one before
        rolled = (st.records.get("pre_committed") or {}).get("rollback_of")
        parsed = parse_txn_name(rolled or "")
        if not parsed or rolled in names:
            break
        names.add(rolled)
        st = sink.status(Interval.from_token(parsed[0])).get(parsed[1])
        if st is None:
            break
    return names


def _state_of(sink: Any, txn_name: str | None) -> str | None:
    parsed = parse_txn_name(txn_name or "")
    st = sink.status(Interval.from_token(parsed[0])).get(parsed[1]) if parsed else None
    return state_fingerprint(st)


def newer_than(sink: "SinkView", reads: TxnRef) -> str | None:
    """A version of ``reads``' interval newer than ``reads`` that is committed or committing."""
    for epoch, st in sink.log.statuses(reads.interval).items():
        if epoch > reads.epoch and (st.state is State.COMMITTED or
                                    ("intent" in st.records and st.state is not State.ABORTED)):
            return sink.ref(reads.interval, epoch).name
    return None


def check_reads(sink: "SinkView", reads: TxnRef | None, *, pending: bool) -> None:
    """Nothing to check without ``reads``. Refuse (TransactionStateError) to begin on ``reads`` unless it is a committed version of this sink, or
    with ``pending`` (a batch chaining its intervals' state) a live attempt of it (OPEN or PRE_COMMITTED)."""
    if reads is None:
        return
    state = sink.log.status(reads.interval, reads.epoch).state if (reads.pipeline, reads.sink) == (
        sink.pipeline, sink.sink) else None
    if state is not State.COMMITTED and not (pending and state in (State.OPEN, State.PRE_COMMITTED)):
        raise TransactionStateError(f"{reads.name} is not committed: a transaction can only read "
                                    "committed state (or, chained in a batch, a live attempt's)")


def read_problem(sink: "SinkView", txn: TxnRef, reads: TxnRef) -> str | None:
    """Why ``txn`` may not commit on the state of ``reads`` (its intent is written): a newer version of
    that interval is committed or committing, or ``reads`` itself was aborted; None if it may. Raises
    PredecessorPendingError (nothing decided) while ``reads`` is not decided yet (a chained batch)."""
    newer = newer_than(sink, reads)
    if newer:
        return f"input state changed: it read {reads.name}, but {newer} replaced it"
    state = sink.log.status(reads.interval, reads.epoch).state
    if state is State.ABORTED:
        return f"input state changed: the predecessor version it read, {reads.name}, was aborted"
    if state is not State.COMMITTED:
        raise PredecessorPendingError(f"{txn.name} read the state of {reads.name}, which is not committed yet: "
                                      "it commits after it (a batch commits its intervals in order)")
    return None


def fence_successors(sink: "SinkView", txn: TxnRef, decide: Callable[..., State]) -> list[str]:
    """Abort undecided successor transactions (intervals starting where ``txn``'s ends) that read an
    older version of ``txn``'s interval, through ``decide(txn, state, cause, reason)`` (the protocol's
    outcome record); return those that had already committed on it (now stale)."""
    stale = []
    for iv in (i for i in sink.log.intervals() if i.start == txn.interval.end):
        for epoch, st in sink.log.statuses(iv).items():
            reads = st.reads
            if reads is None or reads.interval != txn.interval or reads.epoch >= txn.epoch:
                continue
            other = sink.ref(iv, epoch)
            if st.state is State.COMMITTED or ("intent" in st.records and decide(
                    other, State.ABORTED, "input_changed",
                    f"input state changed: {txn.name} replaces {reads.name}") is State.COMMITTED):
                stale.append(other.name)
    return stale
