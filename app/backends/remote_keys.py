"""API keys of remote servers, and of the window's own local server: in the system keyring where there is a usable
one, else in a file only the user can read; never in ``settings.json``.

Rules:
- Keys are stored per base URL (service :data:`KEYRING_SERVICE`, user name the base URL as shown, its secrets
  ``***``); the key the window's local server asks of its clients under the name :data:`LOCAL_SERVER`; a base URL
  with secrets in its query (``?key=...``) under :data:`SECRET_URL_PREFIX` and the URL shown.
- A keyring is usable when ``keyring``'s chosen backend has a priority above 0 (the ``fail`` backend of a machine
  without Secret Service, KWallet or the macOS/Windows store has 0) and accepts the write.
- Otherwise the key goes to ``remote_keys.json`` in the config folder (``$SPECCHAT_CONFIG_DIR`` overrides it), created
  with mode 600 and written atomically and durably (``app.user_files``); a key found there is removed once the
  keyring holds it.
- That file is never overwritten when it cannot be read: one that holds something else (not JSON, not an object of
  texts) is moved aside to ``remote_keys.json.unreadable-<time>`` first (mode 600 kept), one that cannot be read now
  (no permission, an I/O error) or moved is left as it is and no key is written to it; :func:`check_keys_file`
  (called when the window starts) says which.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import keyring
import keyring.errors
import platformdirs

from inference.models.store import user_dir

from ..user_files import move_aside, write_atomically

logger = logging.getLogger(__name__)

KEYRING_SERVICE = "specchat-remote-server"
KEYS_FILE = "remote_keys.json"
LOCAL_SERVER = "local-server"  # the name the window's local server keeps its key under (never a base URL)
#: Before a shown base URL (``...?key=***``), the name the base URL with its secrets is kept under.
SECRET_URL_PREFIX = "base-url-with-secrets "


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
        OSError: the fallback file cannot be written, cannot be read now, or holds something else than keys and
            cannot be moved aside (the message names it; nothing was written over it).
    """
    if keyring_usable():
        try:
            if key:
                keyring.set_password(KEYRING_SERVICE, base_url, key)
            else:
                with contextlib.suppress(keyring.errors.PasswordDeleteError):
                    keyring.delete_password(KEYRING_SERVICE, base_url)
            try:
                _write_file_key(base_url, "")  # no copy left in the file
            except OSError as error:  # (the key is stored: a file that cannot be read holds no copy we know of)
                logger.warning("no copy of the key could be removed from the keys file: %s", error)
            return "keyring"
        except keyring.errors.KeyringError as error:
            logger.warning("the keyring refused the API key (%s); using %s", error, keys_file())
    _write_file_key(base_url, key)
    return str(keys_file())


def save_secret_url(shown: str, base_url: str) -> str:
    """Keep ``base_url``, whose secrets (``?key=...``) ``shown`` hides, where keys are kept, so that the settings
    file holds only ``shown``; returns where it went (as :func:`save_api_key`, which raises the same)."""
    return save_api_key(SECRET_URL_PREFIX + shown, base_url)


def load_secret_url(shown: str) -> str:
    """The base URL with secrets kept for ``shown`` by :func:`save_secret_url`, else ``shown`` itself."""
    return load_api_key(SECRET_URL_PREFIX + shown) or shown


def load_api_key(base_url: str) -> str:
    """The key stored for ``base_url`` ("" when none)."""
    if keyring_usable():
        try:
            key = keyring.get_password(KEYRING_SERVICE, base_url)
            if key:
                return key
        except keyring.errors.KeyringError as error:
            logger.warning("the keyring could not be read (%s); trying %s", error, keys_file())
    return _file_key(base_url)


class _UnreadableKeys(Exception):
    """The keys file holds something else than SpecChat's keys; the message says what."""


def _read_keys() -> dict[str, str]:
    """The keys of the fallback file ({} when there is none).

    Raises:
        _UnreadableKeys: it is not JSON, or not an object of texts (it can be moved aside).
        OSError: it cannot be read now (no permission, a folder in its place, a failing disk): it must be left as
            it is, and not written over.
    """
    path = keys_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise OSError(f"{path} could not be read ({error.strerror or error}): it was left as it is") from None
    try:
        keys = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise _UnreadableKeys(f"is not a keys file (not valid JSON: {error})") from None
    if not isinstance(keys, dict) or not all(isinstance(key, str) for key in keys.values()):
        raise _UnreadableKeys("does not hold SpecChat's keys (an object of texts)")
    return keys


def _file_key(base_url: str) -> str:
    try:
        return _read_keys().get(base_url, "")
    except (_UnreadableKeys, OSError) as error:
        logger.warning("%s %s; no key read from it", keys_file(), error)
        return ""


def check_keys_file() -> str | None:
    """Move a fallback file that holds something else than keys aside; what to tell the user about it (or about a
    file that cannot be read now, left as it is), or None when it is fine (or absent)."""
    try:
        _read_keys()
    except _UnreadableKeys as error:
        try:
            return _set_aside(str(error))
        except OSError as held:
            return f"{held}; API keys entered now are used this session only"
    except OSError as error:
        return f"{error}; API keys entered now are used this session only"
    return None


def _set_aside(reason: str) -> str:
    """Move the unreadable keys file aside; the notice saying where it went.

    Raises:
        OSError: it cannot be moved (then it stays as it is, and nothing may be written over it).
    """
    path = keys_file()
    try:
        moved = move_aside(path)
    except OSError as error:
        raise OSError(f"{path} {reason} and could not be moved aside ({error}): it was left as it is") from None
    notice = f"{path} {reason}: it was kept as {moved.name}; enter your servers' API keys again"
    logger.warning(notice)
    return notice


def _write_file_key(base_url: str, key: str) -> None:
    try:
        keys = _read_keys()
    except _UnreadableKeys as error:
        _set_aside(str(error))
        keys = {}
    if not key and base_url not in keys:
        return
    if key:
        keys[base_url] = key
    else:
        keys.pop(base_url, None)
    write_atomically(keys_file(), json.dumps(keys, indent=2), mode=0o600)
