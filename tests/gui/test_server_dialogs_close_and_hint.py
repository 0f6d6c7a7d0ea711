"""The Server menu's dialogs at a newcomer's first look: the Local server dialog closes with a Close button that
leaves the server as it was, and the Remote server dialog's Base URL hint is read whole at its default width."""

from __future__ import annotations

from gui_helpers import click
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAccessible, QGuiApplication
from PySide6.QtWidgets import QDialogButtonBox, QLabel, QWidget

from app.gui.server_settings import ServerSettings
from app.gui.widgets.remote_dialog import RemoteServerDialog
from app.gui.widgets.server_dialog import LocalServerDialog


class ServingServer(QObject):
    """A local server that serves, recording every start or stop asked of it."""

    state_changed = Signal(str, str)

    def __init__(self):
        super().__init__()
        self.state = "serving"
        self.text = "Serving the loaded model at http://127.0.0.1:8000/v1 (this computer only)"
        self.url = "http://127.0.0.1:8000/v1"
        self.asked: list[str] = []

    def start(self, port: int, api_key: str = "", allow_other_computers: bool = False) -> None:
        """Record a start."""
        self.asked.append("start")

    def stop(self) -> None:
        """Record a stop."""
        self.asked.append("stop")


def test_close_hides_the_local_server_dialog_and_leaves_the_server_serving(qtbot):
    server = ServingServer()
    dialog = LocalServerDialog(server, ServerSettings())
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    close = dialog.buttons.button(QDialogButtonBox.StandardButton.Close)
    click(qtbot, close)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    assert server.asked == [] and server.state == "serving"
    assert dialog.switch.isChecked()


def test_the_remote_base_url_hint_is_read_whole_at_the_dialogs_default_size(qtbot):
    parent = QWidget()
    qtbot.addWidget(parent)
    dialog = RemoteServerDialog(parent, spawn=lambda coroutine: None)
    dialog.resize(dialog.sizeHint())
    dialog.show()
    qtbot.waitExposed(dialog)
    field = dialog.url
    room = field.contentsRect().width() - field.textMargins().left() - field.textMargins().right() - 4  # Qt's side margins
    assert field.fontMetrics().horizontalAdvance(field.placeholderText()) <= room, field.placeholderText()
    notes = [
        label
        for label in dialog.findChildren(QLabel)
        if label.isVisible() and "OpenVINO Model Server" in label.text() and "http://HOST:8000/v3" in label.text()
    ]
    assert len(notes) == 1, [label.text() for label in dialog.findChildren(QLabel)]
    note = notes[0]
    assert note.fontMetrics().horizontalAdvance(note.text()) <= note.contentsRect().width()
    assert "/v3" not in field.placeholderText()


def test_the_local_server_copy_button_says_what_it_copies_and_the_url_stays_whole(qtbot):
    """A screen reader (and a newcomer) read the button by the Base URL field as just "Copy": it says what it
    copies, and the wider button leaves a network URL whole at the dialog's default size (well within 1366x768)."""
    server = ServingServer()
    server.url = "http://192.168.100.200:65535/v1"  # (allow other computers: the longest URL it shows)
    dialog = LocalServerDialog(server, ServerSettings())
    qtbot.addWidget(dialog)
    dialog.resize(dialog.sizeHint())
    dialog.show()
    qtbot.waitExposed(dialog)
    button = dialog.copy_button
    assert QAccessible.queryAccessibleInterface(button).text(QAccessible.Text.Name) == "Copy URL"
    assert button.toolTip() == "Copy the base URL to the clipboard"
    assert button.width() >= button.sizeHint().width() and dialog.width() <= 1366 and dialog.height() <= 768
    field = dialog.url
    room = field.contentsRect().width() - field.textMargins().left() - field.textMargins().right() - 4  # Qt's side margins
    assert field.text() == server.url and field.fontMetrics().horizontalAdvance(field.text()) <= room
    click(qtbot, button)
    assert QGuiApplication.clipboard().text() == server.url
