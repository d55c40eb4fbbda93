"""The package's layout: no import cycle between its modules, so that any of them can be imported first, and no
module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hf_bahdanau"
MOST_LINES = 400


def module_names() -> dict[str, Path]:
    """Each module of the package by dotted name (a package by its `__init__.py`)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_at_load(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that importing `name` runs: its imports outside functions and `TYPE_CHECKING` blocks,
    with the packages above each (their `__init__.py` runs first) but not those above `name` itself (already
    running)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit([*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)])
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    loaded = set()
    for target in targets:
        parts = target.split(".")
        for end in range(2, len(parts) + 1):  # hf_bahdanau itself is above every module
            module = ".".join(parts[:end])
            if module in modules and module != name and not name.startswith(module + "."):
                loaded.add(module)
    return loaded


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                connect(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            connect(module)
    return found


def test_cycles_finds_a_cycle_through_a_package_init():
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    modules = module_names()
    graph = {name: imported_at_load(name, path, modules) for name, path in modules.items()}
    assert "hf_bahdanau.cli" in graph["hf_bahdanau.decoding.loading"]  # a package's __init__ counts
    assert cycles(graph) == []


def test_no_module_is_over_400_lines():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in module_names().items()}
    assert {name: lines for name, lines in sizes.items() if lines > MOST_LINES} == {}
