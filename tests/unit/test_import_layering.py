"""memtier's structure, read from its imports (every import statement, inside functions and
``TYPE_CHECKING`` blocks too): imports run one way, with no circle among memtier's modules,
and neither the master nor the table servers import the other (what they exchange lives
below both, in :mod:`memtier.exchange`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "memtier"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool, known: dict[str, Path]) -> Iterator[str]:
    """The memtier modules one import statement imports."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in known)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        for alias in node.names:
            name = f"{base}.{alias.name}"
            yield name if name in known else base


def import_graph() -> dict[str, set[str]]:
    """Module -> the memtier modules it imports (itself left out)."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = {t for node in ast.walk(tree)
                   for t in _imported(node, module, path.name == "__init__.py", known)}
        graph[module] = {t for t in targets if t in known and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected sets of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_no_module_imports_itself_through_others() -> None:
    assert circles(import_graph()) == []


def test_the_master_and_the_table_servers_do_not_import_each_other() -> None:
    crossing = sorted(f"{m} -> {t}" for m, targets in import_graph().items() for t in targets
                      if {_package(m), _package(t)} == {"master", "tableserver"})
    assert crossing == []


def test_the_checks_see_a_circle_and_a_crossing() -> None:
    """The checks can fail: a made-up circle is found, and the real graph has edges."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "memtier.exchange" in graph["memtier.master.master"]
    assert "memtier.exchange" in graph["memtier.tableserver.base"]
