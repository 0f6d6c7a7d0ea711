"""The sampling group of the settings pane: presets (shipped, saved, per conversation, the model's default), the
Greedy toggle, penalties and stop strings reaching the settings."""

from __future__ import annotations

import json

import pytest
from conftest import FAST, field_geometry
from gui_helpers import two_chats

from app.gui.sampling_presets import BUILTIN_PRESETS, MODEL_DEFAULT, model_default
from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.widgets.settings_pane import SettingsPane


@pytest.fixture
def make_pane(qtbot, tmp_path):
    from app.gui.application import create_application

    create_application()

    def make(settings: AppSettings = AppSettings()):
        store = SettingsStore(tmp_path / "settings.json")
        store.load()
        pane = SettingsPane(settings, ["CPU"], store=store)
        pane.set_max_position_embeddings(8192)
        qtbot.addWidget(pane)
        emitted = []
        pane.settings_changed.connect(emitted.append)
        return pane, store, emitted

    return make


def test_shipped_presets_fill_the_values_and_editing_makes_them_custom(make_pane):
    pane, _, emitted = make_pane()
    group = pane.sampling
    assert [group.preset.itemText(i) for i in range(group.preset.count())] == [MODEL_DEFAULT, *BUILTIN_PRESETS]
    group.choose_preset("Balanced")
    current = pane.current()
    assert (current.value("temperature"), current.value("top_p"), current.value("repetition_penalty")) == (0.7, 0.9, 1.1)
    assert current.sampling_preset == "Balanced" and emitted[-1] == current
    group.presence_penalty.setValue(0.5)
    assert pane.current().sampling_preset == "" and group.preset.currentText() == "Custom"
    assert pane.current().value("presence_penalty") == 0.5
    group.choose_preset("Precise")
    assert pane.current().generation.sampling.greedy and group.greedy.isChecked()


def test_greedy_is_one_click_away_and_back(make_pane):
    pane, _, _ = make_pane()
    group = pane.sampling
    group.choose_preset("Creative")
    group.greedy.click()
    assert pane.current().value("temperature") == 0.0 and pane.current().generation.sampling.greedy
    group.greedy.click()
    assert pane.current().value("temperature") == 1.0  # the temperature shown before comes back
    group.temperature.setValue(0.0)
    assert group.greedy.isChecked()


def test_greedy_ticked_and_unticked_chooses_the_preset_again(make_pane):
    """Newcomer trial: unticking Greedy left the preset on "Custom" although the values were the preset's again."""
    pane, _, emitted = make_pane()
    group = pane.sampling
    group.choose_preset("Balanced")
    group.greedy.click()
    assert group.preset.currentText() == "Custom" and pane.current().sampling_preset == ""
    group.greedy.click()
    assert group.preset.currentText() == "Balanced" and pane.current().sampling_preset == "Balanced"
    assert emitted[-1].sampling_preset == "Balanced" and emitted[-1].value("temperature") == 0.7
    group.top_p.setValue(0.5)  # other values: Custom, and back by hand: the preset again
    assert group.preset.currentText() == "Custom"
    group.top_p.setValue(0.9)
    assert group.preset.currentText() == "Balanced"


def test_penalties_and_stop_strings_are_settings_and_flagged_when_out_of_range(make_pane):
    pane, _, _ = make_pane()
    group = pane.sampling
    assert not group.more.box.isVisibleTo(pane)  # folded, so that the pane fits a small screen
    group.stop_strings.setPlainText("END\n\nUser:")
    group.frequency_penalty.setValue(3.0)
    assert group.more.box.isVisibleTo(pane)  # a flagged field is never hidden
    assert pane.current().value("stop_strings") == ("END", "User:")
    assert "Frequency penalty must be between -2 and 2" in pane.error_labels["frequency_penalty"].text()
    assert "frequency_penalty" in pane.errors()
    group.frequency_penalty.setValue(0.2)
    assert pane.errors() == {}
    assert pane.current().generation.sampling.frequency_penalty == 0.2


