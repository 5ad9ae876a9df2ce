"""What the protocol's helper modules (:mod:`~exactly_once.protocol.liveness`, :mod:`~exactly_once.protocol.ordering`,
:mod:`~exactly_once.protocol.staging`) see of a sink: a typed, read-only view that
:class:`~exactly_once.protocol.transaction.TwoPhaseCommitSink` satisfies. The helpers depend on this view, not on
the protocol module that calls them, so the layers import one way only."""
from __future__ import annotations

from typing import Protocol

from ..ids import Interval, TxnRef
from ..storage import Storage
from ..targets.base import PublishTarget
from ..records.txlog import TxLog


class SinkView(Protocol):
    """One table's transaction log, storage and publish target, and where each transaction stages."""

    pipeline: str
    sink: str
    storage: Storage
    home: str  # the table's internals: log, staging, checkpoints, heartbeats
    target: PublishTarget
    log: TxLog

    def ref(self, interval: Interval, epoch: int) -> TxnRef:
        """The transaction of ``interval`` at ``epoch``."""

    def staging_dir(self, txn: TxnRef) -> str:
        """Everything ``txn`` stages (data, state, counts) until it is published or aborted."""

    def data_dir(self, txn: TxnRef) -> str:
        """Where the write job puts ``txn``'s output files."""

    def sealed_dir(self, txn: TxnRef) -> str:
        """Where pre-commit seals ``txn``'s output files (the manifest's files)."""

    def checkpoint_dir(self, txn: TxnRef) -> str:
        """What a published ``txn`` keeps: its state, counts and (some targets) its staged copies."""
