"""A one-line label that cuts its text with "…" to fit, instead of demanding the width of the whole text."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    """One line of text, elided at the right when the label is narrower; the whole text is the tool tip.

    A plain QLabel's minimum width is its text's width, so a long title or statistics line would widen its
    column (and squeeze the others); a word-wrapped one costs a second layout pass (height for width).

    Its text starts at its left edge (indent 0): a QLabel whose style sheet gives it padding has a frame width, and
    Qt then indents its text by half an "x" (4 px), which pushed the last word of a comparison's column heading,
    fitted to the label's width, past its right edge (newcomer trial: "…19 steps at" cut).
    """

    def __init__(self, text: str = "", parent=None):
        super().__init__(parent)
        self.setIndent(0)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self._full = ""
        if text:
            self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Show ``text`` (elided to the width)."""
        if text == self._full:
            return
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


class PartsLabel(ElidedLabel):
    """Text made of parts joined by " · " (a reply's footer), broken into as many lines as the width needs, between
    parts, and a part wider than the label between its words: nothing is cut (only a single word wider than the
    label is elided; the whole text is the tool tip).

    Unlike a word-wrapped QLabel it asks its layout for no second pass (height for width): its height changes only
    when its number of lines does.
    """

    SEPARATOR = " · "

    def lines(self) -> list[str]:
        """The lines shown."""
        return QLabel.text(self).split("\n") if QLabel.text(self) else []

    def _elide(self) -> None:
        """Break the text into lines between its parts (a part too wide between its words), for the label's width."""
        metrics = self.fontMetrics()
        width = max(self.width() - 2, 40)
        lines = _fill(self._full.split(self.SEPARATOR) if self._full else [], self.SEPARATOR, width, metrics)
        shown = "\n".join(lines)
        if shown != QLabel.text(self):
            QLabel.setText(self, shown)
        height = max(1, len(lines)) * metrics.lineSpacing() + 2
        if height != self.height():
            self.setFixedHeight(height)


def _fill(pieces: list[str], separator: str, width: int, metrics) -> list[str]:
    """``pieces`` joined by ``separator`` into lines of at most ``width`` pixels (by ``metrics``, a QFontMetrics),
    greedily; a piece wider than ``width`` is broken between its words the same way (a long notice: "The
    conversation is 9000 tokens, more than the context length…"), and a single word wider than ``width`` elided."""
    lines: list[str] = []
    for piece in pieces:
        candidate = f"{lines[-1]}{separator}{piece}" if lines else piece
        if lines and metrics.horizontalAdvance(candidate) <= width:
            lines[-1] = candidate
        elif metrics.horizontalAdvance(piece) <= width:
            lines.append(piece)
        elif separator != " " and " " in piece:
            lines.extend(_fill(piece.split(" "), " ", width, metrics))
        else:
            lines.append(metrics.elidedText(piece, Qt.TextElideMode.ElideRight, width))
    return lines