def test_a_saved_preset_round_trips_and_each_conversation_keeps_its_choice(make_pane, tmp_path):
    pane, store, _ = make_pane()
    group = pane.sampling
    group.set_conversation(1)
    group.choose_preset("Creative")
    group.repetition_penalty.setValue(1.25)
    assert group.save_preset("Precise") is not None  # a shipped name is refused
    assert group.save_preset("  ") is not None
    assert group.save_preset("Story") is None
    assert group.preset.currentText() == "Story" and group.delete_button.isEnabled()
    group.set_conversation(2)
    group.choose_preset("Precise")
    # a new window (the store read again from the file) offers the preset and remembers each conversation's choice
    pane.deleteLater()
    again, _, _ = make_pane()
    assert "Story" in [again.sampling.preset.itemText(i) for i in range(again.sampling.preset.count())]
    again.sampling.set_conversation(1)
    current = again.current()
    assert current.sampling_preset == "Story"
    assert (current.value("temperature"), current.value("repetition_penalty")) == (1.0, 1.25)
    again.sampling.set_conversation(2)
    assert again.current().sampling_preset == "Precise" and again.current().generation.sampling.greedy
    again.sampling.choose_preset("Story")
    again.sampling.delete_preset("Story")
    assert again.current().sampling_preset == "" and again.current().value("repetition_penalty") == 1.25
    assert "Story" not in json.loads((tmp_path / "settings.json").read_text())["presets"]


def test_a_preset_chosen_in_a_new_chat_is_kept_once_the_chat_is_saved(make_pane):
    pane, _, _ = make_pane()
    group = pane.sampling
    group.set_conversation(None)  # a new chat: no conversation id until its first message is saved
    group.choose_preset("Creative")
    group.adopt_conversation(7)
    group.set_conversation(None)
    group.choose_preset("Precise")
    again, _, _ = make_pane()
    again.sampling.set_conversation(7)
    assert again.current().sampling_preset == "Creative"


def test_the_model_default_follows_the_loaded_model(make_pane, tmp_path):
    pane, _, emitted = make_pane()
    assert pane.current().sampling_preset == MODEL_DEFAULT and pane.current().value("temperature") == 0.7
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.6, "top_k": 20}))
    pane.sampling.set_model_defaults(model_default(folder))
    assert (pane.current().value("temperature"), pane.current().value("top_k")) == (0.6, 20)
    assert emitted[-1] == pane.current()
    pane.sampling.choose_preset("Creative")
    pane.sampling.set_model_defaults(model_default(None))  # another model: a chosen preset stays
    assert pane.current().value("temperature") == 1.0


def test_the_compare_summary_says_what_it_compares():
    from app.gui.reply_format import compare_summary

    greedy = {"ar": {"seed": 5}, "speedup": 1.42, "identical": True}
    assert compare_summary(greedy) == (
        "Speedup 1.42× over plain decoding · speed and identity: texts identical"
    )
    sampled = {**greedy, "identical": False, "sampled": True}  # with sampling only the speed is compared
    assert compare_summary(sampled) == (
        "Speedup 1.42× over plain decoding · speed only: same seed 5, texts differ by design (sampling)"
    )
    unseeded = {**sampled, "ar": {"seed": None}}  # the user set no seed: none is named
    assert compare_summary(unseeded) == "Speedup 1.42× over plain decoding · speed only: texts differ by design (sampling)"
    # two identical sampled texts (a seeded Auto run that stayed plain) are not said to differ (newcomer trial)
    assert compare_summary({**sampled, "identical": True}) == (
        "Speedup 1.42× over plain decoding · speed only: same seed 5, texts identical this time (sampled texts may differ)"
    )
    differ = {**greedy, "identical": False, "first_difference": {"token": 9, "top2_gap": 0.01, "noise_bound": 0.1,
                                                                  "near_tie": True}}
    assert "speed and identity: texts differ from token 9: a near-tie" in compare_summary(differ)


def test_a_chat_whose_preset_was_deleted_falls_back_to_the_model_default_after_a_restart(qtbot, make_window):
    """A newcomer trial deleted the preset of chat 1, restarted, and chat 1 showed chat 2's "Precise": a chat
    remembers a preset's name only, so one whose preset is gone falls back to "Model default"."""
    window = make_window(FAST, start=False)
    first, second = two_chats(window, "Chat one", "Chat two")
    group = window.settings_pane.sampling
    window.conversations.open(first)
    group.temperature.setValue(0.3)
    assert group.save_preset("Mine") is None and window.settings.sampling_preset == "Mine"
    window.conversations.open(second)
    group.choose_preset("Precise")
    window.conversations.open(first)
    assert group.preset.currentText() == "Mine" and window.settings.value("temperature") == 0.3
    group.delete_button.click()
    assert group.preset.currentText() == "Custom" and window.settings.value("temperature") == 0.3  # shown values stay
    window.conversations.open(second)  # the chat open at quit: the next window opens it first
    window.close()

    again = make_window(None, start=False)
    assert again.chat_view.conversation_id == second
    group = again.settings_pane.sampling
    assert group.preset.currentText() == "Precise" and again.settings.value("temperature") == 0.0
    again.conversations.open(first)
    assert group.preset.currentText() == MODEL_DEFAULT and again.settings.sampling_preset == MODEL_DEFAULT
    model_values = model_default(None)
    assert again.settings.value("temperature") == model_values["temperature"] == 0.7
    assert again.settings.value("top_p") == model_values["top_p"]
    assert "Mine" not in [group.preset.itemText(i) for i in range(group.preset.count())]


