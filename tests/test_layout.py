"""The package's layout: its layers point one way (`cli/` -> the public API -> `serving/`, `training/`,
`publishing/` -> `decoding/`, `data/` -> `registry.py` -> `models/`, shared small modules at the bottom), counting
every import, inside functions too; `models/` (shipped into saved folders) imports nothing of the package outside
itself; no library module imports `cli/` or `argparse`; no import cycle between modules; no module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hf_bahdanau"
MOST_LINES = 400
# Each part of the package (a sub-package or a top-level module; "" is the package's own `__init__.py`, the public
# API) by rank: a part imports parts of lower rank only, or of its own rank where the parts' graph has no cycle. A
# part not named here is a shared small thing at the bottom (errors, choices, JSON files, language names, ...).
RANKS = {"cli": 6, "": 5, "serving": 4, "training": 4, "publishing": 4, "decoding": 3, "data": 3, "registry": 2}
SHIPPED = "models"  # copied into every saved folder: it has nothing else of the package


def module_names() -> dict[str, Path]:
    """Each module of the package by dotted name (a package by its `__init__.py`)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(source: str, package: str, modules: dict[str, Path]) -> set[str]:
    """Every module a file of `package` with this `source` imports anywhere (at load, inside functions, for type
    checking): the package's as dotted names, others by their names."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
    return targets


def imported_names(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module the module `name` (its file at `path`) imports anywhere."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_of(path.read_text(encoding="utf-8"), package, modules)


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file, with the packages above each (their
    `__init__.py` runs first) but not those above `name` itself (already running)."""
    loaded = set()
    for target in imported_names(name, path, modules):
        parts = target.split(".")
        for end in range(2, len(parts) + 1):  # hf_bahdanau itself is above every module
            module = ".".join(parts[:end])
            if module in modules and module != name and not name.startswith(module + "."):
                loaded.add(module)
    return loaded


def part(module: str) -> str:
    """The part of the package a module belongs to: `hf_bahdanau.decoding.search` -> `decoding`."""
    return module.split(".")[1] if "." in module else ""


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """The imports that run against the layers: to a part of higher rank, out of `models/`, or between parts of one
    rank that import each other (directly or around a loop)."""
    found = []
    parts: dict[str, set[str]] = {}
    for module, imported in graph.items():
        for other in imported:
            here, there = part(module), part(other)
            if here == there:
                continue
            parts.setdefault(here, set()).add(there)
            parts.setdefault(there, set())
            if here == SHIPPED or RANKS.get(there, 0) > RANKS.get(here, 0):
                found.append(f"{module} -> {other}")
    found.extend(" <-> ".join(group) for group in cycles(parts))
    return sorted(found)


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


def test_an_import_inside_a_function_or_for_type_checking_counts():
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..serving import app\n"
        "def load():\n    from hf_bahdanau.cli.arguments import x\n    import argparse\n"
    )
    modules = {"hf_bahdanau.cli.arguments": PACKAGE, "hf_bahdanau.serving.app": PACKAGE}
    found = imports_of(source, "hf_bahdanau.decoding", modules)
    assert {"hf_bahdanau.cli.arguments", "hf_bahdanau.serving.app", "argparse"} <= found


def test_upward_imports_finds_an_import_up_one_out_of_models_and_a_loop_of_parts():
    graph = {"hf_bahdanau.decoding.x": {"hf_bahdanau.cli.arguments"}, "hf_bahdanau.cli.arguments": set()}
    assert upward_imports(graph) == ["hf_bahdanau.decoding.x -> hf_bahdanau.cli.arguments"]
    graph = {"hf_bahdanau.models.a": {"hf_bahdanau.errors"}, "hf_bahdanau.errors": set()}
    assert upward_imports(graph) == ["hf_bahdanau.models.a -> hf_bahdanau.errors"]
    graph = {
        "hf_bahdanau.training.a": {"hf_bahdanau.publishing.b"},
        "hf_bahdanau.publishing.b": {"hf_bahdanau.training.c"},
        "hf_bahdanau.training.c": set(),
    }
    assert upward_imports(graph) == ["publishing <-> training"]
    assert upward_imports({"hf_bahdanau.cli.a": {"hf_bahdanau.decoding.b"}, "hf_bahdanau.decoding.b": set()}) == []


def test_the_layers_point_one_way():
    assert upward_imports(import_graph()) == []


def test_no_library_module_imports_argparse():
    modules = module_names()
    library = {name: path for name, path in modules.items() if part(name) != "cli"}
    assert sorted(name for name, path in library.items() if "argparse" in imported_names(name, path, modules)) == []


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_no_module_is_over_400_lines():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in module_names().items()}
    assert {name: lines for name, lines in sizes.items() if lines > MOST_LINES} == {}
