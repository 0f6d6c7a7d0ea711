"""Draft highlighting in a code block leaves a line's indentation unpainted (newcomer trial: drafted tokens that
start with a new line's spaces painted blocks of indentation, read as the syntax highlighting painting whitespace)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCursor

from app.gui import theme
from app.gui.widgets.code_block import CodeBlock, without_indentation

CODE = "def f(x):\n    if x:  # 🐱\n\treturn [\n            1,\n        ]\n    return 0\n"


@pytest.fixture
def block(qtbot):
    from app.gui.application import create_application

    create_application()
    block = CodeBlock()
    qtbot.addWidget(block)
    return block


def _drafted(block: CodeBlock) -> str:
    """The characters of the block's code painted in the draft colour (a space each for the others)."""
    document, draft = block.text.document(), QColor(theme.current().draft)
    cursor = QTextCursor(document)
    painted, position = [], 0
    for character in document.toPlainText():
        position += 2 if ord(character) > 0xFFFF else 1  # (Qt positions count UTF-16 units)
        cursor.setPosition(position)  # (charFormat: the character before the cursor)
        brush = cursor.charFormat().background()
        drafted = brush.style() != Qt.BrushStyle.NoBrush and brush.color() == draft
        painted.append(character if drafted or character == "\n" else "·")
    return "".join(painted)


def test_drafted_code_is_painted_but_not_its_indentation(block):
    block.set_code(CODE, "python", True, [[9, len(CODE)]], True)  # every token after "def f(x):" drafted
    painted = _drafted(block).split("\n")
    assert painted[1] == "····if x:  # 🐱"  # the emoji (two UTF-16 units) shifts nothing after it
    assert painted[2] == "·return ["  # a tab too
    assert painted[3:6] == ["············1,", "········]", "····return 0"]
    assert painted[0] == "·········"  # before the span: nothing


def test_without_indentation_splits_a_span_at_each_lines_indentation():
    code = "a = [\n    1,\n\t  2]\n"
    assert [code[s:e] for s, e in without_indentation(code, 0, len(code))] == ["a = [\n", "1,\n", "2]\n"]
    assert without_indentation(code, 6, 10) == []  # indentation only
    assert [code[s:e] for s, e in without_indentation(code, 8, 12)] == ["1,"]  # starting inside an indentation
    assert [code[s:e] for s, e in without_indentation(code, 2, 4)] == ["= "]  # spaces inside a line stay drafted
