"""Maintenance beside live runs, through the protocol's own records: :func:`gc` and recover
(:mod:`.maintenance`), rollback (:mod:`.rollback`), a table's history (:mod:`.history`),
what each interval's epochs are and mean (:mod:`.inspection`) and a run's report (:mod:`.run_report`).
Each may run at any time beside any attempt: the protocol's fencing and grace rules bound what it touches."""
from __future__ import annotations

from importlib import import_module
from typing import Any

# (not ``rollback`` or ``history``: those names are the submodules; import them from there)
_EXPORTS = {"gc": ".maintenance", "rollback_refusal": ".rollback", "open_table": ".inspection",
            "interval_view": ".inspection"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562: the names load with their module, not with the package
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
