"""The side panel (settings and live graph) folds away when the window becomes too narrow for it beside the chat,
and comes back when the window widens again, as LM Studio's and Jan's side bars do.

Rules:
- Only a crossing of ``NARROW_WINDOW_PX`` folds or unfolds: a window that stays narrow or wide keeps what the user
  chose (View > Settings and live graph, Ctrl+,), so a panel shown again in a narrow window stays shown.
- The panel comes back on widening only if this fold hid it; a panel the user hid stays hidden.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

#: Window width, in pixels, below which the side panel folds away (the chat then keeps at least ~600 px).
NARROW_WINDOW_PX = 1000


class SidePanelFold(QObject):
    """Folds ``panel`` away while ``window`` is narrower than ``NARROW_WINDOW_PX`` (see the module's rules).

    Args:
        window: the main window (its resizes are watched).
        panel: the side panel, shown and hidden with ``action``.
        action: the checkable View menu action that shows the panel (its ``triggered`` is the user's choice).
    """

    def __init__(self, window: QWidget, panel: QWidget, action: QAction):
        super().__init__(window)
        self._panel, self._action = panel, action
        self._narrow = window.width() < NARROW_WINDOW_PX
        self.folded = False  # hidden by this fold (not by the user)
        action.setChecked(panel.isVisibleTo(window))  # (shown at start)
        action.triggered.connect(self._chosen)
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """Follow the window's width on each resize (the event goes on to the window)."""
        if event.type() == QEvent.Type.Resize:
            self.follow_width(watched.width())
        return False

    def follow_width(self, width: int) -> None:
        """Fold the panel when ``width`` (pixels) crosses below ``NARROW_WINDOW_PX``, unfold it when it crosses back
        above and this fold had hidden it."""
        narrow = width < NARROW_WINDOW_PX
        if narrow == self._narrow:
            return
        self._narrow = narrow
        if narrow and self._action.isChecked():
            self._show(False)
            self.folded = True
        elif not narrow and self.folded:
            self._show(True)

    def _show(self, shown: bool) -> None:
        self._action.setChecked(shown)
        self._panel.setVisible(shown)
        self.folded = False

    def _chosen(self, _shown: bool) -> None:
        self.folded = False  # the user's choice stands until the next crossing
