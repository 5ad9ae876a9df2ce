"""The measured values of one transaction next to their limits, from the transaction log alone.

Values: the write job's counts (``pre_committed.counts``) and what the gate measured
(``validated.summary.measured``: the counts row the counts suite checked, with its derived ratios and
gaps). Limits: the rules of the pipeline's counts suite (``meta.eo.frame == "counts"``), with runtime
parameters resolved (``max_malformed_ratio``). Whether a rule held comes from the recorded verdict.
Nothing here knows a pipeline's columns: the well-known generic counts come first, the rest follow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConfigError
from .inspection import EpochView

FIRST = ("records_in", "records_rejected", "rejected_ratio", "records_deduplicated", "records_out", "rows_written",
         "rows_published", "files")
LABELS = {"records_in": "records read", "records_rejected": "malformed records (rejected)",
          "rejected_ratio": "malformed ratio", "records_deduplicated": "duplicates dropped",
          "records_out": "records accounted in the output", "rows_written": "rows written (job's count)",
          "rows_published": "rows in the staged files (manifest)", "files": "files"}


@dataclass(frozen=True)
class Measure:
    """One measured value; ``limits`` are the suite's rules on it; ``ok`` None when unknown."""

    name: str
    label: str
    value: Any
    limits: tuple[str, ...]
    ok: bool | None


def suite_limits(suite_path: str | None, parameters: Mapping[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """``{column: [(expectation type, rule text), ...]}`` of the counts suites next to ``suite_path``."""
    if not suite_path:
        return {}
    from ..quality import _expected, load_suites  # the gate's own wording of a rule

    try:
        suites = load_suites(suite_path, str(parameters.get("table") or "table"))
    except (ConfigError, OSError, ValueError):
        return {}
    out: dict[str, list[tuple[str, str]]] = {}
    for frame, data in suites:
        if frame != "counts":
            continue
        for exp in data.get("expectations") or []:
            kwargs = {k: _resolve(v, parameters) for k, v in (exp.get("kwargs") or {}).items()}
            column = kwargs.get("column")
            if isinstance(column, str):
                out.setdefault(column, []).append((exp.get("type", ""), _expected(exp.get("type", ""), kwargs)))
    return out


def _resolve(value: Any, parameters: Mapping[str, Any]) -> Any:
    if isinstance(value, dict) and "$PARAMETER" in value:
        return parameters.get(value["$PARAMETER"])
    return value


def measures(view: EpochView, suite_path: str | None = None) -> list[Measure]:
    """Every measured value of ``view`` with its limits: the generic counts first, then the rest."""
    q = view.quality
    recorded = dict(q.counts)
    recorded.update(q.measured)
    recorded.update(q.gaps)
    if q.malformed_ratio is not None:
        recorded["rejected_ratio"] = q.malformed_ratio
    recorded["rows_published"] = view.rows
    recorded["files"] = view.files
    params = {"max_malformed_ratio": q.max_malformed_ratio}
    limits = suite_limits(suite_path, params)
    if q.max_malformed_ratio is not None and not limits.get("rejected_ratio"):
        limits["rejected_ratio"] = [("", f"<= {q.max_malformed_ratio}")]
    rest = sorted(n for n, v in recorded.items() if n not in FIRST and _scalar(v))
    names = [n for n in FIRST if n in recorded] + sorted(rest, key=lambda n: not n.endswith("_gap"))
    out = []
    for name in names:
        rules = limits.get(name, [])
        failed = any(f"({name})" in line or f"({name}," in line for line in q.failures)
        ok = None if q.passed is None or not rules else not failed
        if name == "rejected_ratio" and q.malformed_ratio is not None and q.max_malformed_ratio is not None:
            ok = q.malformed_ratio <= q.max_malformed_ratio
        shown = tuple(rule for kind, rule in rules if rule != "no nulls")
        out.append(Measure(name, LABELS.get(name, name.replace("_", " ")), recorded[name], shown, ok))
    return out


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))
