"""``make mutants``: mutation testing of the publish targets and the protocol's decision path, with
``tests/conformance`` as the only test command (issue 44; docs/RELIABILITY.md "Mutation testing").

    python -m tools.mutants run    [--rows files-local,redis,...] [--work DIR] [--limit N] [--fresh]
    python -m tools.mutants report [--work DIR]
    python -m tools.mutants save   [--work DIR]   (record a work DB's kills in tools/mutants_killed.json)
    python -m tools.mutants run --shard K/N ...; merge --work DIR --from DIR2,...   (one row over N workers)

The mutants come from cosmic-ray (its operators and work database; docs/RELIABILITY.md says why this
library). Everything runs in a scratch copy of the checkout (``<work>/tree``): the checkout is never
mutated, and a killed run leaves nothing behind in it. Per row of :data:`ROWS` (one per target, plus the
protocol's decision path):

1. *coverage pass* - the row's conformance share runs once under coverage with one context per test
   (:mod:`tools.mutants_cov`; child processes too): which test runs which line, and how long each takes;
2. *mutants* - cosmic-ray's operators over the row's files, reduced to one replacement per operator
   (:func:`reduced`); a mutant inside a type annotation is not made (never evaluated: PEP 563), one
   inside an f-string or a logging call changes only a message and is counted as ``message``, not run;
3. *kill pass* - each mutant runs only the tests of its row's share that execute its lines, fastest
   first, and stops at the first failure (``pytest -x``); a mutant no test of the share executes is
   ``not covered``;
4. *confirmation* (``--confirm``) - a survivor runs again against its row's whole share (``pytest
   tests/conformance -k <kind> -x``); the coverage pass records the child processes' lines as well
   (``tools/mutants_site``), so this only guards against a test that covers a line by another route.

A survivor is then judged by :data:`tools.mutants_verdicts.VERDICTS` (equivalent or harmless, and why)
or counted as a real survivor. The report (``<work>/report.md``, also printed) has the per-row table:
killed / survived / equivalent / not covered and the score, killed / (killed + real survivors).
Results persist in ``<work>/<row>.sqlite`` (cosmic-ray's work DB): a run resumes where the last one
stopped unless the row's code changed (then that row starts over) or ``--fresh``. Kills also go to the
committed ``tools/mutants_killed.json`` (:mod:`tools.mutants_carry`), so a row too long for one machine's
life goes on where the last machine stopped: a kill carries while its function is unchanged.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tools import mutants_carry
from tools.mutants_carry import (JUDGED, PKG, carried_kills, forget, in_shard, killed_before,  # noqa: F401
                                 merge_shards, mutant_key, save_kills)
from tools.mutants_report import Result, report, results, verdict  # noqa: F401  (the report: its own module)

ROOT = Path(__file__).resolve().parents[1]
DB_FILES = ["targets/database.py", "targets/db_claims.py", "targets/db_retries.py", "targets/sql_dialects.py",
            "targets/csv_rows.py", "targets/endpoint.py", "targets/base.py"]
# row -> (the files whose mutants it counts, the conformance kinds whose share tests them)
ROWS: dict[str, tuple[list[str], list[str]]] = {
    "files-local": (["targets/files.py", "targets/base.py"], ["files-local"]),
    "files-s3": (["targets/s3files.py", "targets/base.py"], ["files-s3"]),
    "delta-local": (["targets/delta.py", "targets/delta_checks.py", "targets/base.py"], ["delta-local"]),
    # the same delta.py as delta-local: its S3 share plus the local one, whose tests of the storage-independent
    # rules (another engine's table features, time travel, log files on disk) a mutant there must also pass
    "delta-s3": (["targets/delta.py", "targets/delta_checks.py", "targets/base.py"], ["delta-s3", "delta-local"]),
    "postgresql": (DB_FILES, ["postgresql"]),
    "mysql": (DB_FILES, ["mysql"]),
    "redis": (["targets/keyvalue.py", "targets/endpoint.py", "targets/base.py"], ["redis"]),
    # the decision and publish path of the protocol, the same for every target: every kind's share but the
    # loopback S3 server's (the slowest by far; the same protocol code runs on local disk)
    "protocol": (["protocol/transaction.py", "protocol/decisions.py", "protocol/staging.py"],
                 ["files-local", "delta-local", "postgresql", "mysql", "redis"]),
}
# another dialect's code in a shared file is not the row's: its mutants are the other row's, never made here
# (row -> module -> top-level classes and constants)
FOREIGN: dict[str, dict[str, set[str]]] = {
    "postgresql": {"targets/sql_dialects.py": {"MySQL", "_MY_SCHEMA", "_MY_UNAVAILABLE", "_MY_PERMISSION",
                                               "_TRANSACTIONAL"}},
    "mysql": {"targets/sql_dialects.py": {"Postgres"}},
}
# a test's kind: one of its parameter ids ("[mysql-0]", "[qualified name-postgresql]", "[delta-local-compact]")
KIND_RE = re.compile(r"[\[-](files-local|files-s3|delta-local|delta-s3|postgresql|mysql|redis)(?=[\]-])")
# one replacement per operator (cosmic-ray makes every pair): the boundary shift and the negation of a
# comparison, the arithmetic inverse of an operator; AddNot, the boolean, number, loop and exception
# operators as they are
KEEP_BINARY = {"Add_Sub", "Sub_Add", "Mul_Div", "Div_Mul", "FloorDiv_Mul", "Mod_FloorDiv", "Pow_Mul",
               "BitOr_BitAnd", "BitAnd_BitOr", "BitXor_BitOr", "LShift_RShift", "RShift_LShift"}
KEEP_COMPARE = {"Eq_NotEq", "NotEq_Eq", "Lt_LtE", "LtE_Lt", "Gt_GtE", "GtE_Gt", "Is_IsNot", "IsNot_Is",
                "Lt_GtE", "Gt_LtE", "LtE_Gt", "GtE_Lt"}
SKIP_OPERATORS = {"core/RemoveDecorator"}  # @dataclass/@property/@staticmethod removals break every test at import


def reduced(operator: str) -> bool:
    """Is cosmic-ray's ``operator`` in the reduced set (see :data:`KEEP_BINARY`)?"""
    if operator in SKIP_OPERATORS:
        return False
    for prefix, keep in (("core/ReplaceBinaryOperator_", KEEP_BINARY), ("core/ReplaceComparisonOperator_", KEEP_COMPARE)):
        if operator.startswith(prefix):
            return operator[len(prefix):] in keep
    if operator.startswith("core/ReplaceUnaryOperator_"):
        return operator in ("core/ReplaceUnaryOperator_USub_UAdd", "core/ReplaceUnaryOperator_Delete_Not")
    return True


