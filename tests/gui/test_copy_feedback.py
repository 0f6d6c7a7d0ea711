"""Copy buttons say "Copied" for a moment after copying (as LM Studio's and Jan's do), then their text comes back."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import activate, click
from PySide6.QtGui import QGuiApplication

from app.gui.widgets.code_block import CodeBlock
from app.gui.widgets.copy_feedback import COPIED_MS

REPLY = "Here it is:\n\n```python\nprint('hello')\n```\n\nRun it."


def _copied_then_back(qtbot, button, text: str) -> None:
    """``button`` says "Copied" now and ``text`` again after COPIED_MS."""
    assert button.text() == "Copied"
    qtbot.wait(COPIED_MS // 2)
    assert button.text() == "Copied"
    qtbot.waitUntil(lambda: button.text() == text, timeout=COPIED_MS + 2000)


def test_message_and_code_copy_buttons_copy_and_say_copied_for_a_moment(qtbot, make_window):
    window = make_window(FAST, start=False)
    conversation = window.db.create_conversation("Code")
    window.db.add_message(conversation, "user", "Print hello in Python")
    window.db.add_message(conversation, "assistant", REPLY)
    window.conversations.refresh()
    window.conversations.open(conversation)
    activate(qtbot, window)
    qtbot.waitUntil(lambda: len(window.chat_view.message_widgets()) == 2, timeout=3000)
    user, reply = window.chat_view.message_widgets()
    qtbot.waitUntil(lambda: user.copy_button.isVisible() and reply.copy_button.isVisible(), timeout=3000)  # laid out
    clipboard = QGuiApplication.clipboard()
    click(qtbot, user.copy_button)
    assert clipboard.text() == "Print hello in Python"
    _copied_then_back(qtbot, user.copy_button, "Copy")
    click(qtbot, reply.copy_button)
    assert clipboard.text() == REPLY
    assert reply.copy_button.text() == "Copied" and user.copy_button.text() == "Copy"  # only the button pressed
    _copied_then_back(qtbot, reply.copy_button, "Copy")
    (block,) = reply.findChildren(CodeBlock)
    qtbot.waitUntil(block.copy_button.isVisible, timeout=3000)
    click(qtbot, block.copy_button)
    assert clipboard.text() == "print('hello')" == block.code  # the code alone, without its fences
    _copied_then_back(qtbot, block.copy_button, "Copy code")
    # a second copy while it says "Copied" keeps it so for another moment, and its own text comes back after
    click(qtbot, block.copy_button)
    qtbot.wait(COPIED_MS // 2)
    click(qtbot, block.copy_button)
    _copied_then_back(qtbot, block.copy_button, "Copy code")


def test_the_local_servers_copy_url_button_says_copied_for_a_moment(qtbot):
    """Server > Local server…'s Copy URL copied without a word: it says "Copied" as the other copy buttons do."""
    from app.background import TaskSet
    from app.gui.local_server import LocalServer
    from app.gui.server_settings import ServerSettings
    from app.gui.widgets.server_dialog import LocalServerDialog

    errors = []
    server = LocalServer(None, TaskSet(errors.append))  # (None: never started here)
    dialog = LocalServerDialog(server, ServerSettings(port=8123))
    qtbot.addWidget(dialog)
    dialog.show()
    server.url = "http://127.0.0.1:8123/v1"
    server.state_changed.emit("serving", "Serving the loaded model at http://127.0.0.1:8123/v1 (this computer only)")
    assert dialog.copy_button.isEnabled() and dialog.copy_button.text() == "Copy URL"
    click(qtbot, dialog.copy_button)
    assert QGuiApplication.clipboard().text() == "http://127.0.0.1:8123/v1"
    _copied_then_back(qtbot, dialog.copy_button, "Copy URL")
    assert errors == []
