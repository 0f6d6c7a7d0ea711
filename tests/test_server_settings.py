"""The local server's section of settings.json (``ServerSettings``): a file without it loads, bad values fall back
with a warning, and saving the other settings keeps it."""

from __future__ import annotations

import json

from app.gui.server_settings import ServerSettings
from app.gui.settings_store import AppSettings, SettingsStore


def test_a_file_without_a_server_section_loads_with_the_server_off_on_port_8000(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"k": 7}, "ui": {"geometry": "AAAA"}}))
    store = SettingsStore(path)
    assert store.load() == AppSettings().with_values(k=7)
    assert store.warnings == []
    assert store.server == ServerSettings(enabled=False, port=8000, allow_other_computers=False)


def test_server_settings_round_trip_and_survive_other_saves(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    store.load()
    store.save_server(ServerSettings(enabled=True, port=1234, allow_other_computers=True))
    store.save(AppSettings().with_values(k=5))  # saving the settings keeps the server's
    saved = json.loads(store.path.read_text())
    assert saved["server"] == {"enabled": True, "port": 1234, "allow_other_computers": True}
    assert saved["settings"]["k"] == 5
    again = SettingsStore(store.path)
    again.load()
    assert again.server == ServerSettings(enabled=True, port=1234, allow_other_computers=True)


def test_invalid_server_values_fall_back_one_by_one_with_a_warning(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "server": {"enabled": 1, "port": 70000, "allow_other_computers": True}}))
    store = SettingsStore(path)
    store.load()
    assert store.server == ServerSettings(enabled=False, port=8000, allow_other_computers=True)
    assert store.warnings == [
        "server setting enabled has an invalid value 1; using the default",
        "server setting port has an invalid value 70000; using the default",
    ]
    path.write_text(json.dumps({"version": 1, "server": "on"}))
    store.load()
    assert store.server == ServerSettings()
    assert store.warnings == ["server settings 'on' are not a JSON object; using the defaults"]
