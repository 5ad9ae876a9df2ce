"""Stateful ordering: no interval commits on a predecessor state that was replaced (PROTOCOL.md).

Interval n+1 of a stateful pipeline records the version of n whose state it read (``reads``). Before
deciding COMMITTED, every transaction writes its ``intent`` record and then

* as a dependent, checks its predecessor with :func:`newer_than` (a newer version there that is
  committed, or announced by an intent and not aborted, aborts it);
* as a predecessor, fences its successors with :func:`fence_successors` (an undecided successor with an
  intent that read an older version is decided ABORTED; one that had already committed is now stale).

Each side writes its intent before it reads the other's, so at least one of them sees the other
(Dekker's handshake, on exclusive-create records).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .ids import TxnRef
from .txlog import State

if TYPE_CHECKING:
    from .transaction import TwoPhaseCommitSink


def newer_than(sink: "TwoPhaseCommitSink", reads: TxnRef) -> str | None:
    """A version of ``reads``' interval newer than ``reads`` that is committed or committing."""
    for epoch, st in sink.log.statuses(reads.interval).items():
        if epoch > reads.epoch and (st.state is State.COMMITTED or
                                    ("intent" in st.records and st.state is not State.ABORTED)):
            return sink.ref(reads.interval, epoch).name
    return None


def fence_successors(sink: "TwoPhaseCommitSink", txn: TxnRef) -> list[str]:
    """Abort undecided successor transactions (intervals starting where ``txn``'s ends) that read an
    older version of ``txn``'s interval; return those that had already committed on it (now stale)."""
    stale = []
    for iv in (i for i in sink.log.intervals() if i.start == txn.interval.end):
        for epoch, st in sink.log.statuses(iv).items():
            reads = st.reads
            if reads is None or reads.interval != txn.interval or reads.epoch >= txn.epoch:
                continue
            other = sink.ref(iv, epoch)
            if st.state is State.COMMITTED or ("intent" in st.records and sink._decide(
                    other, State.ABORTED, "input_changed",
                    f"input state changed: {txn.name} replaces {reads.name}") is State.COMMITTED):
                stale.append(other.name)
    return stale
