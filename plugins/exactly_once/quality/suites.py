"""Expectation suite files: found, read and checked, every problem named by its file and field.

A table's suite is ``suite_path`` (e.g. ``expectations/orders.json``) plus its companions
``<stem>.<anything>.json``; each is a Great Expectations 1.x ExpectationSuite as JSON (docs/JOB_API.md):
``{"name", "expectations": [{"type", "kwargs", "meta", "notes", "severity"}, ...], "meta": {"eo": ...},
"notes"}``.

Two checks, both raising :class:`~exactly_once.errors.ConfigError` (final: no retry can fix a file):

* :func:`check_suites` - the file's shape, without importing GX (seconds to import): JSON syntax, the
  known fields and their types, core expectation names, ``meta.eo``. ``exactly_once_group`` calls it
  when the DAG is built, so a broken suite is a DAG import error, not a failed run.
* :func:`gx_suite` - GX's own check of each expectation's arguments (its pydantic models), at validate.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
from typing import Any

from ..errors import ConfigError

FRAMES = ("data", "counts", "checkpoint")
SUITE_FIELDS = {"name": str, "expectations": list, "meta": dict, "notes": (str, list), "id": str,
                "suite_parameters": dict}
EXPECTATION_FIELDS = {"type": str, "kwargs": dict, "meta": dict, "notes": (str, list), "description": str,
                      "severity": str, "id": str, "success_on_last_run": bool, "rendered_content": list}
SEVERITIES = ("critical", "warning", "info")
EO_FIELDS = {"frame": str, "key_columns": list, "fill": dict, "derive": dict}


def suite_paths(suite_path: str) -> list[str]:
    """``suite_path`` and its companions ``<stem>.*.json``, sorted (ConfigError if it does not exist)."""
    if not os.path.isfile(suite_path):
        raise ConfigError(f"expectation suite {suite_path} does not exist (PipelineConfig.suite)")
    stem = suite_path[: -len(".json")] if suite_path.endswith(".json") else suite_path
    return [suite_path, *sorted(glob.glob(glob.escape(stem) + ".*.json"))]


def read_suite(path: str) -> tuple[str, dict[str, Any]]:
    """``(frame, suite json)`` of the suite file at ``path``, its shape checked (see the module doc)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    problems = _shape(data)
    if problems:
        raise ConfigError(f"{path}: not a Great Expectations 1.x suite: {'; '.join(problems[:5])}"
                          f"{' ...' if len(problems) > 5 else ''} (the format: docs/JOB_API.md)")
    eo = (data.get("meta") or {}).get("eo") or {}
    return eo.get("frame", "data"), data


def check_suites(suite_path: str | None) -> None:
    """Read and check ``suite_path`` and its companions (nothing to do for None)."""
    if suite_path is not None:
        for path in suite_paths(suite_path):
            read_suite(path)


def _fields(where: str, value: dict[str, Any], spec: dict[str, Any], hint: dict[str, str] | None = None
            ) -> list[str]:
    out = []
    for key, item in value.items():
        if key not in spec:
            out.append(f"{where}{key}: unknown field{(' (' + hint[key] + ')') if hint and key in hint else ''}")
        elif item is not None and not isinstance(item, spec[key]):
            out.append(f"{where}{key}: must be {_kind(spec[key])}, not {type(item).__name__}")
    return out


def _kind(types: Any) -> str:
    names = {str: "a string", list: "a list", dict: "an object", bool: "true or false"}
    return " or ".join(names[t] for t in (types if isinstance(types, tuple) else (types,)))


