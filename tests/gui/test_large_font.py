"""With a larger system font (fonts at 144 dpi on a screen not scaled: QT_FONT_DPI=144 with
QT_ENABLE_HIGHDPI_SCALING=0, or a desktop's font size raised by half), the settings pane is shown whole: high-DPI
trial at 1920x1080, the side panel stayed 410 px wide while its settings needed 469, and the Decoding and Drafter
boxes, K's Adaptive box, the sampling preset's Delete button and Reset to defaults were cut at the window's edge."""

from __future__ import annotations

import pytest
from conftest import FAST
from PySide6.QtCore import QPoint, QRect, Qt
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


def test_the_shortcuts_dialog_fits_the_screen_with_a_larger_font(qtbot, large_font, make_window):
    """High-DPI trial at 1366x768 with fonts at 144 dpi: Help > Keyboard shortcuts (F1), a message box of some 30
    lines, was taller than the screen, its last lines and its OK button below the screen's bottom."""
    from gui_helpers import find_dialog
    from PySide6.QtWidgets import QDialogButtonBox

    window = make_window(FAST, start=False)
    window.show()
    window.shortcuts_action.trigger()
    qtbot.waitUntil(lambda: find_dialog(window, "shortcuts") is not None, timeout=3000)
    dialog = find_dialog(window, "shortcuts")
    qtbot.wait(50)
    screen = dialog.screen().availableGeometry()
    assert dialog.font().pointSizeF() == large_font.pointSizeF()
    assert screen.contains(dialog.frameGeometry()), (dialog.frameGeometry(), screen)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert ok.isVisible() and screen.contains(QRect(ok.mapToGlobal(QPoint(0, 0)), ok.size()))
    assert "\nCtrl+N: new chat\n" in dialog.text()  # every line, in a scroll area
    qtbot.keyClick(dialog, Qt.Key.Key_Escape)  # Esc closes it
    qtbot.waitUntil(lambda: find_dialog(window, "shortcuts") is None, timeout=3000)


def test_the_shortcuts_dialog_scrolls_lines_taller_than_the_screen(qtbot, large_font, make_window):
    """Lines taller than the screen (more shortcuts, a smaller screen): the dialog stays within the screen and
    scrolls them, its OK button shown."""
    from PySide6.QtWidgets import QDialogButtonBox

    from app.gui.widgets.help import ShortcutsDialog

    window = make_window(FAST, start=False)
    window.show()
    dialog = ShortcutsDialog(window, [f"Ctrl+{n}: shortcut number {n}" for n in range(100)])
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    screen = dialog.screen().availableGeometry()
    assert dialog.label.sizeHint().height() > screen.height()
    assert screen.contains(dialog.frameGeometry()), (dialog.frameGeometry(), screen)
    assert dialog.area.verticalScrollBar().maximum() > 0  # the lines scroll
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert ok.isVisible() and screen.contains(QRect(ok.mapToGlobal(QPoint(0, 0)), ok.size()))


def test_the_live_graph_legend_is_whole_with_a_larger_font(qtbot, large_font):
    """High-DPI trial, fonts at 144 dpi in a 1920x1080 window: the legend read "━ Plain ━ Aut", cut at the panel's
    edge (the plot buttons and the legend need more than the panel's width at that font). At any width from a
    1366 px window's panel up, it reads whole: on the buttons' row where it fits, else under it."""
    from test_live_graph_follows import _steps

    from app.gui.widgets.live_graph import LiveGraph

    graph = LiveGraph()
    qtbot.addWidget(graph)
    graph.resize(470, 320)
    graph.show()
    graph.show_conversation(1)
    graph.start_run("ar", conversation_id=1)
    graph.add_events(_steps(1.0))
    graph.start_run("auto", keep_previous=True, conversation_id=1)
    graph.add_events(_steps(1.0, drafted=2))
    graph.finish_run()
    graph.refresh()
    assert graph.legend_names() == {"ar": "Plain", "spec": "Auto"}
    for width in range(300, 720, 10):
        graph.resize(width, 320)
        graph.layout().activate()
        legend = graph.legend
        assert "Plain" in legend.text() and "Auto" in legend.text()
        assert legend.isVisible() and legend.width() >= legend.sizeHint().width(), width  # not cut
        assert legend.geometry().right() < graph.width(), width  # within the graph
