"""The remote target in the settings file: a file of the previous version (no remote settings) loads as before, the
remote settings round-trip and are checked, and the target's name says which server answers."""

from __future__ import annotations

import json

from app.gui.settings_store import AppSettings, SettingsStore


def test_a_file_without_remote_settings_loads_with_the_local_target(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"target_model": "my-model", "k": 5}, "ui": {}}))
    store = SettingsStore(path)
    settings = store.load()
    assert store.warnings == []
    assert (settings.target_model, settings.value("k")) == ("my-model", 5)
    assert (settings.remote_url, settings.remote_model, settings.use_remote) == ("", "", False)
    assert settings.target_name == "my-model"


def test_remote_settings_round_trip_and_name_the_server(tmp_path):
    path = tmp_path / "settings.json"
    settings = AppSettings(remote_url="http://gpu-box:8000/v3", remote_model="qwen", use_remote=True)
    SettingsStore(path).save(settings)
    stored = json.loads(path.read_text())["settings"]
    assert {name: stored[name] for name in ("remote_url", "remote_model", "use_remote")} == {
        "remote_url": "http://gpu-box:8000/v3", "remote_model": "qwen", "use_remote": True,
    }  # fmt: skip
    again = SettingsStore(path).load()
    assert again == settings and again.target_name == "qwen on gpu-box:8000 (remote)"
    assert again.model_key() == AppSettings().model_key()  # the local model stays loaded while the remote answers


def test_mistyped_remote_settings_fall_back_with_a_warning(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"use_remote": "yes", "remote_url": 8000}}))
    store = SettingsStore(path)
    settings = store.load()
    assert (settings.use_remote, settings.remote_url) == (False, "")
    assert store.warnings == [
        'setting remote_url has an invalid value 8000; using the default, ""',
        "setting use_remote has an invalid value 'yes'; using the default, false",
    ]
