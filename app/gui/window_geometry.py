"""The main window's size on screens of any size: a default that fits the screen, saved geometry kept on it.

The default is 1440x900, or the screen's available area where that is smaller (a 1366x768 laptop gets the whole
screen); a geometry saved on a larger or another screen is shrunk and moved back onto the current one.

The window's place is saved as plain numbers (:func:`saved_geometry`) and put back as they are
(:func:`restore_geometry`), not with ``QWidget.saveGeometry``/``restoreGeometry``: without a window manager (Xvfb,
a kiosk) Qt's restore assumes a title bar it cannot measure, and a window saved filling a 1366x768 screen came back
at 1364x742, 25 px down (newcomer trial).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtWidgets import QWidget

#: The window's size where the screen allows it.
DEFAULT_SIZE = QSize(1440, 900)
#: The least size a saved geometry is restored at (bounded by the screen); a smaller one gets the default size.
MIN_RESTORED = QSize(640, 480)


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


def saved_geometry(window: QWidget) -> dict[str, Any]:
    """Where the window is, to save: ``{"x", "y", "width", "height", "maximized"}``, in pixels: the top left of its
    frame (``QWidget.pos``) and the size inside it; a maximized window's normal place."""
    maximized = window.isMaximized()
    place = window.normalGeometry() if maximized and window.normalGeometry().isValid() else None
    x, y = (place.x(), place.y()) if place is not None else (window.pos().x(), window.pos().y())
    size = place.size() if place is not None else window.size()
    return {"x": x, "y": y, "width": size.width(), "height": size.height(), "maximized": maximized}


def restore_geometry(window: QWidget, saved: Any) -> bool:
    """Put ``window`` where :func:`saved_geometry` said it was, kept on its screen (:func:`fit_to_screen`); a saved
    size under :data:`MIN_RESTORED` (bounded by the screen) gets :func:`default_size` instead. Returns False, changing
    nothing, when ``saved`` is not such a dict (a settings file of an earlier version, or edited by hand)."""
    if not isinstance(saved, dict):
        return False
    numbers = [saved.get(key) for key in ("x", "y", "width", "height")]
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in numbers):
        return False
    x, y, width, height = numbers
    screen = window.screen()
    available = screen.availableGeometry() if screen is not None else QRect(0, 0, DEFAULT_SIZE.width(), DEFAULT_SIZE.height())
    least = MIN_RESTORED.boundedTo(available.size())
    if width < least.width() or height < least.height():
        window.resize(default_size(available))
    else:
        window.resize(width, height)
        window.move(x, y)
    fit_to_screen(window)
    if saved.get("maximized") is True:
        window.setWindowState(window.windowState() | Qt.WindowState.WindowMaximized)
    return True
