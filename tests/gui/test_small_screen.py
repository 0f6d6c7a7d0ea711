"""The window fits a 1366x768 screen: default size bounded by the screen, the whole settings pane visible without
a scroll bar, every group title on screen; saved geometry is kept on the screen."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtWidgets import QGroupBox

from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.window_geometry import DEFAULT_SIZE, default_size, fit_to_screen


def test_the_default_size_is_bounded_by_the_screen():
    assert default_size(QRect(0, 0, 1366, 768)) == QSize(1366, 768)
    assert default_size(QRect(0, 0, 1920, 1080)) == DEFAULT_SIZE == QSize(1440, 900)
    assert default_size(QRect(0, 0, 1280, 1024)) == QSize(1280, 900)


def test_the_settings_pane_fits_a_1366x768_window(qtbot, qasync_loop, shared_worker, tmp_path):
    from app.gui.application import create_main_window

    SettingsStore(tmp_path / "settings.json").save(AppSettings())
    window = create_main_window(tmp_path / "history.sqlite3", tmp_path / "settings.json", worker=shared_worker)
    qtbot.addWidget(window)
    window.resize(1366, 768)  # what default_size gives on a 1366x768 screen
    window.show()
    qtbot.waitExposed(window)
    pane = window.settings_pane
    try:
        assert window.size() == QSize(1366, 768)
        bar = pane.verticalScrollBar()
        qtbot.waitUntil(lambda: bar.maximum() == 0 and not bar.isVisible(), timeout=3000)
        assert pane.widget().height() <= pane.viewport().height()
        assert pane.widget().minimumSizeHint().width() <= pane.viewport().width()  # nothing cut on the right
        viewport = pane.viewport().rect()
        titles = []
        for group in pane.findChildren(QGroupBox):
            top_left = group.mapTo(pane.viewport(), QPoint(0, 0))
            assert viewport.contains(QRect(top_left, group.size())), group.title()
            titles.append(group.title())
        assert titles == ["Model and decoding", "Rolling context", "Sampling"]
        for name in ("decoding", "draft_model", "k", "n_ctx", "temperature", "max_new_tokens"):
            field = pane.fields[name]
            assert field.isVisibleTo(pane) and viewport.contains(QRect(field.mapTo(pane.viewport(), QPoint(0, 0)), field.size())), name
        assert window.live_graph.height() >= window.live_graph.minimumSizeHint().height()
        assert pane.fields["k"].width() <= 80  # K's field no longer stretches the whole width
    finally:
        window.close()
        window.db.close()


def test_plain_language_labels_keep_the_field_names(qtbot):
    from PySide6.QtWidgets import QFormLayout

    from app.gui.application import create_application
    from app.gui.widgets.settings_pane import SettingsPane

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    labels = {}
    for form in pane.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
            field = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
            if label and field:
                labels[label.widget().text()] = field.widget()
    for text, name in (("Context length (n_ctx)", "n_ctx"), ("Kept at start (n_keep)", "n_keep"),
                       ("Dropped per roll (n_discard)", "n_discard"), ("Draft tokens per step (K)", "k")):  # fmt: skip
        assert text in labels, labels.keys()
        assert pane.fields[name].toolTip().startswith(f"{name if name != 'k' else 'K'}:")
    assert "acceptance rate" in pane.fields["adaptive_k"].toolTip()


def test_a_saved_geometry_larger_than_the_screen_is_brought_back_onto_it(qtbot):
    from PySide6.QtWidgets import QWidget

    window = QWidget()
    qtbot.addWidget(window)
    window.show()
    available = window.screen().availableGeometry()
    window.resize(available.width() + 800, available.height() + 600)
    window.move(available.right() + 500, available.bottom() + 500)
    fit_to_screen(window)
    assert window.width() <= available.width() and window.height() <= available.height()
    assert available.contains(window.frameGeometry())
