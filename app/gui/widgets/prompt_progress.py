"""How far a reply has read a long prompt before its first token: a bar and its words, in the reply's bubble.

The engine reads a prompt in passes of about a second (``inference.prefill.prefill_pass_size``) and says after each
how many of its tokens it has read (``PromptProgress``); the reply recorder hands that on as the streaming reply's
``stats["prefill"]`` (``reply_format.progress_dict``), which this view shows until the first token. Between two
passes (several seconds each on a busy machine) the view counts the time itself, so that its words never stand
still: a newcomer read "0 ms so far" for the 6.7 s the first pass took.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QVBoxLayout, QWidget

from ..reply_format import reading_text

#: How often the words are said again between two passes (milliseconds): the "so far" and "left" times move on.
TICK_MS = 500


class PromptProgressView(QWidget):
    """A bar of the prompt's tokens read out of those to read, and ``Reading your message: 12,288 of 39,935 tokens ·
    1 min 2 s so far, about 40 s left`` under it, its times moving on every ``TICK_MS`` between two passes (the
    time left counts down to the pass's estimate used up, then is not said until the next pass)."""

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
        self._progress: dict = {}
        self._received = 0.0  # time.monotonic() when _progress came
        self._clock = QTimer(self)
        self._clock.setInterval(TICK_MS)
        self._clock.timeout.connect(self._say)

    def show_progress(self, progress: dict) -> bool:
        """Show ``progress`` (``reply_format.progress_dict``); returns False, showing nothing new, for a dict that
        is not one (then the caller hides the view)."""
        if not reading_text(progress):
            self._clock.stop()
            return False
        total = max(1, progress["total"])
        self.bar.setRange(0, total)
        self.bar.setValue(min(total, max(0, progress["done"])))
        if progress != self._progress:  # (the same progress said again, with a live note: its times go on)
            self._progress, self._received = dict(progress), time.monotonic()
        self._say()
        if progress["done"] < progress["total"]:
            self._clock.start()
        else:
            self._clock.stop()
        return True

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt override
        """The first token came (or the reply ended): the times stop."""
        self._clock.stop()
        super().hideEvent(event)

    def _say(self) -> None:
        """The words of the latest progress, its times moved on by the time since it came."""
        since = time.monotonic() - self._received
        progress = dict(self._progress)
        if isinstance(progress.get("elapsed_s"), (int, float)):
            progress["elapsed_s"] += since
        if isinstance(progress.get("remaining_s"), (int, float)):
            left = progress["remaining_s"] - since
            progress["remaining_s"] = left if left >= 0.5 else None  # (past the estimate: not said until the next pass)
        words = reading_text(progress)
        self.bar.setAccessibleDescription(words)
        self.words.setText(words)