def _shape(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return [f"the file must hold an object, not {type(data).__name__}"]
    problems = _fields("", data, SUITE_FIELDS)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        problems.append("name: a non-empty string is required")
    elif not all(name.split(".")) or any(c in name for c in "/\\\0"):
        # GX stores suite a.b at a/b.json: "a..b" would share a.b's page, ".a" would land outside the site
        problems.append(f"name: {name!r} must not start or end with '.', hold '..', '/', '\\' or NUL "
                        "(its dotted parts become directories of the report site)")
    expectations = data.get("expectations")
    if not isinstance(expectations, list):
        problems.append("expectations: a list is required")
        expectations = []
    for i, exp in enumerate(expectations):
        problems += _expectation(f"expectations[{i}]", exp)
    eo = (data.get("meta") or {}).get("eo") if isinstance(data.get("meta"), dict) else None
    if eo is not None:
        if not isinstance(eo, dict):
            return [*problems, "meta.eo: must be an object"]
        problems += _fields("meta.eo.", eo, EO_FIELDS)
        frame = eo.get("frame", "data")
        if frame not in FRAMES:
            problems.append(f"meta.eo.frame: must be one of {', '.join(FRAMES)}, not {frame!r}")
        if frame == "data" and (eo.get("fill") or eo.get("derive")):
            problems.append("meta.eo.fill/derive: apply to the counts and checkpoint frames only")
    return problems


def _expectation(where: str, exp: Any) -> list[str]:
    if not isinstance(exp, dict):
        return [f"{where}: must be an object"]
    kind = exp.get("type")
    problems = _fields(f"{where}.", exp, EXPECTATION_FIELDS,
                       {"expectation_type": "GX 1.x calls it type", "kwarg": "did you mean kwargs?"})
    if not isinstance(kind, str) or not kind:
        problems.append(f"{where}.type: the expectation's name is required (e.g. expect_column_values_to_not_be_null)")
    elif not _known(kind):
        problems.append(f"{where}.type: {kind!r} is not a Great Expectations core expectation")
    if not isinstance(exp.get("kwargs"), dict):
        problems.append(f"{where}.kwargs: an object of the expectation's arguments is required")
    if isinstance(exp.get("severity"), str) and exp["severity"] not in SEVERITIES:
        problems.append(f"{where}.severity: must be one of {', '.join(SEVERITIES)}, not {exp['severity']!r}")
    return problems


def _known(kind: str) -> bool:
    """Is ``kind`` one of GX's core expectations? (Its module file, found without importing GX.)"""
    spec = importlib.util.find_spec("great_expectations")
    if spec is None or not spec.submodule_search_locations:
        return True  # GX is not installed here: the validate task will say
    return any(os.path.isfile(os.path.join(root, "expectations", "core", f"{kind}.py"))
               for root in spec.submodule_search_locations)


def gx_suite(gx: Any, data: dict[str, Any], path: str) -> Any:
    """``gx.ExpectationSuite(**data)`` after GX checked each expectation's arguments; a refusal is a
    ConfigError naming ``path``, the expectation and the argument (GX itself would log and drop an
    unknown expectation, or raise its own validation error without the file's name)."""
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    for i, exp in enumerate(data.get("expectations") or []):
        try:
            ExpectationConfiguration(**exp).to_domain_obj()
        except Exception as exc:  # noqa: BLE001 - GX's errors (pydantic, its own, TypeError): named, final
            raise ConfigError(f"{path}: expectations[{i}] ({exp.get('type')}): "
                              f"{_gx_reason(exc, exp.get('kwargs') or {})}") from None
    try:
        return gx.ExpectationSuite(**data)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{path}: {_gx_reason(exc, {})}") from None


def _gx_reason(exc: Exception, kwargs: dict[str, Any]) -> str:
    """One line: pydantic's errors as ``kwargs.<argument>: <message>`` (the first per field), else the text."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors()
        except Exception:  # noqa: BLE001
            items = []
        seen: dict[str, str] = {}
        for item in items:
            loc = ".".join(str(p) for p in item.get("loc", ()) if p != "__root__")
            field = f"kwargs.{loc}" if loc in kwargs or not loc else loc
            seen.setdefault(field if loc else "kwargs", str(item.get("msg")))
        if seen:
            return "; ".join(f"{k}: {v}" for k, v in seen.items())
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
