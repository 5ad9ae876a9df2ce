"""What the protocol writes down, one record kind per module: the transaction log of every interval's
epochs and their states (:mod:`.txlog`), the manifest that seals a version's files (:mod:`.manifest`),
and the owner records that bind a table to one pipeline, sink and target (:mod:`.ownership`).
Built on :mod:`exactly_once.storage` only; every layer above reads and writes through these."""
from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {"TxLog": ".txlog", "State": ".txlog", "EpochStatus": ".txlog", "Manifest": ".manifest",
            "ManifestFile": ".manifest", "PartitionClaims": ".ownership"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562: the names load with their module, not with the package
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
