"""Verdicts on the survivors of ``make mutants`` (:mod:`tools.mutants`): mutant key -> why it is
equivalent (no input tells it from the original) or harmless (it changes no row, no marker and no
decision). A survivor without a verdict is a real one: the suite misses a bug; add a test, not a verdict.
Keys are :func:`tools.mutants.mutant_key` (module, function, operator, hash of the changed lines)."""
from __future__ import annotations

VERDICTS: dict[str, str] = {
}
