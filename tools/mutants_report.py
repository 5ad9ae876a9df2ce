"""The report of ``make mutants`` (:mod:`tools.mutants`): each row's work DB read back, its survivors judged by
:data:`tools.mutants_verdicts.VERDICTS`, the per-row table and every survivor with its diff and verdict."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tools.mutants_carry import JUDGED, PKG, mutant_key


@dataclass(frozen=True)
class Result:
    key: str
    module: str
    line: int
    outcome: str  # killed | survived | message | not covered
    diff: str
    tests: str = ""
    judged_before: bool = False  # a survivor a verdict judged, not run again this time


def results(work: Path, row: str) -> Iterator[Result]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    with use_db(str(work / f"{row}.sqlite"), WorkDB.Mode.open) as db:
        for item, res in db.completed_work_items:
            m = item.mutations[0]
            module = m.module_path.as_posix().split(f"{PKG}/", 1)[-1]
            if res.output in ("message", "not covered") and res.test_outcome is None:
                outcome = res.output
            elif res.test_outcome is TestOutcome.SURVIVED:
                outcome = "survived"
            elif res.test_outcome is None:  # the runner failed (cosmic-ray's exception): run it again
                outcome = "error"
            else:  # killed, a timeout, or a mutant the interpreter refuses (incompetent): the suite notices
                outcome = "killed"
            yield Result(mutant_key(module, m.definition_name, m.operator_name, res.diff or ""), module,
                         m.start_pos[0], outcome, res.diff or "", judged_before=JUDGED in (res.output or ""))


def verdict(verdicts: dict[str, str], row: str, key: str) -> str | None:
    """The verdict on survivor ``key`` in ``row``: one for that row only (``"<row> <key>"``: another
    dialect's code is equivalent in this row, not in its own), else one for every row."""
    return verdicts.get(f"{row} {key}") or verdicts.get(key)


def report(work: Path, rows: list[str]) -> str:
    from tools.mutants_verdicts import VERDICTS

    head = ("| row | mutants | killed | survived | equivalent / harmless | message only | not covered | "
            "pending | killed of non-equivalent |\n|---|---|---|---|---|---|---|---|---|")
    table, details, notes = [head], [], []
    for row in rows:
        if not (work / f"{row}.sqlite").exists():
            continue
        from cosmic_ray.work_db import WorkDB, use_db

        with use_db(str(work / f"{row}.sqlite"), WorkDB.Mode.open) as db:
            total, pending = db.num_work_items, len(list(db.pending_work_items))
        res = list(results(work, row))
        count = lambda o: sum(1 for r in res if r.outcome == o)  # noqa: E731
        survivors = [r for r in res if r.outcome == "survived"]
        judged = [r for r in survivors if verdict(VERDICTS, row, r.key)]
        real = [r for r in survivors if not verdict(VERDICTS, row, r.key)]
        killed = count("killed")
        score = f"{100 * killed / (killed + len(real)):.1f}%" if killed + len(real) else "-"
        table.append(f"| {row} | {total} | {killed} | {len(real)} | {len(judged)} | {count('message')} | "
                     f"{count('not covered')} | {pending + count('error')} | {score} |")
        for r in sorted(survivors, key=lambda r: (r.module, r.line)):
            why = verdict(VERDICTS, row, r.key) or ("NOT JUDGED: a real survivor (add a test, or a verdict with the "
                                                    "reason)" + ("; its verdict is gone since a run skipped it: "
                                                                 "`--rerun-judged` runs it" if r.judged_before else ""))
            details.append(f"### {row}: `{r.key}` ({r.module}:{r.line})\n{why}\n```diff\n{r.diff.strip()}\n```\n")
        again = sum(1 for r in judged if r.judged_before)
        if again:
            notes.append(f"{row}: {again} of the {len(judged)} equivalent / harmless were judged by an earlier run "
                         "and not run again (`--rerun-judged` runs them)")
    return "\n".join(table + [""] + notes) + "\n\n## Survivors\n\n" + ("\n".join(details) or "none\n")
