"""The side panel (live graph and settings) takes the room a large screen gives: at 1920x1080 it stayed 410 px wide
beside a 1200 px chat, and the Decoding and Drafter boxes showed "Auto (fastest measured: draf…"; restored from a
layout saved at 1366x768, it stayed so at 1920x1080.

Rules:
- The panel is as wide as its cut combo boxes need to show their current text whole, never narrower than its
  floor (``PANEL_PX``, its graph's buttons and legend; with a saved layout, the width restored: it stands as a
  minimum) and never leaving the chat column less than ``CHAT_KEEPS_PX``: at 1366x768 it keeps its 410 px, at
  1920x1080 the boxes read whole.
- Its settings are never cut at its edge (they have no horizontal scroll bar): the panel is at least as wide as
  their narrowest layout, before the chat's ``CHAT_KEEPS_PX``; with a larger font (fonts at 144 dpi on a screen not
  scaled) the form needed 469 px where the panel stayed 410, and its fields were cut at the window's edge.
- It follows the window's width and the boxes' texts (a model list read later, another decoding chosen) until the
  user drags the splitter's handle: from then on the user's width stands.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QScrollArea, QSplitter, QWidget

from .widgets.elided_combo import ElidedComboBox

#: The panel's narrowest width, pixels (the graph's button row and legend need 400).
PANEL_PX = 410
#: Width, pixels, the chat column keeps before the panel widens (a line of about 100 characters of a reply).
CHAT_KEEPS_PX = 860


class SidePanelWidth(QObject):
    """Sizes ``panel``, the last widget of ``splitter``, by the rules of the module doc.

    Args:
        splitter: the window's horizontal splitter (conversation list, chat, panel); its resizes are watched.
        panel: the side panel, its last widget.
        combos: the panel's combo boxes whose current text should read whole.
        floor: the panel's least width, pixels (``PANEL_PX``, or the width a saved layout restored).
    """

    def __init__(self, splitter: QSplitter, panel: QWidget, combos: list[ElidedComboBox], floor: int = PANEL_PX):
        super().__init__(splitter)
        self._splitter, self._panel, self._combos = splitter, panel, combos
        self.floor = floor
        self.following = True
        splitter.splitterMoved.connect(self._dragged)
        splitter.installEventFilter(self)
        for combo in combos:
            combo.currentTextChanged.connect(lambda _text: self.fit())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """On a resize of the splitter, let it lay its widgets out first, then size the panel; likewise once shown."""
        if event.type() == QEvent.Type.Resize and self.following:
            watched.event(event)  # (the splitter's own resize, done here so that the panel is sized after it)
            self.fit()
            return True
        if event.type() == QEvent.Type.Show:
            self.fit()
        return False

    def wanted_width(self) -> int:
        """The panel's width, pixels, at which each of its shown combo boxes reads whole (its width now if none is cut)."""
        missing = [combo.missing_width() for combo in self._combos if combo.isVisibleTo(self._panel)]
        return self._panel.width() + max(missing, default=0)

    def form_width(self) -> int:
        """The panel's width, pixels, at which none of its scrolled forms without a horizontal scroll bar (the
        settings) is cut at the right (its width now if none is)."""
        missing = [
            area.widget().minimumSizeHint().width() - area.viewport().width()
            for area in self._panel.findChildren(QScrollArea)
            if area.widget() is not None and area.isVisibleTo(self._panel)
            and area.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        ]
        return self._panel.width() + max(missing, default=0)

    def fit(self) -> None:
        """Give the panel :meth:`wanted_width` within the rules' bounds (nothing while it is hidden or not followed)."""
        splitter = self._splitter
        sizes = splitter.sizes()
        if not self.following or self._panel.isHidden() or len(sizes) != 3 or sum(sizes) <= 0:
            return
        total = sum(sizes)
        room = total - sizes[0] - CHAT_KEEPS_PX
        width = max(self.floor, self.form_width(), min(self.wanted_width(), room))
        if width > max(PANEL_PX, sizes[2]) or sizes[2] > width:  # wider, or back from wider (the splitter's own
            splitter.setSizes([sizes[0], total - sizes[0] - width, width])  # sizes stand below PANEL_PX: a new window)

    def _dragged(self, _position: int, _index: int) -> None:
        self.following = False
