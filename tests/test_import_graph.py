"""The app's modules import one another without a circle, counting imports inside functions too (a deferred import
only hides a circle until both modules are loaded in the other order)."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the app modules it imports anywhere in its text (``from pkg import module`` names the module)."""
    files = {module_name(path): path for path in APP.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                imported |= {f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        graph[name] = {module for module in imported if module in files and module != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle once: a path from a module back to itself (depth-first search, modules in order)."""
    found, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph[module]):
            if imported in path:
                circle = path[path.index(imported):]
                if not any(set(circle) == set(known) for known in found):
                    found.append(circle + [imported])
            elif imported not in done:
                visit(imported, path + [imported])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    return found


def test_the_circle_finder_sees_a_deferred_import_circle():
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_app_imports_itself_through_others():
    graph = import_graph()
    assert {"app.cli.commands", "app.cli.serve", "app.cli.options", "app.backends.worker"} <= graph.keys()
    assert "app.cli.options" in graph["app.cli.serve"] and "app.cli.serve" in graph["app.cli.commands"]
    assert circles(graph) == []
