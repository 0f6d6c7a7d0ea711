"""The feedback of a copy button, as in LM Studio and Jan: after a copy its text says "Copied" for a moment, then
comes back."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QAbstractButton

#: How long a copy button says "Copied", in milliseconds.
COPIED_MS = 1500


class CopiedFeedback(QObject):
    """Makes ``button`` say "Copied" for COPIED_MS after each :meth:`flash`, then its own text again (a copy while
    it says so starts the moment again). A child of the button: it goes with it."""

    def __init__(self, button: QAbstractButton):
        super().__init__(button)
        self._button = button
        self._text = button.text()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(COPIED_MS)
        self._timer.timeout.connect(self._restore)

    def flash(self) -> None:
        """Say "Copied" on the button for COPIED_MS."""
        self._button.setText("Copied")
        self._timer.start()

    def _restore(self) -> None:
        self._button.setText(self._text)
