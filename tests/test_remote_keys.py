"""API keys of remote servers (app/backends/remote_keys.py): a usable keyring holds them; without one, a file readable by the
user only does. Never the user's real keyring: each test sets its own backend."""

from __future__ import annotations

import json
import stat

import keyring
import keyring.backend
import keyring.backends.fail
import pytest

from app.backends.remote_keys import KEYRING_SERVICE, check_keys_file, keys_file, load_api_key, save_api_key

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


@pytest.mark.parametrize("content", [b'{"http://a/v1": "sk-a", "http://b/v1": "sk-', b'["sk-a"]', b'{"http://a/v1": 5}'])
def test_a_keys_file_that_cannot_be_read_is_kept_aside_never_overwritten(config, content):
    """Saving a key over a damaged remote_keys.json would lose every key in it: it is moved aside first (mode 600
    kept), and the window, which checks the file at start, says where it went."""
    keyring.set_keyring(keyring.backends.fail.Keyring())
    config.mkdir(parents=True)
    keys_file().write_bytes(content)
    keys_file().chmod(0o600)
    assert load_api_key("http://a/v1") == ""
    assert keys_file().read_bytes() == content  # reading moves nothing
    save_api_key(URL, "sk-secret")
    moved = [p for p in config.iterdir() if p.name.startswith("remote_keys.json.unreadable-")]
    assert len(moved) == 1 and moved[0].read_bytes() == content and stat.S_IMODE(moved[0].stat().st_mode) == 0o600
    assert json.loads(keys_file().read_text()) == {URL: "sk-secret"}

    keys_file().write_bytes(content)
    notice = check_keys_file()
    assert notice.startswith(f"{keys_file()} ") and "enter your servers' API keys again" in notice
    assert not keys_file().exists() and len(list(config.glob("remote_keys.json.unreadable-*"))) == 2
    assert check_keys_file() is None  # (nothing left to check)


def test_a_keys_file_that_cannot_be_moved_aside_is_not_written(config, monkeypatch):
    keyring.set_keyring(keyring.backends.fail.Keyring())
    config.mkdir(parents=True)
    keys_file().write_text("{damaged")

    def refuse(_path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("app.backends.remote_keys.move_aside", refuse)
    with pytest.raises(OSError, match="could not be moved aside .*it was left as it is"):
        save_api_key(URL, "sk-secret")
    assert keys_file().read_text() == "{damaged"
    assert "API keys entered now are used this session only" in check_keys_file()


def test_a_keys_file_that_cannot_be_read_now_is_left_as_it_is(config):
    """A folder where the file should be (or no permission): nothing is moved or written, and the window says so."""
    keyring.set_keyring(keyring.backends.fail.Keyring())
    keys_file().mkdir(parents=True)
    with pytest.raises(OSError, match="could not be read .*it was left as it is"):
        save_api_key(URL, "sk-secret")
    assert keys_file().is_dir() and list(config.glob("remote_keys.json.unreadable-*")) == []
    assert load_api_key(URL) == "" and "API keys entered now are used this session only" in check_keys_file()
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    assert save_api_key(URL, "sk-secret") == "keyring" and load_api_key(URL) == "sk-secret"
