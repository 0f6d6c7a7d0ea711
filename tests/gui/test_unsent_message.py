"""A message typed but not sent is still in the message box after SpecChat is closed and started again (trial: "draft
text" typed, then Ctrl+Q, and the next start showed an empty box: the text was gone without a word)."""

from __future__ import annotations

import json


def test_a_message_typed_but_not_sent_is_in_the_box_again_after_a_restart(make_window, tmp_path):
    window = make_window(start=False)
    window.composer.set_text("half a question 🐉 龍\nsecond line")
    window.close()
    saved = json.loads((tmp_path / "config" / "settings.json").read_text(encoding="utf-8"))
    assert saved["ui"]["unsent_message"] == "half a question 🐉 龍\nsecond line"
    again = make_window(settings=None, start=False)
    assert again.composer.text() == "half a question 🐉 龍\nsecond line"
    again.composer.clear()  # (sending empties the box: nothing comes back)
    again.close()
    third = make_window(settings=None, start=False)
    assert third.composer.text() == ""
    assert third.store.unsent_message == ""


def test_the_restored_message_is_typed_on_at_its_end(make_window):
    window = make_window(start=False)
    window.composer.set_text("Summarize this:")
    window.close()
    again = make_window(settings=None, start=False)
    assert again.composer.edit.textCursor().position() == len("Summarize this:")


def test_typing_writes_nothing_to_the_saved_state_and_quitting_reads_the_box_once(qtbot, make_window, tmp_path):
    """Each keystroke in the message box copied its whole text into the window's saved state: the text is read
    once, when the state is saved at quit."""
    from PySide6.QtCore import Qt

    from app.gui.settings_store import UNSENT_MESSAGE

    window = make_window(start=False)
    state_before = window.store.ui_state
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "typed key by key")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Backspace)
    assert window.composer.text() == "typed key by ke"
    assert window.store.ui_state == state_before and UNSENT_MESSAGE not in window.store.ui_state
    window.close()
    saved = json.loads((tmp_path / "config" / "settings.json").read_text(encoding="utf-8"))
    assert saved["ui"][UNSENT_MESSAGE] == "typed key by ke"
    assert make_window(settings=None, start=False).composer.text() == "typed key by ke"
