"""Where File > Export and File > Import open their file dialogs: the folder of the last export or import, else
Documents, else home."""

from __future__ import annotations

from pathlib import Path

from conftest import FAST
from gui_helpers import accept_file_dialog, find_dialog
from PySide6.QtWidgets import QLineEdit

from app.gui.history_db import HistoryDB
from app.gui.settings_store import SettingsStore


def _open_export_dialog(qtbot, window, action):
    action.trigger()
    qtbot.waitUntil(lambda: find_dialog(window, "fileDialog") is not None, timeout=5000)
    return find_dialog(window, "fileDialog")


def _window_with_a_chat(make_window, tmp_path, monkeypatch):
    """A window on a history of one chat, ``HOME`` an empty folder (no Documents yet), started from ``tmp_path``:
    ``(home, history, window)``."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))  # no user-dirs.dirs: Documents is ~/Documents
    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    db.add_message(db.create_conversation("Exported chat"), "user", "Hello")
    db.close()
    window = make_window(FAST, history=history, start=False)
    monkeypatch.chdir(tmp_path)  # the folder the app was started from is never where the dialog opens
    return home, history, window


def _folder(dialog) -> Path:
    return Path(dialog.directory().absolutePath())


def test_the_export_dialog_opens_in_the_last_export_folder_else_documents_else_home(qtbot, make_window, tmp_path, monkeypatch):
    home, history, window = _window_with_a_chat(make_window, tmp_path, monkeypatch)

    dialog = _open_export_dialog(qtbot, window, window.export_markdown_action)
    assert _folder(dialog) == home  # no Documents folder
    dialog.reject()
    (home / "Documents").mkdir()
    dialog = _open_export_dialog(qtbot, window, window.export_markdown_action)
    assert _folder(dialog) == home / "Documents"
    assert dialog.findChild(QLineEdit, "fileNameEdit").text() == "Exported chat.md"  # the suggested name is kept
    exports = tmp_path / "exports"
    exports.mkdir()
    accept_file_dialog(dialog, exports / "chat.md")
    qtbot.waitUntil(lambda: (exports / "chat.md").exists(), timeout=5000)

    dialog = _open_export_dialog(qtbot, window, window.export_json_action)
    assert _folder(dialog) == exports  # the last export's folder, for either format
    dialog.reject()
    window.close()  # saving the window's own state keeps the export folder
    store = SettingsStore(tmp_path / "config" / "settings.json")
    store.load()
    assert store.transfer_folder == str(exports)

    exports.joinpath("chat.md").unlink()
    exports.rmdir()
    window = make_window(None, history=history, start=False)
    dialog = _open_export_dialog(qtbot, window, window.export_markdown_action)
    assert _folder(dialog) == home / "Documents"  # the last export's folder is gone
    dialog.reject()


def test_import_opens_in_the_folder_of_the_last_export_or_import_and_export_follows_an_import(
    qtbot, make_window, tmp_path, monkeypatch
):
    """Newcomer trial: File > Import (Ctrl+O) opened its file dialog in the folder the app was started from, not the
    folder of the last export or import. Import opens where Export does (the last folder either used, else
    Documents, else home), and a file imported makes its folder the next one for both, kept in the settings."""
    home, history, window = _window_with_a_chat(make_window, tmp_path, monkeypatch)
    (home / "Documents").mkdir()

    dialog = _open_export_dialog(qtbot, window, window.import_action)
    assert _folder(dialog) == home / "Documents"  # nothing exported nor imported yet
    dialog.reject()
    exports = tmp_path / "exports"
    exports.mkdir()
    dialog = _open_export_dialog(qtbot, window, window.export_json_action)
    accept_file_dialog(dialog, exports / "chat.json")
    qtbot.waitUntil(lambda: (exports / "chat.json").exists(), timeout=5000)
    dialog = _open_export_dialog(qtbot, window, window.import_action)
    assert _folder(dialog) == exports  # the last export's folder
    dialog.reject()

    imports = tmp_path / "imports"
    imports.mkdir()
    (exports / "chat.json").rename(imports / "chat.json")
    dialog = _open_export_dialog(qtbot, window, window.import_action)
    accept_file_dialog(dialog, imports / "chat.json")
    qtbot.waitUntil(lambda: len(window.db.conversations()) == 2, timeout=5000)
    dialog = _open_export_dialog(qtbot, window, window.export_markdown_action)
    assert _folder(dialog) == imports  # the last import's folder, for Export too
    dialog.reject()
    dialog = _open_export_dialog(qtbot, window, window.import_action)
    assert _folder(dialog) == imports
    dialog.reject()
    window.close()
    store = SettingsStore(tmp_path / "config" / "settings.json")
    store.load()
    assert store.transfer_folder == str(imports)