def test_a_chat_keeps_its_values_edited_by_hand_across_chat_switches_and_a_restart(qtbot, make_window):
    """A newcomer trial (as an LM Studio/Jan user, where each chat keeps its parameters) set chat A's temperature to
    0.55 by hand, clicked chat B (Model default, 0.70) and back: chat A showed Model default / 0.70, the 0.55 lost
    without a word. A chat remembers its Custom values as it remembers a preset's name."""
    window = make_window(FAST, start=False)
    chat_a, chat_b = two_chats(window, "Chat A", "Chat B")
    group = window.settings_pane.sampling
    window.conversations.open(chat_b)
    group.choose_preset(MODEL_DEFAULT)
    window.conversations.open(chat_a)
    group.choose_preset("Balanced")
    group.temperature.setValue(0.55)
    assert group.preset.currentText() == "Custom" and window.settings.value("temperature") == 0.55
    window.conversations.open(chat_b)
    assert group.preset.currentText() == MODEL_DEFAULT and window.settings.value("temperature") == 0.7
    window.conversations.open(chat_a)
    assert group.preset.currentText() == "Custom" and window.settings.sampling_preset == ""
    assert window.settings.value("temperature") == 0.55 and window.settings.value("repetition_penalty") == 1.1
    window.close()

    again = make_window(None, start=False)
    group = again.settings_pane.sampling
    again.conversations.open(chat_b)
    assert group.preset.currentText() == MODEL_DEFAULT and again.settings.value("temperature") == 0.7
    again.conversations.open(chat_a)
    assert group.preset.currentText() == "Custom" and again.settings.value("temperature") == 0.55
    assert again.settings.value("repetition_penalty") == 1.1


def test_values_edited_by_hand_in_a_new_chat_are_kept_once_the_chat_is_saved(make_pane):
    pane, _, _ = make_pane()
    group = pane.sampling
    group.set_conversation(None)
    group.choose_preset("Creative")
    group.top_p.setValue(0.8)
    group.adopt_conversation(7)
    group.set_conversation(None)
    group.choose_preset("Precise")
    again, _, _ = make_pane()
    again.sampling.set_conversation(7)
    current = again.current()
    assert current.sampling_preset == "" and again.sampling.preset.currentText() == "Custom"
    assert (current.value("temperature"), current.value("top_p")) == (1.0, 0.8)


def test_a_preset_that_cannot_be_saved_says_why_without_moving_a_field(make_pane, qtbot, tmp_path):
    """Saving a preset failed (the settings file could not be written): its message line pushed every field below
    the preset down, as an invalid value's error once did (test_settings_validation's
    test_an_error_appearing_under_a_field_moves_no_field_unless_it_needs_more_lines). It takes half of the preset's
    row, cut to one line (a line of its own kept free pushed the pane past a 1366x768 window: test_small_screen)."""
    pane, store, _ = make_pane()
    pane.resize(400, 760)
    pane.show()
    pane.sampling.more.show()
    qtbot.wait(50)  # (layouts settle in posted events)

    def geometry():
        return field_geometry(pane)

    before = geometry()
    assert len(before) >= 10
    store.path.unlink(missing_ok=True)
    store.path.mkdir()  # the settings file cannot be replaced: the save fails as on a full or read-only disk
    error = pane.sampling.save_preset("Mine")
    qtbot.wait(50)
    note = pane.sampling.preset_note
    assert error and error.startswith(f"could not write {store.path}") and note.isVisibleTo(pane)
    assert {name: rect for name, rect in geometry().items() if rect != before[name]} == {}
    assert note.text() == error == note.toolTip() and note.shown_text()  # cut to its line, whole in the tooltip
    preset = pane.sampling.preset
    beside = note.geometry()  # in the preset's row, right of it, within its height
    assert beside.left() > preset.geometry().right() and preset.geometry().top() <= beside.top()
    assert beside.bottom() <= preset.geometry().bottom()
    store.path.rmdir()
    assert pane.sampling.save_preset("Mine") is None
    qtbot.wait(50)
    assert not note.isVisibleTo(pane) and geometry() == before