# ---------------------------------------------------------------------------------------------- the source
@dataclass(frozen=True)
class Spans:
    """Line/column spans of one module that decide how a mutant there is counted."""

    annotations: list[tuple[tuple[int, int], tuple[int, int]]]
    messages: list[tuple[tuple[int, int], tuple[int, int]]]
    scopes: list[tuple[tuple[int, int], tuple[int, int], str]]  # every def/class: its span, a hash of its source
    bodies: list[tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=list)  # every def's body

    @staticmethod
    def of(path: Path) -> "Spans":
        source = path.read_text()
        tree = ast.parse(source)
        ann, msg, scopes, bodies = [], [], [], []
        span = lambda n: ((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset))  # noqa: E731
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                text = ast.get_source_segment(source, node) or ""
                scopes.append((*span(node), hashlib.sha1(text.encode()).hexdigest()[:12]))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bodies.append(((node.body[0].lineno, node.body[0].col_offset), span(node)[1]))
                args = node.args
                ann += [span(a.annotation) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                     *filter(None, [args.vararg, args.kwarg])] if a.annotation]
                if node.returns:
                    ann.append(span(node.returns))
            elif isinstance(node, ast.AnnAssign):
                ann.append(span(node.annotation))
            elif isinstance(node, ast.JoinedStr):
                msg.append(span(node))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id in ("log", "logger") and \
                    node.func.attr in ("debug", "info", "warning", "error", "exception"):
                msg.append(span(node))
        return Spans(ann, msg, scopes, bodies)

    @staticmethod
    def top_level(path: Path, names: set[str]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """The spans of ``path``'s top-level classes, functions and assignments named in ``names``."""
        out = []
        for node in ast.parse(path.read_text()).body:
            named = {node.name} if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else \
                {t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)}
            if named & names:
                out.append(((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)))
        return out

    def at_import(self, start: tuple[int, int]) -> bool:
        """Whether code at ``start`` runs once, when the module is imported (module or class level, a
        def's signature): coverage credits it to whichever test imported the module first."""
        return not any(s <= start <= e for s, e in self.bodies)

    def scope(self, start: tuple[int, int]) -> str:
        """The source hash of the innermost def/class around ``start`` (``module`` at module level)."""
        inner = [(s, h) for s, e, h in self.scopes if s <= start <= e]
        return max(inner)[1] if inner else "module"

    @staticmethod
    def inside(spans: list, start: tuple[int, int], end: tuple[int, int]) -> bool:
        return any(s <= start and end <= e for s, e in spans)


