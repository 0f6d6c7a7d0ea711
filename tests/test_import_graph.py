"""The modules of ``app/`` and ``inference/`` import one another without a circle, counting imports inside
functions too (a deferred import only hides a circle until both modules are loaded in the other order); folders side
by side (neither inside the other) import one another in one direction only; and the engine (``inference/``)
imports nothing of the model store or the app (the README's Layout)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "inference")


def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of PACKAGES (a package is its ``__init__.py``)."""
    files = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of PACKAGES it imports anywhere in its text, inside functions too (``from pkg import
    module`` names the module)."""
    files = module_files()
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


def folder_of(module: str, files: dict[str, Path]) -> str:
    """The package a module lies in (a package's ``__init__`` lies in the package itself)."""
    return module if files[module].name == "__init__.py" else module.rpartition(".")[0]


def folders_both_ways(graph: dict[str, set[str]], files: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """Pairs of folders side by side (neither is or holds the other) that import each other: (a, b) with a < b ->
    the imports between them, e.g. ``["app.backends.remote -> app.server.binding", ...]``."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, imported in graph.items():
        for other in imported:
            a, b = folder_of(module, files), folder_of(other, files)
            if not (a == b or b.startswith(a + ".") or a.startswith(b + ".")):
                edges.setdefault((a, b), []).append(f"{module} -> {other}")
    return {(a, b): edges[(a, b)] + edges[(b, a)] for a, b in edges if a < b and (b, a) in edges}


def test_the_circle_finder_sees_a_deferred_import_circle():
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_holds_both_packages_and_the_imports_inside_functions():
    graph = import_graph()
    expected = {"app.cli.commands", "app.cli.serve", "app.backends.worker", "inference.engine", "inference.models.store"}
    assert expected <= graph.keys()
    assert "app.cli.options" in graph["app.cli.serve"] and "app.cli.serve" in graph["app.cli.commands"]
    assert "inference.models.inspect" in graph["inference.models.store"]  # imported inside write_manifest only


def test_no_module_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_the_folder_finder_sees_two_folders_importing_each_other():
    files = {name: Path(f"{name.replace('.', '/')}.py") for name in ("x.a.m", "x.b.n", "x.o", "x.a.p")}
    graph = {"x.a.m": {"x.b.n"}, "x.b.n": {"x.a.p"}, "x.o": {"x.a.m"}, "x.a.p": {"x.o"}}
    assert folders_both_ways(graph, files) == {("x.a", "x.b"): ["x.a.m -> x.b.n", "x.b.n -> x.a.p"]}


def test_folders_side_by_side_import_one_another_one_way_only():
    assert folders_both_ways(import_graph(), module_files()) == {}


def test_the_engine_imports_nothing_of_the_model_store_or_the_app():
    files = module_files()
    engine = [m for m in files if folder_of(m, files) == "inference"]
    assert "inference.engine" in engine
    graph = import_graph()
    assert [(m, o) for m in engine for o in graph[m] if o.startswith(("inference.models", "app"))] == []
