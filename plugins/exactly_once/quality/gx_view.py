"""The Data Docs page view of the quality gate: GX's own, with its Jinja templates compiled once per process.

GX builds a new site builder, and so new Jinja environments, on every ``build_data_docs`` call: every
validation recompiled the same ~40 templates (about half of the Data Docs time of a validation). This
view shares one in-memory bytecode cache (keyed by template name and source checksum, so a changed
template is compiled again). Imported by GX itself, by name, from the site config of
:func:`exactly_once.quality.gx.make_context` - only when Data Docs are built.
"""
from __future__ import annotations

from typing import Any

from great_expectations.render.view import DefaultJinjaPageView
from jinja2 import BytecodeCache


class _MemoryBytecode(BytecodeCache):
    """Compiled templates kept for the life of the process."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Any) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Any) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_BYTECODE = _MemoryBytecode()


class CachedJinjaPageView(DefaultJinjaPageView):
    """GX's ``DefaultJinjaPageView`` whose Jinja environment reuses compiled templates."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = _BYTECODE
