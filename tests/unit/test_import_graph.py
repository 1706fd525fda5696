"""No import circle anywhere in the package, function-level imports included (issues 31, 45).

Static: each module of ``statestream`` is parsed with :mod:`ast`, every
import statement in it (module level, and inside functions and classes,
wherever it sits: a deferred import is still a dependency of the module)
becomes an edge between ``statestream.*`` modules, and a cycle of that graph
fails the test, printed as ``a -> b -> a``. ``from .pkg import name`` is an
edge to the submodule ``pkg.name`` when there is one, else to the package
``pkg``.

Left out: the imports under ``if TYPE_CHECKING:``. They never run (mypy
alone reads them), and a type named in an annotation does not make one
module need the other: with ``from __future__ import annotations`` the
annotation is a string. There is no other exception.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import statestream

ROOT = Path(statestream.__file__).parent
PACKAGE = "statestream"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _all_imports(nodes: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``nodes``, at any depth, but those that only a
    type checker reads (the body of ``if TYPE_CHECKING:``; its ``else`` runs)."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _all_imports(node.orelse)
        else:
            yield from _all_imports(
                [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
            )


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``statestream.*`` modules that module ``name`` imports, anywhere in it."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _all_imports(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not target.startswith(PACKAGE):
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            if sub in modules:
                out.add(sub)
            elif target in modules:
                out.add(target)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_a_cycle(graph, set(c), c[0]) for c in components]


def _a_cycle(graph: dict[str, set[str]], members: set[str], start: str) -> list[str]:
    """A shortest path ``start -> ... -> start`` inside ``members`` (breadth first)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in no cycle")


def test_the_package_has_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_walk_sees_the_package() -> None:
    graph = import_graph()
    assert "statestream.runtime.plan" in graph
    assert "statestream._config" in graph["statestream.runtime.plan"]
    assert "statestream.runtime.contract" in graph["statestream._run"]
    # a function-level import is an edge: the built-in factories import their runtimes
    assert "statestream.runtime.local" in graph["statestream.runtime.builtin"]
    assert "statestream.runtime.spark" in graph["statestream.runtime.builtin"]
    # an import only a type checker reads is none: the registry is a leaf
    assert "statestream.runtime.contract" not in graph["statestream._runners"]


def test_the_registry_of_runners_is_a_leaf() -> None:
    """The schema asks the registry for the runner names and keys, and the runtimes read
    the schema: the registry imports neither, only the kinds of config values its
    entries declare their keys with, which import nothing of statestream (issue 45)."""
    graph = import_graph()
    assert graph["statestream._runners"] <= {"statestream._errors", "statestream._config_kinds"}
    assert graph["statestream._config_kinds"] == set()


def test_the_walk_counts_imports_inside_functions_and_not_for_type_checking() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import a\n"
        "if TYPE_CHECKING:\n"
        "    import b\n"
        "else:\n"
        "    import c\n"
        "def f():\n"
        "    import d\n"
        "    class K:\n"
        "        def g(self):\n"
        "            from e import x\n"
        "try:\n"
        "    import f\n"
        "except ImportError:\n"
        "    pass\n"
    )
    found = [
        alias.name if isinstance(node, ast.Import) else node.module
        for node in _all_imports(tree.body)
        for alias in node.names[:1]
    ]
    assert found == ["typing", "a", "c", "d", "e", "f"]


def test_a_circle_is_found_and_printed() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_every_subpackage_is_in_the_wheel() -> None:
    """pyproject.toml lists packages by hand: a new subpackage missing there would be
    missing from an installed statestream."""
    import tomllib

    with open(ROOT.parent / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert packages - listed == set()
