"""Helpers shared by the GUI tests."""

from __future__ import annotations


def send_and_wait(qtbot, window, text: str, compare: bool = False, timeout_ms: int = 120_000):
    """Send a message through the composer and wait for the reply to end; returns the final Message."""
    window.composer.set_text(text)
    with qtbot.waitSignal(window.generation_finished, timeout=timeout_ms) as blocker:
        (window.composer.submit_compare if compare else window.composer.submit)()
    return blocker.args[0]


def two_chats(window, first: str, second: str) -> tuple[int, int]:
    """Two saved chats of one user message each (``first`` created first, so ``second`` is the newest), listed in
    ``window``; returns their ids."""
    db = window.db
    ids = db.create_conversation(first), db.create_conversation(second)
    db.add_message(ids[0], "user", "Hello")
    db.add_message(ids[1], "user", "Hi")
    window.conversations.refresh()
    return ids


def find_dialog(window, object_name: str):
    """The open, visible dialog (message box) with this object name, or None."""
    from PySide6.QtWidgets import QDialog

    for dialog in window.findChildren(QDialog):
        if dialog.objectName() == object_name and dialog.isVisible():
            return dialog
    return None


class ControlTracker:
    """Records which buttons of a window were clicked and which of its actions were triggered.

    A button is identified by the widget that owns it (a message bubble, the composer...) and its text, so the
    "Copy" buttons of all bubbles count as one control; :meth:`unclicked` lists the controls never used.
    """

    OWNERS = ("MessageWidget", "ConversationList", "Composer", "ChatView", "SettingsPane", "LiveGraph")

    def __init__(self, window):
        from PySide6.QtCore import QEvent, QObject

        self.window = window
        self.clicked: set[str] = set()
        self.triggered: set[str] = set()
        tracker = self

        class Filter(QObject):
            def eventFilter(self, watched, event):  # noqa: N802
                from PySide6.QtWidgets import QAbstractButton

                if event.type() == QEvent.Type.MouseButtonRelease and isinstance(watched, QAbstractButton):
                    tracker.clicked.add(tracker.key(watched))
                return False

        self._filter = Filter()
        from PySide6.QtWidgets import QApplication

        QApplication.instance().installEventFilter(self._filter)
        for action in self.actions():
            action.triggered.connect(lambda *_, a=action: self.triggered.add(a.text()))

    def key(self, button) -> str:
        owner = button.parent()
        while owner is not None and type(owner).__name__ not in self.OWNERS:
            owner = owner.parent()
        return f"{type(owner).__name__ if owner else 'MainWindow'}:{button.objectName() or button.text()}"

    def controls(self) -> set[str]:
        from PySide6.QtWidgets import QAbstractButton

        return {self.key(b) for b in self.window.findChildren(QAbstractButton) if b.isVisibleTo(self.window) and b.text()}

    def unclicked(self) -> set[str]:
        return self.controls() - self.clicked

    def untriggered(self) -> set[str]:
        return {a.text() for a in self.actions()} - self.triggered

    def actions(self) -> list:
        """The window's actions, and the conversation list's (Delete lives there)."""
        return self.window.actions() + self.window.conversation_list.list.actions()

    def remove(self) -> None:
        from PySide6.QtWidgets import QApplication

        QApplication.instance().removeEventFilter(self._filter)


def click(qtbot, widget) -> None:
    """A real left click in the middle of a widget."""
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtWidgets import QCheckBox

    assert widget.isVisible() and widget.isEnabled(), f"{widget} ({getattr(widget, 'text', lambda: '')()}) is not clickable"
    if isinstance(widget, QCheckBox):  # a stretched check box reacts on its box and label, at the left
        qtbot.mouseClick(widget, Qt.MouseButton.LeftButton, pos=QPoint(8, widget.height() // 2))
    else:
        qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def activate(qtbot, window) -> None:
    """Make ``window`` the active window (keyboard shortcuts only reach the active window)."""
    from PySide6.QtWidgets import QApplication

    window.activateWindow()
    window.raise_()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=3000)


def accept_file_dialog(dialog, path) -> None:
    """Type ``path`` into a (Qt, non-native) file dialog's name box and accept it, as a user would."""
    from PySide6.QtWidgets import QLineEdit

    name_box = dialog.findChild(QLineEdit, "fileNameEdit")
    name_box.setText(str(path))
    dialog.accept()


def drawn_axis_labels(axis) -> list[tuple]:
    """The labels a pyqtgraph axis draws now, as (rect in the axis's coordinates, text): pyqtgraph leaves out those
    that would not fit."""
    from PySide6.QtGui import QImage, QPainter

    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        _axis, _ticks, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(rect, text) for rect, _flags, text in texts]


def reset_to_defaults(pane) -> None:
    """Press the settings pane's "Reset to defaults" and answer its question with Reset."""
    from PySide6.QtWidgets import QMessageBox

    pane.reset_button.click()
    (box,) = [box for box in pane.findChildren(QMessageBox, "confirmReset") if box.isVisible()]
    box.button(QMessageBox.StandardButton.Reset).click()
