"""Help > About: the version, and a privacy line that holds when replies come from a remote server (a newcomer
trial read "nothing is sent anywhere" while the picker offers remote servers)."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import find_dialog
from PySide6.QtWidgets import QMessageBox

from app import __version__


def test_about_says_the_version_and_that_a_remote_server_gets_the_chats(qtbot, make_window):
    window = make_window(FAST, start=False)
    window.about_action.trigger()
    qtbot.waitUntil(lambda: find_dialog(window, "about") is not None, timeout=3000)
    box = find_dialog(window, "about")
    text = box.text()
    assert text.startswith(f"SpecChat {__version__}: chat with local LLMs on OpenVINO.")
    assert "nothing is sent anywhere" not in text
    assert "Replies are generated on this computer unless you choose a remote server" in text
    picker = window.model_picker.combo
    remote_entry = picker.itemText(picker.count() - 1)
    assert remote_entry == "Remote server (OpenAI-compatible)…" and f"({remote_entry} at the end of the model picker" in text
    assert "then your chats are sent to that server" in text
    box.button(QMessageBox.StandardButton.Ok).click()
