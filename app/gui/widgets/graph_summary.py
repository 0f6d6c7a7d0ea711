"""The live graph's summary: the numbers of the runs drawn, or of the last reply, in at most two lines where the
room is short.

Rules:
- Its height is its lines' and never less than two, and changes only when its number of lines does: re-laying out
  the plot below costs ~10 ms and the summary changes with every token.
- At 1366x768 the side panel has no height to spare: a third line is taken from the settings below it. So it is
  given its texts fullest first and shows the fullest that fits two lines at its width, with the whole first one
  in its tooltip; at a new width it picks again.
- In the drawn runs' summary a number and its words wrap whole (:func:`whole_groups`): a rate and its unit ("65.6
  tokens/s": the README's screenshot broke "65.6 tokens/" from its "s" at the slash) and the drafts accepted
  ("drafts: 29% accepted", the footer's words); the graph joins the context's numbers so itself.
"""

from __future__ import annotations

import math
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QWidget

from .wrapped_label import WrappedLabel

#: Groups of a number and its words that the summary keeps on one line (see the module doc).
_GROUPS = re.compile(r"\d[\d,.]* tokens/s|drafts: \d+% accepted")


def whole_groups(html: str) -> str:
    """``html`` with each number and its words (``_GROUPS``) made to wrap whole: their spaces non-breaking, a word
    joiner (U+2060) after a slash, where Qt would break a line."""
    return _GROUPS.sub(lambda match: match.group().replace(" ", "&nbsp;").replace("/", "/\u2060"), html)


class SummaryLabel(WrappedLabel):
    """The graph's word-wrapped summary, by the rules of the module doc (a restarted window's "Last reply: No
    speedup: Auto decoded plainly, …" took four lines, and the settings scrolled, their last row below the screen).
    """

    MIN_LINES = 2

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__("", parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self._texts = [text]
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Show ``text`` and fit the height to its lines (nothing to do when it is unchanged)."""
        self.set_texts([text])

    def set_texts(self, texts: list[str]) -> None:
        """Show the first of ``texts`` (rich text, fullest first) that fits :attr:`MIN_LINES` lines at the label's
        width, else the last, with the first in the tooltip where another is shown."""
        self._texts = list(texts)
        self._show_fitting()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """At a new width, pick again the text that fits (then fit the height to it)."""
        if event.size().width() != event.oldSize().width() and len(self._texts) > 1:
            self._show_fitting()
        super().resizeEvent(event)

    def _show_fitting(self) -> None:
        fitting = self._texts[-1]
        if self.width() > 0:
            least = self._least_height()
            fitting = next((text for text in self._texts[:-1] if self.needed_height(text) + 2 <= least), fitting)
        if fitting != self.text():
            super().setText(fitting)
        self.setToolTip(_plain(self._texts[0]) if fitting != self._texts[0] else "")

    def needed_height(self, text: str | None = None) -> int:
        """The height ``text`` (default: the text shown) takes at the label's width, in pixels (QLabel.heightForWidth
        would answer at least the fixed height set before)."""
        document = QTextDocument()
        document.setDocumentMargin(0)
        document.setDefaultFont(self.font())
        document.setHtml(self.text() if text is None else text)
        document.setTextWidth(self.contentsRect().width())
        margins = self.contentsMargins()
        return math.ceil(document.size().height()) + margins.top() + margins.bottom()

    def _least_height(self) -> int:
        return self.MIN_LINES * self.fontMetrics().lineSpacing() + 4

    def _fit_height(self) -> None:
        least = self._least_height()
        height = max(self.needed_height() + 2, least) if self.width() > 0 else least
        if height != self.height():
            self.setFixedHeight(height)


def _plain(html: str) -> str:
    """The words of a rich text, for a tooltip."""
    document = QTextDocument()
    document.setHtml(html)
    return document.toPlainText()
