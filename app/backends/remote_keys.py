"""API keys of remote servers, and of the window's own local server: in the system keyring where there is a usable
one, else in a file only the user can read; never in ``settings.json``.

Rules:
- Keys are stored per base URL (service :data:`KEYRING_SERVICE`, user name the base URL); the key the window's
  local server asks of its clients under the name :data:`LOCAL_SERVER`.
- A keyring is usable when ``keyring``'s chosen backend has a priority above 0 (the ``fail`` backend of a machine
  without Secret Service, KWallet or the macOS/Windows store has 0) and accepts the write.
- Otherwise the key goes to ``remote_keys.json`` in the config folder (``$SPECCHAT_CONFIG_DIR`` overrides it), created
  with mode 600 and written atomically; a key found there is removed once the keyring holds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

import keyring
import keyring.errors
import platformdirs

from inference.models.store import user_dir

logger = logging.getLogger(__name__)

KEYRING_SERVICE = "specchat-remote-server"
KEYS_FILE = "remote_keys.json"
LOCAL_SERVER = "local-server"  # the name the window's local server keeps its key under (never a base URL)


def keys_file() -> Path:
    """The fallback file: ``remote_keys.json`` in SpecChat's config folder."""
    return user_dir("SPECCHAT_CONFIG_DIR", platformdirs.user_config_dir) / KEYS_FILE


def keyring_usable() -> bool:
    """True when ``keyring`` has a real backend (priority above 0)."""
    try:
        return keyring.get_keyring().priority > 0
    except Exception:  # noqa: BLE001 - a broken backend is no keyring
        return False


def save_api_key(base_url: str, key: str) -> str:
    """Store the key of ``base_url`` ("" removes it); returns where it went: ``keyring`` or the file's path.

    Raises:
        OSError: the fallback file cannot be written (the message names it).
    """
    if keyring_usable():
        try:
            if key:
                keyring.set_password(KEYRING_SERVICE, base_url, key)
            else:
                with contextlib.suppress(keyring.errors.PasswordDeleteError):
                    keyring.delete_password(KEYRING_SERVICE, base_url)
            _write_file_key(base_url, "")  # no copy left in the file
            return "keyring"
        except keyring.errors.KeyringError as error:
            logger.warning("the keyring refused the API key (%s); using %s", error, keys_file())
    _write_file_key(base_url, key)
    return str(keys_file())


def load_api_key(base_url: str) -> str:
    """The key stored for ``base_url`` ("" when none)."""
    if keyring_usable():
        try:
            key = keyring.get_password(KEYRING_SERVICE, base_url)
            if key:
                return key
        except keyring.errors.KeyringError as error:
            logger.warning("the keyring could not be read (%s); trying %s", error, keys_file())
    return _read_keys().get(base_url, "")


def _read_keys() -> dict[str, str]:
    try:
        keys = json.loads(keys_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {url: key for url, key in keys.items() if isinstance(key, str)} if isinstance(keys, dict) else {}


def _write_file_key(base_url: str, key: str) -> None:
    keys = _read_keys()
    if not key and base_url not in keys:
        return
    if key:
        keys[base_url] = key
    else:
        keys.pop(base_url, None)
    path = keys_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".remote-keys-", dir=path.parent)  # mkstemp creates it with mode 600
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(keys, file, indent=2)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
