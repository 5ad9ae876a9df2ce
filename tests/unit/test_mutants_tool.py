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
