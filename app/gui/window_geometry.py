"""The main window's size on screens of any size: a default that fits the screen, saved geometry kept on it.

The default is 1440x900, or the screen's available area where that is smaller (a 1366x768 laptop gets the whole
screen); a geometry saved on a larger or another screen is shrunk and moved back onto the current one.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QWidget

#: The window's size where the screen allows it.
DEFAULT_SIZE = QSize(1440, 900)


def default_size(available: QRect) -> QSize:
    """``DEFAULT_SIZE`` bounded by the screen's available area (pixels)."""
    return DEFAULT_SIZE.boundedTo(available.size())


def fit_to_screen(window: QWidget) -> None:
    """Shrink ``window`` to its screen's available area and move it fully onto it (no-op when it already fits).

    The frame (title bar, borders) counts: the whole window, frame included, stays on screen.
    """
    screen = window.screen()
    if screen is None:
        return
    available = screen.availableGeometry()
    frame = window.frameGeometry()
    extra = QSize(frame.width() - window.width(), frame.height() - window.height())
    size = window.size().boundedTo(available.size() - extra)
    if size != window.size():
        window.resize(size)
        frame = window.frameGeometry()
    x = min(max(frame.x(), available.x()), available.right() + 1 - frame.width())
    y = min(max(frame.y(), available.y()), available.bottom() + 1 - frame.height())
    if (x, y) != (frame.x(), frame.y()):
        window.move(x, y)
