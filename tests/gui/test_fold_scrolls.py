"""A fold unfolded at the bottom of the settings pane scrolls its form into view (newcomer trial: at 1366x768 a click
on "Penalties, top-k, seed, stop strings" showed one row of it, the rest hidden below the pane's edge)."""

from __future__ import annotations

from gui_helpers import click
from PySide6.QtCore import QPoint

from app.gui.settings_store import AppSettings, SettingsStore


def _top(pane, widget) -> int:
    return widget.mapTo(pane.viewport(), QPoint(0, 0)).y()


def _in_view(pane, widget) -> bool:
    top = widget.mapTo(pane.viewport(), QPoint(0, 0)).y()
    return 0 <= top and top + widget.height() <= pane.viewport().height()


def test_an_unfolded_form_is_scrolled_into_view_with_its_button(qtbot, qasync_loop, shared_worker, tmp_path):
    from app.gui.application import create_main_window

    SettingsStore(tmp_path / "settings.json").save(AppSettings())
    window = create_main_window(tmp_path / "history.sqlite3", tmp_path / "settings.json", worker=shared_worker)
    qtbot.addWidget(window)
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    pane = window.settings_pane
    try:
        more = window.settings_pane.sampling.more
        qtbot.waitUntil(lambda: pane.verticalScrollBar().maximum() == 0, timeout=3000)  # (all of it in view, folded)
        click(qtbot, more.button)
        qtbot.waitUntil(lambda: pane.verticalScrollBar().maximum() > 0 and pane.verticalScrollBar().value() > 0, timeout=3000)
        assert _in_view(pane, more.button) and _in_view(pane, more.box)  # the form fits below its button: all of it
        advanced = pane.advanced
        click(qtbot, advanced.button)  # the last fold, under the first one unfolded: scrolled further
        qtbot.waitUntil(lambda: _in_view(pane, advanced.box), timeout=3000)
        assert _in_view(pane, advanced.button) and _top(pane, advanced.button) > 0  # (not past its button)
    finally:
        window.close()
        window.db.close()
