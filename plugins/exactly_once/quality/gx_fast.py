"""Cheaper Great Expectations bookkeeping per expectation, with results unchanged.

A validation of a small frame is almost all GX's own overhead per expectation (``bench/notes/validate.md``):
while it builds the metric graph, GX asks an expectation for its domain, success and runtime kwargs many
times, and each of those reads ``Expectation.configuration`` once *per key* - a property that rebuilds the
whole configuration (a pydantic ``dict()`` of the expectation, the class name turned into snake case by two
regexes, a new ``ExpectationConfiguration``) on every read: ~4,000 rebuilds for one validation of a
40-expectation interval, a third of its time.

:func:`install` replaces those three methods (and ``_get_success_kwarg``, which reads it twice) with copies
that read the configuration once per call, and memoizes the snake-case name of a class. Each copy computes
exactly what GX's method computes (the configuration is a pure function of the expectation, which does not
change during the call) and calls the others through ``self`` as GX does (a subclass's override stays in
force). It is applied only where GX's methods are the ones it was written against - their source is compared
with the digests below -, so another GX release keeps its own methods (and its own speed) instead of a copy
that may have drifted. ``EO_GX_FAST=0`` turns it off (read once per process, before the first validation).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

# sha256 of GX's own source of each method this module replaces (the same in great-expectations 1.16-1.24)
# (and of the two it relies on: ``_get_success_kwarg``, copied too, and ``_get_default_value``)
KNOWN = {
    "_get_domain_kwargs": "91ad2a0670ff463ad99457f1e5c351b7fbd64cac8f6c200a18a437552f2adfd0",
    "_get_success_kwargs": "fe376905e18bc525a128d251281e7f48309e82f820f23c8e1d93d85e2739b26f",
    "_get_runtime_kwargs": "4196ca2a2cdb5bbfdf5e7540eaa58048d6e6881819ed004041ef56151667d8d0",
    "_get_success_kwarg": "baef37a186b4087123ae215810bc46c0761b276c4db2bb336865fe959e5bffd2",
    "_get_default_value": "e1e019551fb0a00bc7ba961f6aada499d9ccaf53089e340b381b58702033b00b",
}
GX_LOGGER = "great_expectations.expectations.expectation"  # where GX's own method logs
_state: dict[str, Any] = {}


def digest(func: Any) -> str:
    """sha256 of a function's source, as :data:`KNOWN` holds it."""
    return hashlib.sha256(inspect.getsource(func).encode()).hexdigest()


def install() -> bool:
    """Apply the faster methods once per process (see the module docstring); returns whether they are on."""
    from great_expectations.expectations import expectation as module

    cls = module.Expectation
    if getattr(cls._get_runtime_kwargs, "_eo_fast", False):  # installed already (the copies stay for the
        _state["on"] = True                                    # process: EO_GX_FAST is read before that)
        return True
    if "on" in _state:
        return _state["on"]
    _state["on"] = False
    if os.environ.get("EO_GX_FAST", "1") == "0":
        return False
    try:
        found = {name: digest(getattr(cls, name)) for name in KNOWN}
    except (AttributeError, OSError, TypeError) as exc:
        log.info("GX's expectation methods are not as expected (%s): left as they are", exc)
        return False
    if found != KNOWN:
        log.info("this GX release's expectation methods differ from the ones gx_fast copies: left as they are")
        return False
    snake = getattr(module, "camel_to_snake", None)
    if callable(snake):
        module.camel_to_snake = functools.lru_cache(maxsize=4096)(snake)
    parse = module.parse_result_format

    # GX's call structure kept (each calls the others through ``self``, so a subclass's override of any of
    # them still counts) - but where a class overrides none of them, _get_runtime_kwargs (GX's hot path)
    # reads the configuration once for all three; the others read it once per call, not once per key
    def _get_domain_kwargs(self: Any) -> dict[str, Any]:
        return _domain(self, self.configuration.kwargs)

    def _get_success_kwargs(self: Any) -> dict[str, Any]:
        domain_kwargs = self._get_domain_kwargs()
        return _success(self, self.configuration.kwargs, domain_kwargs)

    def _get_runtime_kwargs(self: Any, runtime_configuration: dict | None = None) -> dict:
        runtime_configuration = runtime_configuration or {}
        cls = type(self)
        if (cls._get_success_kwargs is _get_success_kwargs and cls._get_domain_kwargs is _get_domain_kwargs
                and cls._get_success_kwarg is _get_success_kwarg):  # none overridden: one read in all
            kwargs = self.configuration.kwargs
            success_kwargs = _success(self, kwargs, _domain(self, kwargs))
            runtime_kwargs = {key: runtime_configuration.get(key, _success_kwarg(self, kwargs, key, None))
                              for key in self.runtime_keys}
        else:
            success_kwargs = self._get_success_kwargs()
            runtime_kwargs = {key: runtime_configuration.get(key, self._get_success_kwarg(key))
                              for key in self.runtime_keys}
        runtime_kwargs.update(success_kwargs)
        runtime_kwargs["result_format"] = parse(runtime_kwargs["result_format"])
        return runtime_kwargs

    def _get_success_kwarg(self: Any, key: str, default: Any = None) -> Any:
        return _success_kwarg(self, self.configuration.kwargs, key, default)

    for method in (_get_domain_kwargs, _get_success_kwargs, _get_runtime_kwargs, _get_success_kwarg):
        method._eo_fast = True  # type: ignore[attr-defined]
    cls._get_success_kwarg = _get_success_kwarg
    cls._get_domain_kwargs = _get_domain_kwargs
    cls._get_success_kwargs = _get_success_kwargs
    cls._get_runtime_kwargs = _get_runtime_kwargs
    _state["on"] = True
    return True


def _domain(self: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """GX's ``_get_domain_kwargs`` on the configuration's ``kwargs``."""
    from great_expectations.exceptions import InvalidExpectationKwargsError

    domain_kwargs = {key: kwargs.get(key, self._get_default_value(key)) for key in self.domain_keys}
    missing = set(self.domain_keys) - set(domain_kwargs.keys())
    if missing:
        raise InvalidExpectationKwargsError(f"Missing domain kwargs: {list(missing)}")
    return domain_kwargs


def _success(self: Any, kwargs: dict[str, Any], domain_kwargs: dict[str, Any]) -> dict[str, Any]:
    """GX's ``_get_success_kwargs`` on the configuration's ``kwargs``, given the domain kwargs."""
    success_kwargs = {key: kwargs.get(key, self._get_default_value(key)) for key in self.success_keys}
    success_kwargs.update(domain_kwargs)
    return success_kwargs


def _success_kwarg(self: Any, kwargs: dict[str, Any], key: str, default: Any) -> Any:
    """GX's ``_get_success_kwarg(key, default)`` on the configuration's ``kwargs``."""
    if key in kwargs:
        return kwargs[key]
    field = self.__fields__.get(key)
    if field is not None:
        return field.default if not field.required else default
    logging.getLogger(GX_LOGGER).warning(
        '_get_success_kwarg called with key "%s", but it is not a known field of %s', key, type(self).__name__)
    return default
