"""A word-wrapped label that is never given less height than its lines take.

A word-wrapped QLabel tells its layout its height only through ``heightForWidth``, and QFormLayout does not always
ask again when another row changes: the "Precision in use" row of the settings pane kept three lines' worth of text
in two lines' height (its top and bottom lines cut) once an error line appeared under n_keep, at 1366x768.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel


class WrappedLabel(QLabel):
    """Plain text wrapped at word boundaries, whose minimum height follows the lines it takes at its width."""

    def __init__(self, text: str = "", parent=None):
        super().__init__(text, parent)
        self.setWordWrap(True)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Show ``text`` and fit the minimum height to its lines at the present width."""
        super().setText(text)
        self._fit_height()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Fit the minimum height to the lines at the new width."""
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit_height()

    def _fit_height(self) -> None:
        if self.width() > 0:
            self.setMinimumHeight(max(0, self.heightForWidth(self.width())))  # (-1: no text to lay out)
