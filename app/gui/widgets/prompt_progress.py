"""How far a reply has read a long prompt before its first token: a bar and its words, in the reply's bubble.

The engine reads a prompt in passes of about a second (``inference.prefill.prefill_pass_size``) and says after each
how many of its tokens it has read (``PromptProgress``); the reply recorder hands that on as the streaming reply's
``stats["prefill"]`` (``reply_format.progress_dict``), which this view shows until the first token.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QVBoxLayout, QWidget

from ..reply_format import reading_text


class PromptProgressView(QWidget):
    """A bar of the prompt's tokens read out of those to read, and ``Reading your message: 12,288 of 39,935 tokens ·
    1 min 2 s so far, about 40 s left`` under it."""

    def __init__(self, parent=None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        layout.setSpacing(2)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        self.bar.setAccessibleName("Reading your message")
        self.words = QLabel()
        self.words.setObjectName("footer")
        self.words.setWordWrap(True)
        layout.addWidget(self.bar)
        layout.addWidget(self.words)

    def show_progress(self, progress: dict) -> bool:
        """Show ``progress`` (``reply_format.progress_dict``); returns False, showing nothing new, for a dict that
        is not one (then the caller hides the view)."""
        words = reading_text(progress)
        if not words:
            return False
        total = max(1, progress["total"])
        self.bar.setRange(0, total)
        self.bar.setValue(min(total, max(0, progress["done"])))
        self.bar.setAccessibleDescription(words)
        self.words.setText(words)
        return True
