""""Reset to defaults" (issue 35, a newcomer's trial): on settings already at their defaults it changes nothing and
announces no reload; where it changes a model setting, one message says the reload."""

from __future__ import annotations

from conftest import FAST


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
    said = _reload_messages(window, qtbot, window.settings_pane.reset_button.click)
    assert said == [] and requests == []
    assert window.choice.settings == before and window.model_state == "ready"


def test_a_reset_that_changes_a_model_setting_says_the_reload_once(qtbot, make_window):
    window = make_window(FAST.with_values(kv_cache_precision="f32"))
    qtbot.wait(500)
    said = _reload_messages(window, qtbot, window.settings_pane.reset_button.click)
    assert said == ["The model will be loaded with the new settings, in the background"]
    assert window.choice.settings.kv_cache_precision == "auto"
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=120_000)
