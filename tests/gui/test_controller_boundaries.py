"""The window's controllers are built without the window (issue 37): ``MainWindow`` builds the widgets and the
controllers and wires them; no controller imports ``main_window`` or receives the window, so each names the widgets
and collaborators it drives in its signature, and a widget renamed in the window fails at import or construction,
not at run time.

Read from the source (``ast``), without building a window: each check fails on the code this issue replaced (the
controllers took ``window`` and read ``self.window.<widget>`` about 140 times).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import app.gui

#: The window's controllers: module -> class.
CONTROLLERS = {
    "model_loader": "ModelLoader",
    "reply_controller": "ReplyController",
    "server_control": "ServerControl",
    "conversations": "Conversations",
    "model_choice": "ModelChoice",
    "chat_controller": "ChatController",
}
GUI = Path(app.gui.__file__).parent


def _tree(module: str) -> ast.Module:
    return ast.parse((GUI / f"{module}.py").read_text(encoding="utf-8"))


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


@pytest.mark.parametrize("module", CONTROLLERS)
def test_no_controller_imports_the_window(module):
    imported = set()
    for node in ast.walk(_tree(module)):  # (deferred imports, inside functions, included)
        if isinstance(node, ast.ImportFrom):
            imported |= {node.module or ""} | {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    assert not {name for name in imported if name.rsplit(".", 1)[-1] in ("main_window", "MainWindow")}


@pytest.mark.parametrize("module", CONTROLLERS)
def test_no_controller_receives_the_window(module):
    tree = _tree(module)
    init = next(node for node in _class(tree, CONTROLLERS[module]).body
                if isinstance(node, ast.FunctionDef) and node.name == "__init__")  # fmt: skip
    arguments = init.args.posonlyargs + init.args.args + init.args.kwonlyargs
    assert all(arg.annotation is not None for arg in arguments[1:]), "every parameter is typed"
    assert not [arg.arg for arg in arguments if "window" in arg.arg.lower()]
    assert not [ast.unparse(arg.annotation) for arg in arguments[1:] if "MainWindow" in ast.unparse(arg.annotation)]
    reached = {
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
        and node.attr in ("window", "_window")
    }  # fmt: skip
    assert not reached


def test_the_window_builds_each_controller_passing_itself_only_as_the_qt_parent():
    tree = _tree("main_window")
    built = [
        node for node in ast.walk(_class(tree, "MainWindow"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CONTROLLERS.values()
    ]  # fmt: skip
    assert sorted(call.func.id for call in built) == sorted(CONTROLLERS.values())  # each built once, by the window
    for call in built:
        positional = [arg for arg in call.args if isinstance(arg, ast.Name) and arg.id == "self"]
        as_keyword = [kw.arg for kw in call.keywords if isinstance(kw.value, ast.Name) and kw.value.id == "self"]
        assert not positional and as_keyword in ([], ["parent"]), ast.unparse(call)
