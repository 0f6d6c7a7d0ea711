"""Where File > Export opens its file dialog: the folder of the last export, else Documents, else home."""

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


def _folder(dialog) -> Path:
    return Path(dialog.directory().absolutePath())


def test_the_export_dialog_opens_in_the_last_export_folder_else_documents_else_home(qtbot, make_window, tmp_path, monkeypatch):
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
    assert store.export_folder == str(exports)

    exports.joinpath("chat.md").unlink()
    exports.rmdir()
    window = make_window(None, history=history, start=False)
    dialog = _open_export_dialog(qtbot, window, window.export_markdown_action)
    assert _folder(dialog) == home / "Documents"  # the last export's folder is gone
    dialog.reject()
