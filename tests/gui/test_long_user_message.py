"""A long paste in the chat shows its start and "Show all" (issue 35, item 2: Qt's layout of a whole 197 KB message
costs a warm window about 93 MB, collapsed 25 MB, measured offscreen at 1366x768)."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import click
from PySide6.QtGui import QGuiApplication

from app.gui.history_db import Message
from app.gui.widgets.message_widget import LONG_MESSAGE_CHARS, SHOWN_OF_LONG_MESSAGE, MessageWidget

GENESIS = Path(__file__).resolve().parents[2] / "bench" / "data" / "kjv_genesis.txt"


def _user(text: str) -> Message:
    return Message(id=1, conversation_id=1, position=0, role="user", content=text, created_at=0.0)


def test_a_long_message_shows_its_start_until_show_all(qtbot):
    text = GENESIS.read_text(encoding="utf-8")
    widget = MessageWidget(_user(text))
    qtbot.addWidget(widget)
    widget.show()
    shown = widget.body.toPlainText()
    assert len(shown) < SHOWN_OF_LONG_MESSAGE + 10 and shown.endswith("…")
    assert text.startswith(shown[:-2].rstrip())
    button = widget.show_all_button
    assert button.isVisible() and button.text() == f"Show all ({len(text):,} characters)"
    click(qtbot, button)
    whole = widget.body.toPlainText()
    assert len(whole) > len(text) - 2000 and button.text() == "Show less"  # (line breaks as Qt reads them back)
    click(qtbot, button)
    assert button.text().startswith("Show all")
    widget.copy_text()  # Copy and Edit take the whole message, whatever is shown
    assert QGuiApplication.clipboard().text() == text
    widget.start_editing()
    assert widget.editor.toPlainText() == text and not button.isVisible()
    widget.stop_editing()
    assert button.isVisible()


def test_a_message_up_to_the_limit_is_shown_whole(qtbot):
    text = "word " * (LONG_MESSAGE_CHARS // 5)
    widget = MessageWidget(_user(text))
    qtbot.addWidget(widget)
    widget.show()
    assert widget.show_all_button is None
