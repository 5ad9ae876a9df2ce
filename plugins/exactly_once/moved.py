"""The module names of releases before 0.3 keep working: ``exactly_once.transaction`` is
``exactly_once.protocol.transaction``, the same module object (so ``isinstance``, monkeypatching and
pickles agree whichever name a caller used).

0.3 gave the package its layers (README "Layout"); :data:`MOVED` maps every flat name of 0.2 to where
the module lives now. :func:`install` puts a finder on ``sys.meta_path`` that answers an
old name by importing the new one - lazily, so an old name costs nothing until it is imported.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

PACKAGE = __name__.rsplit(".", 1)[0]
# 0.2's flat module -> its module now (both relative to the package)
MOVED = {
    "storage_s3": "storage.s3",
    **{m: f"records.{m}" for m in ("txlog", "manifest", "ownership")},
    **{m: f"protocol.{m}" for m in ("sinkview", "staging", "liveness", "ordering", "transaction", "layout",
                                    "config", "pipeline", "batch")},
    "quality_frames": "quality.frames", "quality_gx": "quality.gx", "quality_gx_view": "quality.gx_view",
    "suites": "quality.suites", "reports": "quality.reports",
    **{m: f"ops.{m}" for m in ("maintenance", "rollback", "history", "inspection", "run_report")},
    "shipping": "job.shipping", "connect": "job.connect",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module that lives under the new one."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the alias's spec: keep the module's own


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, name = fullname.rpartition(".")
        if prefix != PACKAGE or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(f"{PACKAGE}.{MOVED[name]}"))


def install() -> None:
    """Answer the old names from now on (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
