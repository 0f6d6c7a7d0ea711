"""Sampling defaults from a model's generation_config.json, the shipped presets, and presets in the settings file."""

import json

from app.gui.sampling_presets import BUILTIN_PRESETS, CHAT_DEFAULTS, MODEL_DEFAULT, PRESET_KEYS, model_default
from app.gui.settings_store import AppSettings, SettingsStore
from inference.generation_config import sampling_defaults


def test_generation_config_values_are_read_and_bad_ones_left_out(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "eos_token_id": 2}
    ))
    assert sampling_defaults(tmp_path) == {"temperature": 0.6, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": -1, "top_p": "high", "top_k": 2.5}))
    assert sampling_defaults(tmp_path) == {}
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.9}))
    assert sampling_defaults(tmp_path) == {"temperature": 0.0}  # transformers decodes greedily then
    (tmp_path / "generation_config.json").write_text("{not json")
    assert sampling_defaults(tmp_path) == {}
    assert sampling_defaults(tmp_path / "missing") == {}


def test_model_default_is_the_chat_default_overlaid_with_the_model_recommendation(tmp_path):
    assert model_default(None)["temperature"] == CHAT_DEFAULTS.temperature == 0.7
    assert model_default(tmp_path)["top_p"] == 0.9
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_k": 20}))
    assert model_default(tmp_path) == {**model_default(None), "temperature": 0.6, "top_k": 20}


def test_shipped_presets():
    assert set(BUILTIN_PRESETS) == {"Precise", "Balanced", "Creative"}
    assert BUILTIN_PRESETS["Precise"]["temperature"] == 0.0
    balanced = BUILTIN_PRESETS["Balanced"]
    assert (balanced["temperature"], balanced["top_p"], balanced["repetition_penalty"]) == (0.7, 0.9, 1.1)
    assert (BUILTIN_PRESETS["Creative"]["temperature"], BUILTIN_PRESETS["Creative"]["top_p"]) == (1.0, 0.95)
    assert all(set(values) == set(PRESET_KEYS) for values in BUILTIN_PRESETS.values())


def test_new_settings_sample_like_a_chat_under_the_model_default():
    settings = AppSettings()
    assert settings.sampling_preset == MODEL_DEFAULT
    assert (settings.value("temperature"), settings.value("top_p"), settings.value("repetition_penalty")) == (0.7, 0.9, 1.1)


def test_presets_and_new_settings_round_trip_through_the_settings_file(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    settings = AppSettings().with_values(repetition_penalty=1.2, presence_penalty=0.5, frequency_penalty=-0.5,
                                         stop_strings=("END", "\n\n"), sampling_preset="")
    store.save(settings)
    store.save_preset("Mine", {**BUILTIN_PRESETS["Creative"], "repetition_penalty": 1.3})
    store.set_conversation_preset(7, "Mine")
    store.save_ui_state(settings, {"geometry": "abc"})  # the window's own state does not drop the presets' choices
    reloaded = SettingsStore(tmp_path / "settings.json")
    assert reloaded.load() == settings and reloaded.warnings == []
    assert reloaded.presets == {"Mine": {**BUILTIN_PRESETS["Creative"], "repetition_penalty": 1.3}}
    assert reloaded.conversation_preset(7) == "Mine" and reloaded.conversation_preset(8) is None
    reloaded.delete_preset("Mine")
    again = SettingsStore(tmp_path / "settings.json")
    again.load()
    assert again.presets == {} and again.conversation_preset(7) == MODEL_DEFAULT  # its name is gone, not its chat


def test_invalid_presets_in_the_file_are_dropped_with_a_warning(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"stop_strings": [1]},
                                "presets": {"ok": {"temperature": 1}, "bad": {"temperature": "hot"}, "worse": 3}}))
    store = SettingsStore(path)
    assert store.load() == AppSettings()
    assert list(store.presets) == ["ok"] and store.presets["ok"]["temperature"] == 1.0
    assert len(store.warnings) == 3  # stop_strings, "bad", "worse"


def test_a_conversation_remembers_values_edited_by_hand_and_a_bad_entry_is_nothing(tmp_path):
    path = tmp_path / "settings.json"
    store = SettingsStore(path)
    store.save(AppSettings())
    custom = {**BUILTIN_PRESETS["Balanced"], "temperature": 0.55}
    store.set_conversation_preset(3, custom, write=False)  # a hand edit: written with the settings' next save
    assert store.conversation_preset(3) == custom
    assert "conversation_presets" not in json.loads(path.read_text())["ui"]
    store.save_ui_state(AppSettings(), {})
    data = json.loads(path.read_text())
    data["ui"]["conversation_presets"].update({"4": {"temperature": "hot"}, "5": 7, "6": "Precise"})
    path.write_text(json.dumps(data))  # an older file's entries are names; a broken entry is none
    reloaded = SettingsStore(path)
    reloaded.load()
    assert reloaded.conversation_preset(3) == custom and reloaded.conversation_preset(6) == "Precise"
    assert reloaded.conversation_preset(4) is None and reloaded.conversation_preset(5) is None
