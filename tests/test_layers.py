"""The package's layering, read from its source: no import cycle inside ``sdtw/`` (imports
inside functions included), the front door holds no backend's name, and nothing below it
imports it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "sdtw"


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each sdtw module's sdtw imports (modules, not the names they bind)."""
    modules = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {  # (imports under ``if TYPE_CHECKING:`` never run)
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
            for n in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                # ``from pkg import sub`` imports the submodule; ``from mod import name`` mod
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_import_cycle_inside_the_package():
    graph = _imports()
    # (the package's own __init__ re-exports the front door: an edge into it from below
    # would close a cycle through it, so it stays in the graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_nothing_below_the_front_door_imports_it():
    graph = _imports()
    front = {"sdtw", "sdtw.functional", "sdtw.module", "sdtw.alignment", "sdtw.barycenter"}
    below = [n for n in graph if n.startswith(("sdtw.engine", "sdtw.cuda")) or n == "sdtw.ops"]
    assert below
    for name in below:
        assert not graph[name] & front, (name, graph[name] & front)


def test_the_front_door_names_no_backend():
    text = (PKG / "functional.py").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert not re.search(r"(==|!=|in) *\(?[\"'](cpu|cuda|reference)[\"']", text)
