"""With a larger system font (fonts at 144 dpi on a screen not scaled: QT_FONT_DPI=144 with
QT_ENABLE_HIGHDPI_SCALING=0, or a desktop's font size raised by half), the settings pane is shown whole: high-DPI
trial at 1920x1080, the side panel stayed 410 px wide while its settings needed 469, and the Decoding and Drafter
boxes, K's Adaptive box, the sampling preset's Delete button and Reset to defaults were cut at the window's edge."""

from __future__ import annotations

import pytest
from conftest import FAST
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication


@pytest.fixture
def large_font(qapp):
    """The application's font one and a half times its size (as 144 dpi fonts on a 96 dpi screen), for one test."""
    normal = QApplication.font()
    large = QApplication.font()
    large.setPointSizeF(normal.pointSizeF() * 1.5)
    QApplication.setFont(large)
    yield large
    QApplication.setFont(normal)


def test_the_settings_pane_is_whole_with_a_larger_font(qtbot, large_font, make_window):
    window = make_window(FAST, start=False)
    window.resize(1440, 900)
    pane = window.settings_pane
    qtbot.waitUntil(lambda: pane.isVisible() and pane.viewport().width() > 0, timeout=3000)
    qtbot.wait(50)
    content = pane.widget()
    assert pane.font().pointSizeF() == large_font.pointSizeF()
    assert content.minimumSizeHint().width() <= pane.viewport().width()  # nothing cut on the right
    viewport = pane.viewport().rect()
    for name in ("decoding", "draft_model", "k", "adaptive_k", "temperature", "max_new_tokens"):
        field = pane.fields[name]
        shown = QRect(field.mapTo(pane.viewport(), QPoint(0, 0)), field.size())
        assert shown.right() <= viewport.right(), (name, shown, viewport)
    assert window.chat_view.width() >= window.chat_view.minimumSizeHint().width()
