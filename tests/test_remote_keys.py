"""API keys of remote servers (app/backends/remote_keys.py): a usable keyring holds them; without one, a file readable by the
user only does. Never the user's real keyring: each test sets its own backend."""

from __future__ import annotations

import json
import stat

import keyring
import keyring.backend
import keyring.backends.fail
import pytest

from app.backends.remote_keys import KEYRING_SERVICE, keys_file, load_api_key, save_api_key

URL = "http://gpu-box:8000/v1"


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A keyring that keeps passwords in a dict (a usable backend: priority 1)."""

    priority = 1

    def __init__(self):
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.passwords.get((service, username))

    def set_password(self, service, username, password):
        self.passwords[(service, username)] = password

    def delete_password(self, service, username):
        self.passwords.pop((service, username), None)


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path / "config"))
    previous = keyring.get_keyring()
    yield tmp_path / "config"
    keyring.set_keyring(previous)


def test_without_a_keyring_the_key_goes_to_a_file_only_the_user_reads(config):
    keyring.set_keyring(keyring.backends.fail.Keyring())
    assert save_api_key(URL, "sk-secret") == str(config / "remote_keys.json")
    assert stat.S_IMODE(keys_file().stat().st_mode) == 0o600
    assert json.loads(keys_file().read_text()) == {URL: "sk-secret"}
    assert load_api_key(URL) == "sk-secret" and load_api_key("http://other/v1") == ""
    save_api_key(URL, "")
    assert load_api_key(URL) == "" and json.loads(keys_file().read_text()) == {}


def test_a_usable_keyring_holds_the_key_and_the_file_keeps_no_copy(config):
    keyring.set_keyring(keyring.backends.fail.Keyring())
    save_api_key(URL, "old-in-file")
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    assert save_api_key(URL, "sk-secret") == "keyring"
    assert memory.passwords == {(KEYRING_SERVICE, URL): "sk-secret"}
    assert json.loads(keys_file().read_text()) == {}
    assert load_api_key(URL) == "sk-secret"
