"""The live graph takes the height a taller window gives: grown from 1440x900 (or from a layout saved at 1366x768) to
1920x1080, the graph kept its 190-320 px while 180-290 px stood empty under the settings.

Rules:
- The settings get the height that shows them whole (``SettingsPane.content_height``) and the graph the rest, never
  less than ``floor``: the graph's smallest readable height for a new window, the graph's height restored with a
  saved layout (the user's split stands as a minimum; below it the settings scroll, as before).
- It follows the side panel's height (the window resized, a fold of the settings opened or closed) until the user
  drags the handle between the graph and the settings: from then on the user's split stands.
- The graph's plots are drawn again at the new size once the resizing settles (``live_graph.RESIZE_SETTLE_MS``), so
  a growing graph does not make resizing stutter.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QSplitter

from .widgets.live_graph import LiveGraph
from .widgets.settings_pane import SettingsPane


class SidePanelHeight(QObject):
    """Splits ``splitter`` (the side panel: ``graph`` above ``pane``) by the rules of the module doc.

    Args:
        splitter: the side panel's vertical splitter; its resizes and its settings' content changes are watched.
        graph: its first widget.
        pane: its second widget.
        floor: the graph's least height, pixels; None for the graph's ``minimumSizeHint`` (a new window).
    """

    def __init__(self, splitter: QSplitter, graph: LiveGraph, pane: SettingsPane, floor: int | None = None):
        super().__init__(splitter)
        self._splitter, self._graph, self._pane = splitter, graph, pane
        self.floor = floor
        self.following = True
        splitter.splitterMoved.connect(self._dragged)
        splitter.installEventFilter(self)
        pane.widget().installEventFilter(self)  # (its size follows its content: a fold opened or closed)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """On a resize of the splitter, let it lay its widgets out first, then split it; likewise once shown and
        when the settings' content changes height."""
        if watched is self._splitter and event.type() == QEvent.Type.Resize and self.following:
            watched.event(event)  # (the splitter's own resize, done here so that the split is made after it)
            self.fit()
            return True
        if event.type() in (QEvent.Type.Show, QEvent.Type.LayoutRequest):
            self.fit()
        return False

    def graph_height(self, column: int) -> int:
        """The graph's height, pixels, in a side panel ``column`` pixels high (the settings get the rest)."""
        floor = self._graph.minimumSizeHint().height() if self.floor is None else self.floor
        return max(floor, column - self._pane.content_height())

    def fit(self) -> None:
        """Split the panel by :meth:`graph_height` (nothing while it is hidden, not laid out or not followed)."""
        sizes = self._splitter.sizes()
        if not self.following or self._splitter.isHidden() or len(sizes) != 2 or sum(sizes) <= 0:
            return
        column = sum(sizes)
        graph = self.graph_height(column)
        if graph != sizes[0]:
            self._splitter.setSizes([graph, column - graph])

    def _dragged(self, _position: int, _index: int) -> None:
        self.following = False
