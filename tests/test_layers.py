"""Layers point down (issue 40, STYLE.md): ``_core < _inputs < _terms < _train, _serve < _search,
_analysis < _codesign, _launch < cli``.  A module imports only from its own layer or a layer listed
before it; two layers at one level (``_train`` and ``_serve``, ``_search`` and ``_analysis``,
``_codesign`` and ``_launch``) never import each other; and no two diffcost modules import each
other, directly or round a longer loop, inside a layer too.  Every import counts: at module level,
inside a function, under ``if TYPE_CHECKING``, relative or absolute, so a cycle cannot be hidden by
moving its import into a function.

Read from the source with :mod:`ast` (nothing is imported).  ``python tests/test_layers.py``
prints every finding and the counts."""

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

PACKAGE = "diffcost"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# the level of each layer (a package directly under diffcost/); equal levels may not meet
LEVELS = {
    "_core": 0,
    "_inputs": 1,
    "_terms": 2,
    "_train": 3,
    "_serve": 3,
    "_search": 4,
    "_analysis": 4,
    "_codesign": 5,
    "_launch": 5,
    "cli": 6,
}
# ``diffcost/__init__.py`` (the public facade) and ``__main__.py`` sit above every layer
TOP = max(LEVELS.values()) + 1


class Import(NamedTuple):
    """One imported diffcost module: where the import statement is and what it brings in."""

    source: str  # dotted name of the importing module
    target: str  # dotted name of the imported diffcost module
    file: str  # path relative to the repository root
    line: int


def module_name(path: Path, root: Path) -> str:
    """``diffcost/_core/smooth.py`` -> ``diffcost._core.smooth``; a package's ``__init__.py`` is
    the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str | None:
    """The layer a module belongs to (``diffcost._serve.cost`` -> ``_serve``); None above them."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LEVELS else None


def level(module: str) -> int:
    name = layer(module)
    return TOP if name is None else LEVELS[name]


def _resolve(name: str, modules: set[str]) -> str | None:
    """The diffcost module that ``name`` (a module or a name inside one) is found in."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(
    source: str, text: str, modules: set[str], is_package: bool, file: str
) -> Iterator[Import]:
    """Every diffcost module that the source code ``text`` of module ``source`` imports, at any
    depth of its syntax tree.  ``from pkg import name`` imports the module ``pkg.name`` when there
    is one, and ``pkg`` otherwise."""
    package = source if is_package else source.rpartition(".")[0]
    for node in ast.walk(ast.parse(text, filename=file)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != source:
                yield Import(source, target, file, node.lineno)


def collect(root: Path = ROOT) -> list[Import]:
    """Every import of one diffcost module by another, in the package under ``root``."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    found = []
    for path in paths:
        file = str(path.relative_to(root.parent))
        source = module_name(path, root)
        found.extend(
            imports_of(source, path.read_text(), modules, path.name == "__init__.py", file)
        )
    return list(dict.fromkeys(found))  # ``from x import a, b``: one import of x


def violation(edge: Import) -> str | None:
    """Why ``edge`` breaks the layering (None when it does not)."""
    src, dst = layer(edge.source), layer(edge.target)
    if src is None or src == dst:
        return None
    if level(edge.target) > level(edge.source):
        return f"upward import: {src} (level {level(edge.source)}) imports {dst or PACKAGE} "
    if level(edge.target) == level(edge.source):
        return f"sideways import: {src} and {dst} are one level and may not import each other"
    return None


def violations(edges: list[Import]) -> list[str]:
    return sorted(
        f"{edge.file}:{edge.line}: {edge.source} imports {edge.target}: {reason}"
        for edge in edges
        if (reason := violation(edge)) is not None
    )


def cycles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module in the import graph (Tarjan),
    each sorted, the list sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth <= number of modules (~150)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(component: list[str], edges: list[Import]) -> str:
    """A cycle with the import lines that close it."""
    members = set(component)
    inside = sorted(
        f"{e.file}:{e.line} ({e.source} -> {e.target})"
        for e in edges
        if e.source in members and e.target in members
    )
    return "import cycle between " + ", ".join(component) + ":\n    " + "\n    ".join(inside)


# -- the rules on the real package ---------------------------------------------------------------


def test_the_package_is_read():
    edges = collect()
    # 84 of the 104 files import another diffcost module (empty ``__init__.py`` files do not)
    assert len({e.source for e in edges}) > 75
    assert {layer(e.source) for e in edges} >= set(LEVELS)
    assert ("diffcost._serve.kv", "diffcost._inputs.reserve") in {e[:2] for e in edges}


def test_layers_point_down():
    found = violations(collect())
    assert not found, "\n".join(found)


def test_no_import_cycles():
    edges = collect()
    found = cycles(edges)
    assert not found, "\n".join(describe(c, edges) for c in found)


# -- the checker itself (so it cannot pass for want of looking) -----------------------------------

_MODULES = {
    "diffcost",
    "diffcost._core",
    "diffcost._core.smooth",
    "diffcost._inputs",
    "diffcost._inputs.loader",
    "diffcost._terms",
    "diffcost._terms.reserve",
    "diffcost._train",
    "diffcost._train.problems",
    "diffcost._train.rules",
    "diffcost._serve",
    "diffcost._serve.cost",
}


def _edges(source: str, text: str) -> list[Import]:
    return list(imports_of(source, text, _MODULES, False, source.replace(".", "/") + ".py"))


def test_an_upward_import_inside_a_function_is_flagged():
    text = "import jax\n\ndef f():\n    from .._terms.reserve import runtime_reserve_bytes\n"
    found = violations(_edges("diffcost._inputs.loader", text))
    assert found == [
        "diffcost/_inputs/loader.py:4: diffcost._inputs.loader imports diffcost._terms.reserve: "
        "upward import: _inputs (level 1) imports _terms "
    ]


def test_a_sideways_absolute_import_is_flagged():
    found = violations(_edges("diffcost._serve.cost", "from diffcost._train import problems\n"))
    assert len(found) == 1 and "sideways import: _serve and _train" in found[0]
    assert found[0].startswith("diffcost/_serve/cost.py:1:")


def test_importing_the_facade_from_a_layer_is_flagged():
    found = violations(_edges("diffcost._core.smooth", "import diffcost\n"))
    assert len(found) == 1 and "upward import: _core (level 0) imports diffcost" in found[0]


def test_downward_and_same_layer_imports_pass():
    text = "from .._core import smooth\nfrom . import rules\nimport diffcost._inputs.loader\n"
    edges = _edges("diffcost._train.problems", text)
    assert {e.target for e in edges} == {
        "diffcost._core.smooth",
        "diffcost._train.rules",
        "diffcost._inputs.loader",
    }
    assert violations(edges) == []


def test_a_cycle_through_a_function_local_import_is_found():
    edges = _edges("diffcost._train.problems", "from .._core.smooth import EXACT\n") + _edges(
        "diffcost._core.smooth", "def f():\n    from .._train.problems import x\n"
    )
    assert cycles(edges) == [["diffcost._core.smooth", "diffcost._train.problems"]]
    assert "diffcost/_core/smooth.py:2" in describe(cycles(edges)[0], edges)


if __name__ == "__main__":
    root = Path(sys.argv[1]) / PACKAGE if len(sys.argv) > 1 else ROOT
    all_edges = collect(root)
    bad = violations(all_edges)
    loops = cycles(all_edges)
    print(*bad, sep="\n")
    print(*(describe(c, all_edges) for c in loops), sep="\n")
    print(f"{len(bad)} layer violations, {len(loops)} import cycles ({len(all_edges)} imports)")
