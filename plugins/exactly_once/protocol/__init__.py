"""The two-phase commit: one interval's transaction from begin to commit or abort.

:class:`TwoPhaseCommitSink` (:mod:`.transaction`) is the protocol's phases in one file (the checks
before a decision and the outcome record: :mod:`.decisions`); :class:`IntervalRun` (:mod:`.pipeline`)
runs its phases for a :class:`PipelineConfig` (:mod:`.config`), :class:`BatchRun` (:mod:`.batch`) for
many intervals with one write. Beside them: which input files an interval reads (:mod:`.layout`;
frozen, replayed and late: :mod:`.inputs`), a stateful interval's predecessor (:mod:`.ordering`),
heartbeats and takeovers on the storage's clock (:mod:`.liveness`), staging (:mod:`.staging`) and the
sink's view of its log (:mod:`.sinkview`). Below: records, targets, quality, storage; above: ops,
airflow, cli."""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {"TwoPhaseCommitSink": ".transaction", "CommitResult": ".transaction", "IntervalRun": ".pipeline",
            "BatchRun": ".batch", "PipelineConfig": ".config", "Source": ".layout", "Partitions": ".layout"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562: the names load with their module, not with the package
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
