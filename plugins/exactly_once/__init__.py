"""Exactly-once batch pipelines for Airflow + Spark.

The protocol is :class:`~exactly_once.protocol.transaction.TwoPhaseCommitSink`; see ``docs/PROTOCOL.md``.
"""
from . import moved

moved.install()  # 0.2's flat module names (exactly_once.transaction, ...) keep working

from .errors import (ConfigError, ExactlyOnceError, FailpointError, FencedError, InputChangedError,
                     InputsShrankError, OrderingError, OwnershipError, StorageError, TransactionAbortedError,
                     TransactionStateError, UnsafeIdentifierError, ValidationFailedError)
from .ids import Interval, TxnRef
from .records.manifest import Manifest, ManifestFile
from .protocol.transaction import CommitResult, TwoPhaseCommitSink
from .records.txlog import State

__all__ = [
    "CommitResult", "ConfigError", "ExactlyOnceError", "FailpointError", "FencedError", "InputChangedError",
    "InputsShrankError", "Interval", "Manifest", "ManifestFile", "OrderingError", "OwnershipError", "State",
    "StorageError", "TransactionAbortedError", "TransactionStateError",
    "TwoPhaseCommitSink", "TxnRef", "UnsafeIdentifierError", "ValidationFailedError",
    *sorted(_LAZY := {"PipelineConfig": "protocol", "Source": "protocol", "Partitions": "protocol",
                      "IntervalRun": "protocol", "BatchRun": "protocol"}),
]


def __getattr__(name: str):  # PEP 562: the pipeline API loads on first use (the job side never needs it)
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
