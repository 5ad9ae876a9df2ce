"""Exactly-once batch pipelines for Airflow + Spark.

The protocol is :class:`~exactly_once.transaction.TwoPhaseCommitSink`; see ``docs/PROTOCOL.md``.
"""
from .errors import (ConfigError, ExactlyOnceError, FailpointError, FencedError, OrderingError,
                     StorageError, TransactionAbortedError, TransactionStateError, UnsafeIdentifierError,
                     ValidationFailedError)
from .ids import Interval, TxnRef
from .transaction import CommitResult, TwoPhaseCommitSink
from .txlog import State

__all__ = [
    "CommitResult", "ConfigError", "ExactlyOnceError", "FailpointError", "FencedError", "Interval",
    "OrderingError", "State", "StorageError", "TransactionAbortedError", "TransactionStateError",
    "TwoPhaseCommitSink", "TxnRef", "UnsafeIdentifierError", "ValidationFailedError",
]
