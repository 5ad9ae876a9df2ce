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

GX also turns every metric's kwargs into JSON to name the metric (``IDDict.to_id``: ~1,100 times for one
validation of an interval) and every result into JSON to store it, with ``convert_to_json_serializable``: a
chain of ~20 type checks before it returns a plain value as it is - three of them numpy's ``issubdtype``
before it reaches ``None``, the commonest value in metric kwargs. :func:`plain_json` returns ``None``, ``str``,
``int``, ``bool`` and ``float`` values (``None`` for NaN) and rebuilds ``dict``, ``list`` and ``tuple``
containers of exactly those types itself, as GX's function does for them, and hands every other value (a
subclass, a numpy or pandas value, a date) to GX's function; it replaces GX's function in GX's modules only
where that function's source is the one it was written against (:data:`JSON_KNOWN`).
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
# sha256 of GX's own ``great_expectations.util.convert_to_json_serializable`` that plain_json stands in front of
JSON_KNOWN = frozenset({"a282e2e272fc0dd2448354369b6c6223decf889883adab1aab7679cd38205523"})
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
    _state["json"] = install_plain_json()
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


def install_plain_json() -> bool:
    """Put :func:`plain_json` in front of GX's ``convert_to_json_serializable`` in every GX module that holds
    it (a module imported later takes it from ``great_expectations.util``); returns whether it is on. Left as it
    is when GX's function is not the one :data:`JSON_KNOWN` names."""
    import sys

    from great_expectations import util

    original = util.convert_to_json_serializable
    if getattr(original, "_eo_fast", False):
        return True
    try:
        if digest(original) not in JSON_KNOWN:
            log.info("this GX release's convert_to_json_serializable differs from the one gx_fast knows: left as is")
            return False
    except (OSError, TypeError) as exc:
        log.info("GX's convert_to_json_serializable is not as expected (%s): left as it is", exc)
        return False
    fast = plain_json(original)
    for name, module in list(sys.modules.items()):
        if (name == "great_expectations" or name.startswith("great_expectations.")) and \
                getattr(module, "convert_to_json_serializable", None) is original:
            module.convert_to_json_serializable = fast
    return True


def plain_json(original: Any) -> Any:
    """GX's ``convert_to_json_serializable`` (``original``) with plain values short-cut (module docstring): for
    exactly these types GX's function returns the same - the value itself, ``None`` for a NaN float, a new
    ``dict`` with ``str`` keys or a new ``list`` of the values converted - after checks none of them passes."""
    scalars = (str, int, bool)

    def convert_to_json_serializable(data: Any) -> Any:
        kind = type(data)
        if data is None or kind in scalars:
            return data
        if kind is float:
            return None if data != data else data  # NaN
        if kind is dict:  # (loops, not comprehensions: one frame a level, as GX's - the same recursion limit)
            new_dict = {}
            for key in data:
                new_dict[str(key)] = convert_to_json_serializable(data[key])
            return new_dict
        if kind is list or kind is tuple:
            new_list = []
            for value in data:
                new_list.append(convert_to_json_serializable(value))
            return new_list
        return original(data)

    fast = functools.wraps(original)(convert_to_json_serializable)  # GX's name, doc, signature: pickled by reference
    fast._eo_fast = True  # type: ignore[attr-defined]
    fast._eo_original = original  # type: ignore[attr-defined]
    return fast