def files_hash(tree: Path, files: Iterable[str]) -> str:
    h = hashlib.sha1()
    for f in sorted(files):
        h.update(f.encode() + b"\0" + (tree / PKG / f).read_bytes())
    for test in sorted((tree / "tests" / "conformance").glob("*.py")):
        h.update(test.name.encode() + b"\0" + test.read_bytes())
    return h.hexdigest()


def snapshot(tree: Path) -> None:
    """Copy the checkout's files (tracked and new, as they are now) into ``tree``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    if tree.exists():
        shutil.rmtree(tree)
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args]


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree / 'plugins'}", "PYTHONDONTWRITEBYTECODE": "1"}


# ---------------------------------------------------------------------------------------------- coverage
@dataclass
class Coverage:
    """Which tests run each line (``lines[file][line] -> {node id}``; ``""``: at import) and their times."""

    lines: dict[str, dict[int, set[str]]]
    durations: dict[str, float]

    def tests(self, module: str, first: int, last: int, kinds: list[str]) -> tuple[list[str], bool]:
        """(the row's tests that run lines ``first..last`` of ``module``, fastest first; run at import?)"""
        found: set[str] = set()
        for line in range(first, last + 1):
            found |= self.lines.get(module, {}).get(line, set())
        imported = "" in found
        mine = [t for t in found if t and (m := KIND_RE.search(t)) and m.group(1) in kinds]
        return sorted(mine, key=lambda t: (self.durations.get(t, 60.0), t)), imported

    def module_tests(self, module: str, kinds: list[str]) -> list[str]:
        """The row's tests that run any line of ``module``, fastest first: every test that depends on what
        its import sets up (constants, class attributes, defaults)."""
        every = self.lines.get(module, {})
        return self.tests(module, min(every, default=0), max(every, default=0), kinds)[0]


def coverage_pass(tree: Path, work: Path, kinds: list[str]) -> Coverage:
    """Run the kinds' conformance shares once under :mod:`tools.mutants_cov`; cached per code hash."""
    every = sorted({f for files, _ in ROWS.values() for f in files})
    data = work / "coverage" / f"{'-'.join(sorted(kinds))}.{files_hash(tree, every)[:12]}"
    data.parent.mkdir(parents=True, exist_ok=True)
    if not Path(str(data) + ".durations.json").exists():
        print(f"coverage pass over {kinds} ...", flush=True)
        cmd = pytest_cmd("tests/conformance", "-k", " or ".join(kinds), "-p",
                         "tools.mutants_cov", f"--basetemp={work / 'tmp-coverage'}")
        env = {**env_for(tree), "EO_MUTANTS_COVERAGE": str(data),
               "PYTHONPATH": f"{tree / 'plugins'}:{tree / 'tools' / 'mutants_site'}"}
        proc = subprocess.run(cmd, cwd=tree, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"the conformance suite fails without any mutant ({shlex.join(cmd)}): fix it first")
        import coverage

        combined = coverage.Coverage(data_file=str(data), config_file=False)
        combined.combine([str(p) for p in data.parent.glob(data.name + ".*") if not p.name.endswith(".json")])
        combined.save()
    import coverage

    cov = coverage.CoverageData(basename=str(data))
    cov.read()
    lines: dict[str, dict[int, set[str]]] = {}
    prefix = str(tree / PKG) + "/"
    for path in cov.measured_files():
        if path.startswith(prefix):
            lines[path[len(prefix):]] = {n: set(c) for n, c in cov.contexts_by_lineno(path).items()}
    return Coverage(lines, json.loads(Path(str(data) + ".durations.json").read_text()))


# ---------------------------------------------------------------------------------------------- mutants
def init_row(tree: Path, work: Path, row: str, fresh: bool) -> Path:
    """The row's cosmic-ray work DB, made anew if missing, stale (its code changed) or ``fresh``."""
    from cosmic_ray.commands.init import _all_work_items
    from cosmic_ray.work_db import WorkDB, use_db

    files, _ = ROWS[row]
    db_path, stamp = work / f"{row}.sqlite", work / f"{row}.hash"
    code = files_hash(tree, files)
    if not fresh and db_path.exists() and stamp.exists() and stamp.read_text() == code:
        return db_path
    spans = {f: Spans.of(tree / PKG / f) for f in files}
    foreign = {f: Spans.top_level(tree / PKG / f, FOREIGN.get(row, {}).get(f, set())) for f in files}
    kept = {} if fresh else {**carried_kills(row), **(killed_before(db_path) if db_path.exists() else {})}
    db_path.unlink(missing_ok=True)
    with use_db(str(db_path), WorkDB.Mode.create) as db:
        items = []
        for item in _all_work_items([tree / PKG / f for f in files], {}):
            m = item.mutations[0]
            module = str(Path(m.module_path).relative_to(tree / PKG))
            if reduced(m.operator_name) and not Spans.inside(spans[module].annotations, m.start_pos, m.end_pos) \
                    and not Spans.inside(foreign[module], m.start_pos, m.end_pos) and _mutates(item, tree):
                items.append(item)
        db.add_work_items(items)
        carried = 0
        for item in items if kept else ():
            m = item.mutations[0]
            module = str(Path(m.module_path).relative_to(tree / PKG))
            old = kept.get((module, spans[module].scope(m.start_pos), mutant_key(module, m.definition_name,
                                                                                   m.operator_name, _diff(item, tree))))
            if old is not None:
                db.set_result(item.job_id, old)
                carried += 1
        print(f"{row}: {len(items)} mutants, {carried} killed before in unchanged code (kept)", flush=True)
    stamp.write_text(code)
    return db_path


def _mutates(item, tree: Path) -> bool:
    """False for a mutant cosmic-ray's operator cannot make: its exception replacer fails on some dotted names
    in an ``except`` tuple (``AttributeError: 'PythonNode' object has no attribute 'value'``) - skipped and
    said, so one such line never stops a whole row."""
    m = item.mutations[0]
    if m.operator_name != "core/ExceptionReplacer":
        return True
    try:
        _diff(item, tree)
    except AttributeError as exc:
        print(f"skipped: cosmic-ray cannot make {m.operator_name} at {m.module_path}:{m.start_pos[0]} ({exc})", flush=True)
        return False
    return True


def _diff(item, tree: Path) -> str:
    from cosmic_ray.mutating import use_mutation
    import cosmic_ray.plugins

    m = item.mutations[0]
    with use_mutation(Path(m.module_path), cosmic_ray.plugins.get_operator(m.operator_name)(), m.occurrence) as (before, after):
        if after is None:
            return ""
        import difflib

        rel = str(Path(m.module_path).relative_to(tree))
        return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), rel, rel, n=0))


