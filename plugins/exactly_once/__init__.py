"""Exactly-once batch pipelines for Airflow + Spark.

The protocol is :class:`~exactly_once.transaction.TwoPhaseCommitSink`; see ``docs/PROTOCOL.md``.
"""
from .errors import (ConfigError, ExactlyOnceError, FailpointError, FencedError, InputChangedError,
                     InputsShrankError, OrderingError, OwnershipError, StorageError, TransactionAbortedError,
                     TransactionStateError, UnsafeIdentifierError, ValidationFailedError)
from .ids import Interval, TxnRef
from .manifest import Manifest, ManifestFile
from .transaction import CommitResult, TwoPhaseCommitSink
from .txlog import State

__all__ = [
    "CommitResult", "ConfigError", "ExactlyOnceError", "FailpointError", "FencedError", "InputChangedError",
    "InputsShrankError", "Interval", "Manifest", "ManifestFile", "OrderingError", "OwnershipError", "State",
    "StorageError", "TransactionAbortedError", "TransactionStateError",
    "TwoPhaseCommitSink", "TxnRef", "UnsafeIdentifierError", "ValidationFailedError",
]
