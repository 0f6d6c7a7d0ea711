""""Reset to defaults" (issue 35, a newcomer's trial): on settings already at their defaults it changes nothing and
announces no reload; where it changes a model setting, one message says the reload."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import reset_to_defaults


def _reload_messages(window, qtbot, action) -> list[str]:
    """The status bar's messages about loading the model while ``action()`` runs and a second after, and the
    loader's requests."""
    said: list[str] = []
    window.statusBar().messageChanged.connect(lambda text: said.append(text) if "load" in text.lower() else None)
    action()
    qtbot.wait(1000)
    return said


def test_a_reset_of_the_default_settings_changes_nothing_and_says_nothing(qtbot, make_window, monkeypatch):
    """It said "The model will be loaded with the new settings": the reset emptied the drafter, and the window
    chose the draft head again (K 4, then 1)."""
    window = make_window(None)  # a fresh window: the default settings, the draft head preselected
    qtbot.wait(500)
    before = window.choice.settings
    assert before.draft_is_a_head  # (the default model's head, chosen by the window)
    requests = []
    monkeypatch.setattr(window.models, "load_later", requests.append)
    said = _reload_messages(window, qtbot, lambda: reset_to_defaults(window.settings_pane))
    assert said == [] and requests == []
    assert window.choice.settings == before and window.model_state == "ready"


def test_a_reset_that_changes_a_model_setting_says_the_reload_once(qtbot, make_window):
    window = make_window(FAST.with_values(kv_cache_precision="f32"))
    qtbot.wait(500)
    said = _reload_messages(window, qtbot, lambda: reset_to_defaults(window.settings_pane))
    assert said == ["The model will be loaded with the new settings, in the background"]
    assert window.choice.settings.kv_cache_precision == "auto"
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=120_000)


def test_reset_asks_first_cancel_keeps_the_settings_and_reset_resets_them(qtbot):
    """Newcomer trial: one click reset every sampling setting, with no question and no undo."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMessageBox

    from app.gui.application import create_application
    from app.gui.settings_store import AppSettings
    from app.gui.widgets.settings_pane import SettingsPane

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    pane.show()
    pane.sampling.temperature.setValue(1.3)  # the user's sampling
    pane.sampling.top_k.setValue(7)
    pane.max_new_tokens.setValue(300)
    chosen = pane.current()
    assert chosen.value("temperature") == 1.3 and chosen.value("top_k") == 7 and chosen.value("max_new_tokens") == 300
    emitted = []
    pane.settings_changed.connect(emitted.append)
    pane.reset_button.click()
    (box,) = [box for box in pane.findChildren(QMessageBox, "confirmReset") if box.isVisible()]
    assert box.windowModality() == Qt.WindowModality.WindowModal and "cannot be undone" in box.informativeText()
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    assert box.button(QMessageBox.StandardButton.Reset).text() == "Reset"
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.waitUntil(lambda: not box.isVisible(), timeout=3000)
    assert pane.current() == chosen and emitted == []
    assert (pane.sampling.temperature.value(), pane.sampling.top_k.value()) == (1.3, 7)
    reset_to_defaults(pane)
    assert pane.current() == AppSettings() and emitted[-1] == AppSettings()