def run_row(tree: Path, work: Path, row: str, cov: Coverage, limit: int | None, deadline: float | None,
            confirm: bool = False, rerun_judged: bool = False, shard: tuple[int, int] | None = None) -> None:
    """Run the row's pending mutants (at most ``limit``, none after ``deadline``; only ``shard``'s: see
    :func:`tools.mutants_carry.in_shard`), recording each result.
    A mutant already judged equivalent or harmless (:data:`VERDICTS`) is recorded as the survivor it was,
    not run again (unless ``rerun_judged``): running it cannot change the score, and a survivor costs its
    tests' whole time."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    from tools.mutants_verdicts import VERDICTS

    files, kinds = ROWS[row]
    spans = {f: Spans.of(tree / PKG / f) for f in files}
    share = pytest_cmd("tests/conformance", "-x", "-k", " or ".join(kinds),
                       f"--basetemp={work / 'tmp-run'}")
    with use_db(str(work / f"{row}.sqlite"), WorkDB.Mode.open) as db:
        if rerun_judged:
            forget(db, [job for job, res in db.results if JUDGED in (res.output or "")])
        pending = [item for item in db.pending_work_items if in_shard(item, shard)]
        print(f"{row}: {len(pending)} mutants to run", flush=True)
        for n, item in enumerate(pending):
            if (limit is not None and n >= limit) or (deadline is not None and time.time() > deadline):
                break
            m = item.mutations[0]
            module = str(Path(m.module_path).relative_to(tree / PKG))
            tests, imported = cov.tests(module, m.start_pos[0], m.end_pos[0], kinds)
            if spans[module].at_import(m.start_pos):
                tests = cov.module_tests(module, kinds)
            if Spans.inside(spans[module].messages, m.start_pos, m.end_pos):
                db.set_result(item.job_id, WorkResult(WorkerOutcome.SKIPPED, output="message", diff=_diff(item, tree)))
                continue
            if not tests and not imported:
                db.set_result(item.job_id, WorkResult(WorkerOutcome.SKIPPED, output="not covered", diff=_diff(item, tree)))
                continue
            diff = _diff(item, tree)
            key = mutant_key(module, m.definition_name, m.operator_name, diff)
            if not rerun_judged and verdict(VERDICTS, row, key):
                db.set_result(item.job_id, WorkResult(WorkerOutcome.SKIPPED, test_outcome=TestOutcome.SURVIVED,
                              output=f"scope {spans[module].scope(m.start_pos)}\n{JUDGED}", diff=diff))
                print(f"{row} {n + 1}/{len(pending)} {module}:{m.start_pos[0]} {m.operator_name.rsplit('/', 1)[-1]}: "
                      "judged before, not run again", flush=True)
                continue
            t0 = time.time()
            if tests:
                budget = 120 + 3 * sum(cov.durations.get(t, 60.0) for t in tests)
                cmd = pytest_cmd("-x", *tests, f"--basetemp={work / 'tmp-run'}")
                res = mutate_and_test(item.mutations, shlex.join(cmd), budget)
            else:
                res = None
            if res is None or (confirm and res.test_outcome is TestOutcome.SURVIVED):  # the whole share
                res = mutate_and_test(item.mutations, shlex.join(share), 900)
            res = WorkResult(res.worker_outcome, output=f"scope {spans[module].scope(m.start_pos)}\n"
                             + (res.output or "")[-4000:], test_outcome=res.test_outcome, diff=res.diff)
            db.set_result(item.job_id, res)
            if n % 20 == 19:
                mutants_carry.save(row, killed_before(work / f"{row}.sqlite"), merge=shard is not None)
            print(f"{row} {n + 1}/{len(pending)} {module}:{m.start_pos[0]} {m.operator_name.rsplit('/', 1)[-1]}: "
                  f"{res.test_outcome.value if res.test_outcome else res.worker_outcome.value} "
                  f"({time.time() - t0:.0f} s, {len(tests)} tests)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.mutants", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["run", "report", "save", "merge"])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    ap.add_argument("--work", default=os.environ.get("MUTANTS_DIR", str(ROOT / ".mutants")))
    ap.add_argument("--limit", type=int, help="at most this many mutants per row this time")
    ap.add_argument("--hours", type=float, help="start no mutant after this many hours")
    ap.add_argument("--fresh", action="store_true", help="forget earlier results, the carried kills too")
    ap.add_argument("--row-minutes", type=float, help="start no mutant of a row after this many minutes on it "
                    "(the pending order is random: a time-boxed row is a random sample)")
    ap.add_argument("--confirm", action="store_true", help="run each survivor again against its row's whole share")
    ap.add_argument("--rerun-judged", action="store_true", help="run the mutants a verdict already judges too")
    ap.add_argument("--shard", help="K/N: run only the K-th of N parts of each row (N workers, each its own --work; "
                    "their kills add up in the carry file; `merge` then joins their results for one report)")
    ap.add_argument("--from", dest="others", default="", help="merge: the other shards' work directories")
    args = ap.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        ap.error(f"unknown rows {unknown}; choose of {list(ROWS)}")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    k, _, n = (args.shard or "").partition("/")
    if args.shard and not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        ap.error(f"--shard is K/N with 0 <= K < N, not {args.shard!r}")
    shard = (int(k), int(n)) if args.shard else None
    if args.command == "run":
        tree = work / "tree"
        snapshot(tree)
        os.chdir(tree)  # cosmic-ray runs the test command in the current directory, with this environment
        os.environ.update(PYTHONPATH=str(tree / "plugins"), PYTHONDONTWRITEBYTECODE="1")
        deadline = time.time() + args.hours * 3600 if args.hours else None
        for row in rows:
            cov = coverage_pass(tree, work, sorted(ROWS[row][1]))  # the row's share only (cached)
            init_row(tree, work, row, args.fresh)
            row_deadline = time.time() + args.row_minutes * 60 if args.row_minutes else None
            ends = [d for d in (deadline, row_deadline) if d is not None]
            run_row(tree, work, row, cov, args.limit, min(ends) if ends else None, args.confirm, args.rerun_judged,
                    shard)
            print(f"{row}: {save_kills(work, row, shard is not None)} kills recorded in {mutants_carry.CARRY}",
                  flush=True)
    if args.command in ("save", "merge"):  # a work DB's kills, recorded for the next run on any machine
        for row in rows:
            if args.command == "merge":
                others = [Path(d).resolve() for d in args.others.split(",") if d]
                print(f"{row}: {merge_shards(work, others, row)} results of {len(others)} other shards copied")
            print(f"{row}: {save_kills(work, row, shard is not None)} kills recorded in {mutants_carry.CARRY}")
        return 0
    text = report(work, rows)
    (work / "report.md").write_text("# Mutation testing report (make mutants)\n\n" + text)
    print(text)
    print(f"report: {work / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
