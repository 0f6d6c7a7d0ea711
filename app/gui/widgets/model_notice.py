"""A notice about the models above the chat: one line of text, an optional action button, and a close button.

The window uses it for what concerns the model choice and should not go unnoticed, but needs no dialog: a
conversation answered with another model than the one loaded, a draft model that made replies slower.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget


class ModelNotice(QFrame):
    """The notice bar (object name ``modelNotice``; hidden while there is nothing to say).

    Attributes:
        kind: what the notice shown is about (the caller's key, e.g. ``"conversation"``), or "" when hidden.
        about: what exactly it concerns (the caller's key, e.g. a conversation and two model names).
        text: its label; action: its action button (hidden when the notice has none); close_button: dismisses it.

    Signals:
        dismissed(kind, about): the user closed the notice with its close button.
    """

    dismissed = Signal(str, str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("modelNotice")  # (its colours: the theme's style sheet, ``app.gui.theme``)
        self.kind = ""
        self.about = ""
        self._callback: Callable[[], None] | None = None
        self.setAccessibleName("Notice")
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.action = QPushButton()
        self.action.setObjectName("noticeAction")
        self.action.clicked.connect(self._act)
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAccessibleName("Dismiss this notice")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self._closed)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 6, 4)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.action)
        layout.addWidget(self.close_button)
        self.setVisible(False)

    def show_notice(
        self, kind: str, text: str, action: str = "", callback: Callable[[], None] | None = None, about: str = ""
    ) -> None:
        """Show ``text`` (replacing any notice), with a button labelled ``action`` that calls ``callback``."""
        self.kind, self.about = kind, about
        self.text.setText(text)
        self._callback = callback
        self.action.setText(action)
        self.action.setVisible(bool(action and callback))
        self.setVisible(True)

    def dismiss(self, kind: str | None = None) -> None:
        """Hide the notice (only if it is about ``kind``, when given)."""
        if kind is not None and kind != self.kind:
            return
        self.kind, self.about = "", ""
        self._callback = None
        self.setVisible(False)

    def _closed(self) -> None:
        kind, about = self.kind, self.about
        self.dismiss()
        self.dismissed.emit(kind, about)

    def _act(self) -> None:
        callback = self._callback
        self.dismiss()
        if callback is not None:
            callback()
