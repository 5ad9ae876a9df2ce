"""The kills ``make mutants`` carries from machine to machine: ``tools/mutants_killed.json``, committed.

A full database row is about 740 mutants, several hours on two cores: more than one session's machine
lives. Each run therefore writes its row's killed mutants here, and the next run - on any machine - starts
with them killed instead of running them again, as Stryker's incremental mode does with its committed
report. An entry is ``module``, the source hash of the mutant's ``def`` (its *scope*) and its key
(:func:`tools.mutants.mutant_key`): a kill carries only while that whole function is unchanged, and only
because the conformance suite only grows (a test removed or weakened needs ``--fresh``, which ignores this
file). Survivors are never carried: they run again, so a verdict or a new test answers them."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

Entry = tuple[str, str, str]  # (module, scope, key)
CARRY = Path(__file__).resolve().parent / "mutants_killed.json"


def load(row: str, path: Path | None = None) -> set[Entry]:
    """The killed mutants of ``row`` recorded in ``path`` (default :data:`CARRY`; none if it has none)."""
    path = path or CARRY
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        return set()
    return {tuple(line.split(" ", 2)) for line in rows.get(row, [])}  # type: ignore[misc]


def save(row: str, killed: Iterable[Entry], path: Path | None = None) -> int:
    """Record ``killed`` as ``row``'s kills in ``path`` (default :data:`CARRY`; the other rows' are kept);
    how many. Written atomically: a run killed while it writes leaves the previous file."""
    path = path or CARRY
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        rows = {}
    rows[row] = sorted(" ".join(e) for e in set(killed))
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(sorted(rows.items())), indent=0) + "\n")
    os.replace(tmp, path)
    return len(rows[row])
