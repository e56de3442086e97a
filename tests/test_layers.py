"""The package's layer order (`aspire.layers.LAYERS`) holds: no import circle between files or between
sub-packages, and no import against the order, counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aspire.layers import LAYERS, layer_of

PACKAGE = Path(__file__).resolve().parents[1] / "aspire"


def import_graph(root: Path) -> dict[str, set[str]]:
    """`{module: {modules it imports}}` for every file under `root` (a package folder), read as text:
    module-level and function-level imports, absolute and relative, `from pkg import module` resolved."""
    files = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_graph(graph: dict[str, set[str]], top: str) -> dict[str, set[str]]:
    """The same imports between sub-packages (`aspire.data -> aspire.evaluate`), the top package left out."""
    def pkg(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        for b in targets:
            if pkg(a) != pkg(b) and top not in (pkg(a), pkg(b)):
                out.setdefault(pkg(a), set()).add(pkg(b))
    return out


def against_order(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def test_no_import_circles_between_files_or_subpackages():
    graph = import_graph(PACKAGE)
    assert circles(graph) == []
    assert circles(package_graph(graph, "aspire")) == []


def test_every_module_has_a_layer_and_imports_only_downwards():
    graph = import_graph(PACKAGE)
    for module in graph:
        layer_of(module)  # raises for a module no layer names
    assert against_order(graph) == []


def test_the_checks_catch_a_circle_an_upward_import_and_a_module_without_a_layer(tmp_path):
    pkg = tmp_path / "aspire"
    for folder in ("data", "evaluate"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "a.py").write_text("def f():\n    from aspire.evaluate.b import g\n")  # inside a function
    (pkg / "evaluate" / "b.py").write_text("from ..data import a\n")
    graph = import_graph(pkg)
    assert circles(graph) == [["aspire.data.a", "aspire.evaluate.b"]]
    assert circles(package_graph(graph, "aspire")) == [["aspire.data", "aspire.evaluate"]]
    assert against_order(graph) == ["aspire.data.a -> aspire.evaluate.b"]
    with pytest.raises(ValueError, match="aspire.nowhere"):
        layer_of("aspire.nowhere.x")


def test_entry_points_hand_over_without_importing_the_command_layer():
    """`python -m aspire.data` / `aspire.encoders` run the commands of `aspire.cli` by module name."""
    graph = import_graph(PACKAGE)
    for main in ("aspire.data.__main__", "aspire.encoders.__main__"):
        assert not any(t.startswith("aspire.cli") for t in graph[main])
        assert "runpy.run_module" in (PACKAGE / main.split(".")[1] / "__main__.py").read_text()
    assert LAYERS[-1] == ("aspire.cli",)
