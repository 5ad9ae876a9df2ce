"""``make mutants``' own rules (tools/mutants.py): which tests a mutant runs, and its name."""
from __future__ import annotations

import textwrap

from tools.mutants import KIND_RE, Coverage, Spans, mutant_key


def test_a_tests_kind_is_any_of_its_parameter_ids():
    kinds = {t: (m.group(1) if (m := KIND_RE.search(t)) else None) for t in (
        "a.py::t[mysql-0]", "a.py::t[qualified name-postgresql]", "a.py::t[delta-local-compact]",
        "a.py::t[files-s3]", "a.py::t[redis-2-3-superseded]", "a.py::t[unsafe-name]", "a.py::t")}
    assert list(kinds.values()) == ["mysql", "postgresql", "delta-local", "files-s3", "redis", None, None]


def test_code_run_at_import_is_told_from_code_run_by_a_call(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent('''\
        LIMIT = 20
        class T:
            keeps = True
            def f(self, n=LIMIT):
                return n + 1
        '''))
    spans = Spans.of(module)
    assert [spans.at_import(at) for at in ((1, 8), (3, 12), (4, 21), (5, 15))] == [True, True, True, False]


def test_an_import_time_mutant_runs_every_test_of_the_row_that_uses_the_module():
    """Coverage credits a module's import to the test that imported it first; a constant or class attribute
    is used by every test that runs the module's code."""
    cov = Coverage({"m.py": {1: {"t.py::first[redis]"}, 5: {"t.py::other[redis]", "t.py::x[mysql]"}}},
                   {"t.py::first[redis]": 2.0, "t.py::other[redis]": 1.0})
    assert cov.tests("m.py", 1, 1, ["redis"]) == (["t.py::first[redis]"], False)
    assert cov.module_tests("m.py", ["redis"]) == ["t.py::other[redis]", "t.py::first[redis]"]


def test_a_mutants_name_does_not_depend_on_where_the_tree_is():
    diff = "--- a//work/{}/tree/m.py\n+++ b//work/{}/tree/m.py\n@@ -1 +1 @@\n-LIMIT = 20\n+LIMIT = 21\n"
    assert mutant_key("m.py", None, "core/NumberReplacer", diff.format("x", "x")) == \
        mutant_key("m.py", None, "core/NumberReplacer", diff.format("y", "y"))


def test_a_mutant_cosmic_ray_cannot_make_is_skipped_not_fatal(tmp_path):
    """cosmic-ray's exception replacer raises on a dotted name after a plain one in an ``except`` tuple
    (a whole row's run stopped at init on it); such a mutant is left out, every other one is kept."""
    from cosmic_ray.commands.init import _all_work_items

    from tools.mutants import _mutates

    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent('''\
        import io
        def f(fh):
            try:
                return fh.fileno()
            except (ValueError, io.UnsupportedOperation):
                return None
        '''))
    made = {(i.mutations[0].operator_name, i.mutations[0].occurrence): _mutates(i, tmp_path)
            for i in _all_work_items([module], {})}
    assert made[("core/ExceptionReplacer", 0)] is True  # ValueError
    assert made[("core/ExceptionReplacer", 1)] is False  # io.UnsupportedOperation: the operator fails
    assert all(ok for (op, _), ok in made.items() if op != "core/ExceptionReplacer")


