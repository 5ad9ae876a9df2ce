"""The package's modules import one way only: no import circle in the library, the tools or the bench,
counting every import (lazy ones inside functions and ``TYPE_CHECKING`` ones too), and no library module
over the size a reader can hold (~500 lines)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"exactly_once": ROOT / "plugins" / "exactly_once", "tools": ROOT / "tools", "bench": ROOT / "bench"}
MAX_LINES = 500  # the standard: no module over ~500 lines (every one is at or under 500 now)


def modules(name: str, folder: Path) -> dict[str, Path]:
    found = {}
    for path in folder.rglob("*.py"):
        parts = [name, *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``module`` imports anywhere in its body (``from pkg import sub`` counts as ``sub``)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{target}.{a.name}" for a in node.names} & known.keys()
            out |= subs or ({target} & known.keys())
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names} & known.keys()
    return out - {module}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_circles(package):
    known = modules(package, PACKAGES[package])
    graph = {m: imports(m, p, known) for m, p in known.items()}
    circles = cycles(graph)
    detail = "; ".join(" <-> ".join(c) + " (" + ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) + ")"
                       for c in circles)
    assert not circles, f"import circles: {detail}"


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_library_module_is_too_long_to_read():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGES["exactly_once"].rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules by job: {long}"


# The library's layers, bottom up (README "Layout"): a module imports only its own part and lower ranks.
LAYERS = {"errors": 0, "settings": 0, "advice": 0, "text": 0, "ids": 1, "contracts": 2, "storage": 3, "failpoints": 4, "job": 5,
          "records": 5, "targets": 6, "quality": 6, "protocol": 7, "ops": 8, "airflow": 9, "cli": 10,
          "moved": 10, "": 11}


def part(module: str) -> str:
    """``exactly_once.protocol.batch`` -> ``protocol``; the package itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_library_module_is_in_a_layer():
    known = modules("exactly_once", PACKAGES["exactly_once"])
    assert {part(m) for m in known} == set(LAYERS), "a new top-level module or subpackage: give it a layer"


def test_layers_import_downwards_only():
    known = modules("exactly_once", PACKAGES["exactly_once"])
    upward = sorted(f"{m} -> {dep}" for m, p in known.items() for dep in imports(m, p, known)
                    if part(dep) != part(m) and LAYERS[part(dep)] >= LAYERS[part(m)])
    assert not upward, "imports against the layers (move the code, or the import, down): " + "; ".join(upward)


def test_the_layer_check_sees_an_upward_import():
    assert LAYERS[part("exactly_once.ops.history")] > LAYERS[part("exactly_once.protocol.pipeline")]
    assert part("exactly_once") == "" and part("exactly_once.airflow.write") == "airflow"
