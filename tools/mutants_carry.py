"""The kills ``make mutants`` carries from machine to machine: ``tools/mutants_killed.json``, committed.

A full database row is about 740 mutants, several hours on two cores: more than one session's machine
lives. Each run therefore writes its row's killed mutants here, and the next run - on any machine - starts
with them killed instead of running them again, as Stryker's incremental mode does with its committed
report. An entry is ``module``, the source hash of the mutant's ``def`` (its *scope*) and its key
(:func:`mutant_key`): a kill carries only while that whole function is unchanged, and only
because the conformance suite only grows (a test removed or weakened needs ``--fresh``, which ignores this
file). Survivors are never carried: they run again, so a verdict or a new test answers them.

Here too: :func:`mutant_key` (a mutant's name across edits), what a run's work DB killed (:func:`killed_before`)
and the carried kills as cosmic-ray results (:func:`carried_kills`, :func:`save_kills`)."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

Entry = tuple[str, str, str]  # (module, scope, key)
CARRY = Path(__file__).resolve().parent / "mutants_killed.json"
PKG = "plugins/exactly_once"


def load(row: str, path: Path | None = None) -> set[Entry]:
    """The killed mutants of ``row`` recorded in ``path`` (default :data:`CARRY`; none if it has none)."""
    path = path or CARRY
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        return set()
    return {tuple(line.split(" ", 2)) for line in rows.get(row, [])}  # type: ignore[misc]


def save(row: str, killed: Iterable[Entry], path: Path | None = None, merge: bool = False) -> int:
    """Record ``killed`` as ``row``'s kills in ``path`` (default :data:`CARRY`; the other rows' are kept);
    how many. ``merge``: added to the row's recorded kills (a shard's run: the other shards record theirs
    in the same file) instead of replacing them (which also drops the kills of functions since changed).
    Written atomically and under a lock: a run killed while it writes leaves the previous file, and two
    shards saving at once both count."""
    path = path or CARRY
    lock = Path(tempfile.gettempdir()) / f"eo-mutants-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            rows = json.loads(path.read_text())
        except FileNotFoundError:
            rows = {}
        rows[row] = sorted({" ".join(e) for e in set(killed)} | (set(rows.get(row, [])) if merge else set()))
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(sorted(rows.items())), indent=0) + "\n")
        os.replace(tmp, path)
    return len(rows[row])


def in_shard(item, shard: tuple[int, int] | None) -> bool:
    """Whether the mutant is shard ``k`` of ``n``'s (``shard = (k, n)``; ``None``: every mutant is). The split
    is by module, operator and occurrence, so every shard's work DB, made from the same code, splits alike."""
    if shard is None:
        return True
    m = item.mutations[0]
    name = f"{m.module_path.as_posix().split(f'{PKG}/', 1)[-1]}:{m.operator_name}:{m.occurrence}"
    return int(hashlib.sha1(name.encode()).hexdigest(), 16) % shard[1] == shard[0]


def merge_shards(into: Path, others: Iterable[Path], row: str) -> int:
    """Copy into ``into``'s work DB of ``row`` the results the other shards' work DBs have and it lacks (one
    DB for the report); how many. Refused unless every DB was made from the same code (``<row>.hash``)."""
    from cosmic_ray.work_db import WorkDB, use_db

    def ident(item) -> tuple[str, str, int]:
        m = item.mutations[0]
        return m.module_path.as_posix().split(f"{PKG}/", 1)[-1], m.operator_name, m.occurrence

    code = (into / f"{row}.hash").read_text()
    found = {}
    for other in others:
        if (other / f"{row}.hash").read_text() != code:
            raise SystemExit(f"{other}'s {row} row was made from other code than {into}'s: run the shards again")
        with use_db(str(other / f"{row}.sqlite"), WorkDB.Mode.open) as db:
            found.update({ident(item): res for item, res in db.completed_work_items})
    copied = 0
    with use_db(str(into / f"{row}.sqlite"), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            if (res := found.get(ident(item))) is not None:
                db.set_result(item.job_id, res)
                copied += 1
    return copied


def mutant_key(module: str, definition: str | None, operator: str, diff: str) -> str:
    """A mutant's name that survives edits elsewhere in its file: module, function, operator and a hash
    of the changed lines (not their numbers). :data:`tools.mutants_verdicts.VERDICTS` is keyed by it."""
    core = "\n".join(line.strip() for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    return f"{module}:{definition or '-'}:{operator.rsplit('/', 1)[-1]}:{hashlib.sha1(core.encode()).hexdigest()[:10]}"


def carried_kills(row: str) -> dict[tuple[str, str, str], object]:
    """The row's kills recorded in :data:`CARRY` by earlier runs, as results."""
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    return {e: WorkResult(WorkerOutcome.NORMAL, output=f"scope {e[1]}\nkey {e[2]}\ncarried: killed by an earlier "
                          f"run ({CARRY.name})", test_outcome=TestOutcome.KILLED)
            for e in load(row)}


def save_kills(work: Path, row: str, merge: bool = False) -> int:
    """Record the row's kills (its work DB's, carried ones included) in :data:`CARRY` (``merge``: :func:`save`)."""
    db_path = work / f"{row}.sqlite"
    return save(row, killed_before(db_path), merge=merge) if db_path.exists() else 0


def killed_before(db_path: Path) -> dict[tuple[str, str, str], object]:
    """The killed mutants of an earlier run: (module, source hash of their def, key) -> result. A mutant
    whose def is unchanged stays killed (tests are only added); every other one runs again."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    out = {}
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for item, res in db.completed_work_items:
            m = item.mutations[0]
            if res.test_outcome is TestOutcome.KILLED and res.output and res.output.startswith("scope "):
                scope, _, rest = res.output[6:].partition("\n")
                module = m.module_path.as_posix().split(f"{PKG}/", 1)[-1]
                # a carried kill has no diff: its key is the one it was carried under (a key made from no
                # diff would name every such mutant of a function alike, and match none)
                key = rest[4:].partition("\n")[0] if not res.diff and rest.startswith("key ") else \
                    mutant_key(module, m.definition_name, m.operator_name, res.diff or "")
                out[(module, scope, key)] = res
    return out


JUDGED = "judged before (tools/mutants_verdicts.py): not run again"  # a skipped mutant's result output


def forget(db, job_ids: list[str]) -> None:
    """Drop these jobs' results in a work DB: they are pending again (cosmic-ray 8.7's has no call for it)."""
    from cosmic_ray.work_db import WorkResultStorage

    with db._session_maker.begin() as session:
        session.query(WorkResultStorage).filter(WorkResultStorage.job_id.in_(job_ids)).delete()
