"""The Data Docs page view and section builder of the quality gate: GX's own, with its Jinja templates
compiled once (per process, and kept on disk for the next), and each build rendering only the pages it is asked
for.

GX builds a new site builder, and so new Jinja environments, on every ``build_data_docs`` call: every
validation recompiled the same ~40 templates (about half of the Data Docs time of a validation). This
view shares one bytecode cache (keyed by template name and source checksum, so a changed template is
compiled again), in memory and in Jinja's per-user cache directory: a task process - one validation - loads
what an earlier one compiled. Imported by GX itself, by name, from the site config of
:func:`exactly_once.quality.gx.make_context` - only when Data Docs are built.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

from great_expectations.render.renderer.site_builder import DefaultSiteSectionBuilder
from great_expectations.render.view import DefaultJinjaPageView
from jinja2 import BytecodeCache, FileSystemBytecodeCache

log = logging.getLogger(__name__)


class _KeptBytecode(BytecodeCache):
    """Compiled templates kept for the life of the process, and in Jinja's own on-disk cache
    (``FileSystemBytecodeCache``: a directory of the user's own, mode 0700, under the temp dir; written
    atomically; a template whose source changed is compiled again), so that a new task process loads them
    instead of compiling them (~50 ms a validate task). Without a usable directory: the process's cache alone."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    @functools.cached_property
    def _disk(self) -> FileSystemBytecodeCache | None:
        try:
            return FileSystemBytecodeCache()
        except (OSError, RuntimeError) as exc:  # (RuntimeError: Jinja found no safe directory)
            log.info("report templates are compiled once per process: %s", exc)
            return None

    def load_bytecode(self, bucket: Any) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)
            return
        disk = self._disk
        if disk is None:
            return
        try:  # (the bucket drops code of another source, cache format or Python version)
            disk.load_bytecode(bucket)
        except Exception as exc:  # noqa: BLE001 - a damaged entry (cut short, not Jinja's) is a miss: the
            bucket.reset()        # template is compiled and the entry written anew (dump_bytecode)
            log.info("a kept report template could not be read (%s: %s): compiled again", type(exc).__name__, exc)
            return
        if bucket.code is not None:
            self._code[bucket.key] = bucket.bytecode_to_string()

    def dump_bytecode(self, bucket: Any) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()
        disk = self._disk
        if disk is not None:
            try:
                disk.dump_bytecode(bucket)
            except OSError as exc:
                log.info("could not keep a compiled report template on disk: %s", exc)


_BYTECODE = _KeptBytecode()


class CachedJinjaPageView(DefaultJinjaPageView):
    """GX's ``DefaultJinjaPageView`` whose Jinja environment reuses compiled templates."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = _BYTECODE


class _Listed:
    """A store seen through the keys it is asked about: ``list_keys`` returns them (those it holds)."""

    def __init__(self, store: Any, keys: list[Any]) -> None:
        self._store, self._keys = store, keys

    def list_keys(self, *args: Any, **kwargs: Any) -> list[Any]:
        return list(self._keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class KeyedSiteSectionBuilder(DefaultSiteSectionBuilder):
    """GX's ``DefaultSiteSectionBuilder`` that renders the resources it is given without listing its store.

    GX's own lists EVERY key of the section's store (each validation result ever stored: a walk of the
    whole results tree) and then skips all but the given ones: a validation cost more with every run
    before it (measured: 0.26 s a validation after none, 0.43 s after 1,400). Given resources, this one
    looks up just those; with none (a full rebuild) it is GX's."""

    def build(self, resource_identifiers: Any = None) -> None:
        if not resource_identifiers:
            return super().build(resource_identifiers)
        store = self.source_store
        kind = getattr(store, "key_class", None)
        keys = [r for r in resource_identifiers if (kind is None or isinstance(r, kind))
                and all(r.to_tuple()) and store.has_key(r)]  # (an empty part: a path GX cannot list back)
        self.source_store = _Listed(store, keys)
        try:
            return super().build(resource_identifiers)
        finally:
            self.source_store = store
