"""CI's share of ``make mutants`` (issue 44): a FIXED sample of mutants of the targets and the protocol's
decision path - one or two per target, the kinds of bug the suite once missed - each planted in a
scratch copy of the package and run against the conformance tests that must kill it (``-x``). The
test fails if one survives. The full run is ``make mutants`` (docs/RELIABILITY.md, "Mutation testing").
About a minute: each mutant runs a handful of tests on one target."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROMISES, BREAKS = "tests/conformance/test_promises.py", "tests/conformance/test_target_breaks.py"
# id -> (file under plugins/exactly_once, the original text (exactly once in it), the mutant, tests that kill it)
SAMPLE = {
    "files-local: publishers not serialized (the flock loop never runs)": (
        "targets/files.py", "        while True:\n", "        while False:\n",
        [PROMISES, "-k", "two_publishers and files-local"]),
    "files-local: link relative to the configured table dir": (
        "targets/files.py", "os.path.relpath(os.path.realpath(vdir), os.path.realpath(os.path.dirname(link)))",
        "os.path.relpath(vdir, os.path.dirname(link))", [BREAKS, "-k", "symlink and files-local"]),
    "files-local: gc never sweeps a version": (
        "targets/files.py", "        for part, version in list(self.versions()):",
        "        for part, version in []:", ["tests/conformance/test_gc_rollback.py", "-k", "superseded_and and files-local"]),
    "files-s3: the manifest switch lists only the first file": (
        "targets/s3files.py", "for f, n in zip(files, names)]}", "for f, n in list(zip(files, names))[:1]]}",
        ["tests/conformance/test_refusals.py", "-k", "files-s3 and duplicate"]),
    "delta: an owner's claim not checked before the decision": (
        "targets/delta.py", "        self.check_owner()\n        schema = self.staged_schema(txn, staged)",
        "        schema = self.staged_schema(txn, staged)", [PROMISES, "-k", "owners_marker and delta-local"]),
    "postgresql: the marker row is not locked": (
        "targets/database.py", '"interval_token = %s FOR UPDATE", (self.table, interval.token))',
        '"interval_token = %s", (self.table, interval.token))', [PROMISES, "-k", "two_publishers and postgresql"]),
    "database: another owner's marker taken for ours": (
        "targets/database.py", "        marker = self._lock_marker(cur, txn.interval)\n        self._refuse_foreign(marker, txn)",
        "        marker = self._lock_marker(cur, txn.interval)", [PROMISES, "-k", "owners_marker and postgresql"]),
    "mysql: table names compared case-insensitively": (
        "targets/sql_dialects.py", '    name_type = "varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"',
        '    name_type = "varchar(255)"', [BREAKS, "-k", "case and mysql"]),
    "redis: the marker set outside MULTI": (
        "targets/keyvalue.py", "                    pipe.hset(marker, mapping=", "                    client.hset(marker, mapping=",
        [PROMISES, "-k", "crash_mid_publish and redis"]),
    "redis: keys the protocol did not write kept": (
        "targets/keyvalue.py", "                self._refuse_unknown_keys(client, txn, staged, marker)\n", "",
        [BREAKS, "-k", "did_not_write"]),
    "protocol: a partition the new version drops is not emptied": (
        "protocol/decisions.py", "                parts.setdefault(part, ())", "                pass",
        [PROMISES, "-k", "drops_a_partition and (files-local or mysql)"]),
    "protocol: an older epoch is not fenced": (
        "protocol/transaction.py", 'began") if newest > txn.epoch else', 'began") if newest < txn.epoch else',
        ["tests/conformance/test_fencing.py", "-k", "pre-committing and (files-local or redis)"]),
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A copy of the package, the tests and the pytest configuration, to plant mutants in."""
    root = tmp_path_factory.mktemp("mutants")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "plugins", root / "plugins", ignore=ignore)
    shutil.copytree(ROOT / "tests", root / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_the_conformance_suite_kills_the_sampled_mutant(scratch, tmp_path, name):
    rel, original, mutant, tests = SAMPLE[name]
    path = scratch / "plugins" / "exactly_once" / rel
    source = path.read_text()
    assert source.count(original) == 1, f"{rel}: the sample's original text is gone or not unique; update SAMPLE"
    path.write_text(source.replace(original, mutant))
    try:
        env = {**os.environ, "PYTHONPATH": str(scratch / "plugins"), "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests,
                               f"--basetemp={tmp_path / 'run'}"], cwd=scratch, env=env, capture_output=True,
                              text=True, timeout=600)
    finally:
        path.write_text(source)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
    assert proc.returncode == 1, f"mutant {name!r} survived (exit {proc.returncode}):\n{tail}"
    assert " failed" in proc.stdout, tail  # killed by a failing test, not by a collection error
