"""A one-line label that cuts its text with "…" to fit, instead of demanding the width of the whole text."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    """One line of text, elided at the right when the label is narrower; the whole text is the tool tip.

    A plain QLabel's minimum width is its text's width, so a long title or statistics line would widen its
    column (and squeeze the others); a word-wrapped one costs a second layout pass (height for width).
    """

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self._full = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Show ``text`` (elided to the width)."""
        self._full = text
        self.setToolTip(text)
        self._elide()

    def text(self) -> str:
        """The whole text, even when it is shown cut."""
        return self._full

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Re-elide for the new width."""
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width(), 40))
        if shown != super().text():
            super().setText(shown)