def test_kills_carry_to_the_next_machine_while_their_function_is_unchanged(tmp_path, monkeypatch):
    """A row longer than one machine's life goes on elsewhere: the kills a run records in the committed
    file come back killed in a new work DB (no earlier DB on this machine), each only while its whole
    function is unchanged; ``--fresh`` ignores them; survivors are never recorded."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    from tools import mutants, mutants_carry

    tree, work = tmp_path / "tree", tmp_path / "work"
    (tree / mutants.PKG / "targets").mkdir(parents=True)
    work.mkdir()
    source = textwrap.dedent('''\
        def kept(n):
            return n + 1 if n > 0 else n
        def edited(n):
            return n * 2 if n < 10 else n
        ''')
    (tree / mutants.PKG / "targets" / "tiny.py").write_text(source)
    monkeypatch.setitem(mutants.ROWS, "tiny", (["targets/tiny.py"], ["files-local"]))
    monkeypatch.setattr(mutants_carry, "CARRY", tmp_path / "killed.json")

    def outcomes() -> dict[tuple[str, str], str]:
        with use_db(str(work / "tiny.sqlite"), WorkDB.Mode.open) as db:
            done = {i.job_id: r for i, r in db.completed_work_items}
            return {(i.mutations[0].definition_name, i.job_id): done[i.job_id].test_outcome.value if i.job_id in done
                    else "pending" for i in db.work_items}

    db_path = mutants.init_row(tree, work, "tiny", fresh=True)
    with use_db(str(db_path), WorkDB.Mode.open) as db:  # this machine's run: kill every mutant, one survives
        items = list(db.pending_work_items)
        assert {i.mutations[0].definition_name for i in items} == {"kept", "edited"} and len(items) >= 6
        survivor = next(i.job_id for i in items if i.mutations[0].definition_name == "kept")
        for item in items:
            scope = mutants.Spans.of(tree / mutants.PKG / "targets" / "tiny.py").scope(item.mutations[0].start_pos)
            db.set_result(item.job_id, WorkResult(WorkerOutcome.NORMAL, output=f"scope {scope}\n",
                          test_outcome=TestOutcome.SURVIVED if item.job_id == survivor else TestOutcome.KILLED,
                          diff=mutants._diff(item, tree)))
    recorded = mutants.save_kills(work, "tiny")
    assert recorded == len(items) - 1 and len(mutants_carry.load("tiny")) == recorded

    for f in work.iterdir():  # a new machine: no work DB, the committed file only ...
        f.unlink()
    (tree / mutants.PKG / "targets" / "tiny.py").write_text(source.replace("n * 2", "n * 3"))  # ... `edited` changed
    mutants.init_row(tree, work, "tiny", fresh=False)
    got = sorted(outcomes().items())  # the new DB's job ids are new: compare by function
    assert [o for (d, _), o in got if d == "kept"].count("pending") == 1  # the survivor runs again
    assert [o for (d, _), o in got if d == "kept"].count("killed") == len([i for i in items if
                                                                          i.mutations[0].definition_name == "kept"]) - 1
    assert {o for (d, _), o in got if d == "edited"} == {"pending"}  # its function changed: run again
    carried = mutants_carry.load("tiny")
    mutants.save_kills(work, "tiny")  # a third machine's file, from this run's DB: the carried kills' keys kept
    assert {e for e in mutants_carry.load("tiny") if ":kept:" in e[2]} == {e for e in carried if ":kept:" in e[2]}
    mutants.init_row(tree, work, "tiny", fresh=True)
    assert set(outcomes().values()) == {"pending"}


def test_a_verdict_for_one_row_does_not_judge_the_mutant_in_another():
    """Another dialect's error codes are equivalent in the PostgreSQL row and a real survivor in MariaDB's."""
    from tools.mutants import ROWS, verdict
    from tools.mutants_verdicts import VERDICTS

    key = "targets/sql_dialects.py:-:NumberReplacer:c29479c0f4"
    rows = {f"postgresql {key}": "another dialect's code"}
    assert verdict(rows, "postgresql", key) == "another dialect's code" and verdict(rows, "mysql", key) is None
    assert verdict({key: "any row"}, "mysql", key) == "any row"
    assert all(k.split(" ")[0] in ROWS for k in VERDICTS if " " in k)  # a row's verdict names a row


def test_every_conformance_test_names_the_kind_it_tests():
    """``make mutants`` runs a row's share by kind (``-k <kind>``): a conformance test without a kind in its
    parameter ids is run by no row, so the mutants it would kill count as survivors."""
    import subprocess
    import sys

    from tools.mutants import KIND_RE, ROOT

    listed = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                             "tests/conformance"], cwd=ROOT, capture_output=True, text=True, timeout=600).stdout
    tests = [line for line in listed.splitlines() if "::" in line]
    assert len(tests) > 500 and [t for t in tests if not KIND_RE.search(t)] == []


def test_another_dialects_code_is_not_the_rows(tmp_path):
    """MariaDB's dialect class and error-code sets in the shared sql_dialects.py make no mutants in the
    PostgreSQL row (they are the MariaDB row's), and PostgreSQL's class none in MariaDB's."""
    from tools.mutants import FOREIGN, PKG, ROOT

    path = ROOT / PKG / "targets" / "sql_dialects.py"
    lines = path.read_text().splitlines()
    for row, other in (("postgresql", "class MySQL("), ("mysql", "class Postgres(")):
        spans = Spans.top_level(path, FOREIGN[row]["targets/sql_dialects.py"])
        starts = {lines[s[0] - 1].split(" =")[0] for s, _ in spans}
        assert any(line.startswith(other) for line in starts)
        assert Spans.inside(spans, (spans[0][0][0] + 1, 4), (spans[0][0][0] + 1, 8))  # a line inside the first
    my = Spans.top_level(path, FOREIGN["postgresql"]["targets/sql_dialects.py"])
    assert {lines[s[0] - 1].split(" =")[0] for s, _ in my} == {"class MySQL(Dialect):", "_MY_SCHEMA", "_MY_UNAVAILABLE",
                                                                "_MY_PERMISSION", "_TRANSACTIONAL"}
    dialect_base = next(i for i, line in enumerate(lines, 1) if line.startswith("class Dialect("))
    assert not Spans.inside(my, (dialect_base + 3, 4), (dialect_base + 3, 8))  # the shared base is every row's


def test_a_judged_mutant_is_not_run_again_unless_asked(tmp_path, monkeypatch):
    """A mutant a verdict already judges is recorded as the judged survivor it was, without running its tests
    (a survivor costs its tests' whole time, and running it cannot change the score); an unjudged one runs;
    ``--rerun-judged`` runs the judged ones too, and a judged mutant whose verdict is gone says so."""
    from cosmic_ray.work_db import WorkDB, use_db

    from tools import mutants, mutants_carry, mutants_verdicts

    tree, work = tmp_path / "tree", tmp_path / "work"
    (tree / mutants.PKG / "targets").mkdir(parents=True)
    work.mkdir()
    (tree / mutants.PKG / "targets" / "tiny.py").write_text("def kept(n):\n    return n + 1 if n > 0 else n\n")
    monkeypatch.setitem(mutants.ROWS, "tiny", (["targets/tiny.py"], ["files-local"]))
    monkeypatch.setattr(mutants_carry, "CARRY", tmp_path / "killed.json")
    monkeypatch.chdir(tree)
    db_path = mutants.init_row(tree, work, "tiny", fresh=True)
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        keys = sorted(mutants_carry.mutant_key("targets/tiny.py", "kept", i.mutations[0].operator_name,
                                               mutants._diff(i, tree)) for i in db.pending_work_items)
    unjudged = keys[0]
    for key in keys[1:]:
        monkeypatch.setitem(mutants_verdicts.VERDICTS, f"tiny {key}", "equivalent: a test's verdict")
    # the one test that runs the lines does not exist: a mutant that runs fails, i.e. is killed
    cov = mutants.Coverage({"targets/tiny.py": {2: {"tests/conformance/test_gone.py::t[files-local]"}}}, {})

    def outcomes() -> dict[str, tuple[str, bool]]:
        return {r.key: (r.outcome, r.judged_before) for r in mutants.results(work, "tiny")}

    mutants.run_row(tree, work, "tiny", cov, None, None)
    assert outcomes() == {k: ("killed", False) if k == unjudged else ("survived", True) for k in keys}
    text = mutants.report(work, ["tiny"])
    assert f"| tiny | {len(keys)} | 1 | 0 | {len(keys) - 1} |" in text and "not run again" in text
    monkeypatch.delitem(mutants_verdicts.VERDICTS, f"tiny {keys[1]}")
    assert "its verdict is gone" in mutants.report(work, ["tiny"])
    mutants.run_row(tree, work, "tiny", cov, None, None, rerun_judged=True)
    assert outcomes() == {k: ("killed", False) for k in keys}  # run this time: the missing test fails each


def test_a_row_split_over_shards_runs_each_mutant_once_and_their_kills_add_up(tmp_path, monkeypatch):
    """``--shard K/N``: N workers, each its own work DB, run disjoint parts that together are the whole row;
    their kills add up in the carry file (neither shard's save drops the other's), and ``merge`` joins their
    results into one DB whose report counts every mutant. A shard made from other code is refused."""
    import pytest
    from cosmic_ray.work_db import WorkDB, use_db

    from tools import mutants, mutants_carry

    tree = tmp_path / "tree"
    (tree / mutants.PKG / "targets").mkdir(parents=True)
    source = "def kept(n):\n    return n + 1 if n > 0 else n * 2\n"
    (tree / mutants.PKG / "targets" / "tiny.py").write_text(source)
    monkeypatch.setitem(mutants.ROWS, "tiny", (["targets/tiny.py"], ["files-local"]))
    monkeypatch.setattr(mutants_carry, "CARRY", tmp_path / "killed.json")
    monkeypatch.chdir(tree)
    cov = mutants.Coverage({"targets/tiny.py": {2: {"tests/conformance/test_gone.py::t[files-local]"}}}, {})
    works = [tmp_path / f"shard{k}" for k in range(3)]
    for k, work in enumerate(works[:2]):
        work.mkdir()
        mutants.init_row(tree, work, "tiny", fresh=True)
        mutants.run_row(tree, work, "tiny", cov, None, None, shard=(k, 2))  # every mutant that runs is killed
        mutants.save_kills(work, "tiny", merge=True)

    def done(work) -> set[tuple]:
        with use_db(str(work / "tiny.sqlite"), WorkDB.Mode.open) as db:
            return {(i.mutations[0].operator_name, i.mutations[0].occurrence) for i, _ in db.completed_work_items}

    with use_db(str(works[0] / "tiny.sqlite"), WorkDB.Mode.open) as db:
        every = {(i.mutations[0].operator_name, i.mutations[0].occurrence) for i in db.work_items}
    parts = [done(w) for w in works[:2]]
    assert len(every) >= 6 and parts[0] and parts[1] and not parts[0] & parts[1] and parts[0] | parts[1] == every
    assert len(mutants_carry.load("tiny")) == len(every)  # both shards' kills recorded
    assert mutants.merge_shards(works[0], [works[1]], "tiny") == len(parts[1])
    assert done(works[0]) == every
    assert f"| tiny | {len(every)} | {len(every)} | 0 | 0 | 0 | 0 | 0 | 100.0% |" in mutants.report(works[0], ["tiny"])
    works[2].mkdir()
    (tree / mutants.PKG / "targets" / "tiny.py").write_text(source.replace("n * 2", "n * 3"))
    mutants.init_row(tree, works[2], "tiny", fresh=True)
    with pytest.raises(SystemExit, match="other code"):
        mutants.merge_shards(works[0], [works[2]], "tiny")
    assert mutants.save_kills(works[2], "tiny") == 0  # a save that is not a shard's replaces the row's kills
