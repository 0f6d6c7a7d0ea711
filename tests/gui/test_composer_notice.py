"""The composer's notice ("Fix the settings first: …"): a one-line notice appears without moving the chat (issue 35,
a newcomer's trial: a notice wrapped to two lines pushed the chat up two lines), and a longer one is wrapped, whole
(a later trial: it was cut with "…" even at 1920 px)."""

from __future__ import annotations

from conftest import FAST


def test_the_settings_notice_above_the_message_box_reads_whole_at_1366_px(qtbot, make_window):
    window = make_window(FAST.with_values(decoding="spec_lookup"), start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=3000)
    qtbot.wait(100)
    view, composer = window.chat_view, window.composer
    notice = composer.error_label
    line = notice.fontMetrics().lineSpacing()

    def geometry():
        return view.mapTo(window, view.rect().topLeft()), view.size(), composer.edit.mapTo(window, composer.edit.rect().topLeft())

    before = geometry()
    window.settings_pane.k.setValue(4)  # one field: one line, and nothing moves
    window.settings_pane.n_ctx.setValue(5)
    qtbot.wait(100)
    assert composer.error_text.startswith("Fix the settings first: ") and notice.height() == line
    assert geometry() == before
    window.settings_pane.sampling.top_k.setValue(999999)  # the trial's: the first field's error and one more
    qtbot.wait(100)
    whole = composer.error_text
    assert "top-k" in whole and whole.endswith("(and 1 more field, marked in red)"), whole
    shown = notice.shown_text()
    lines = shown.split("\n")
    assert len(lines) >= 2 and "…" not in shown  # wrapped, not cut
    assert " ".join(lines) == whole  # every word, in order
    assert all(notice.fontMetrics().horizontalAdvance(text) <= notice.width() for text in lines)
    assert notice.height() == len(lines) * line and notice.isVisible()
    assert view.height() == before[1].height() - (len(lines) - 1) * line  # the chat gives up the extra lines
    window.settings_pane.sampling.top_k.setValue(40)
    window.settings_pane.n_ctx.setValue(4096)
    qtbot.wait(100)
    assert composer.error_text == "" and geometry() == before

def test_type_a_message_first_goes_with_a_version_switch_and_after_a_few_seconds(qtbot, make_window, tmp_path):
    """Newcomer trial: Enter on an empty box said "Type a message first.", which stayed after a click on a message's
    version switch (and whatever else the user did next but type)."""
    from PySide6.QtCore import Qt

    from app.gui.history_db import HistoryDB
    from app.gui.widgets.composer import HINT_MS

    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Two versions")
    db.add_message(chat, "user", "Hi?")
    first = db.add_message(chat, "assistant", "Hello, first version.")
    second = db.add_message(chat, "assistant", "Hello, second version.", replaces=first)
    db.close()
    window = make_window(FAST, history=history, start=False)
    view, composer = window.chat_view, window.composer
    qtbot.waitUntil(lambda: view.conversation_id == chat and view.widget(second) is not None, timeout=5000)
    composer.edit.setFocus()
    qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert composer.error_text == "Type a message first."
    qtbot.mouseClick(view.widget(second).previous_version, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.widget(first) is not None, timeout=5000)
    assert view.widget(first).version_label.text() == "1/2" and composer.error_text == ""
    qtbot.keyClick(composer.edit, Qt.Key.Key_Return)  # left alone, the hint goes after HINT_MS
    qtbot.wait(HINT_MS // 2)
    assert composer.error_text == "Type a message first."
    qtbot.waitUntil(lambda: composer.error_text == "", timeout=HINT_MS)


def test_compare_on_an_empty_box_says_what_to_do_as_send_does(qtbot, make_window):
    """Newcomer trial: Compare with an empty message box did nothing, the button just took the focus (its tooltip
    says "Run this message with plain decoding, then with Auto…"): it showed Send's "Type a message first.", the
    same words an Enter had left there, so nothing changed. Compare says what to do in its own words, in the notice
    Send uses, withdrawn as Send's is."""
    from PySide6.QtCore import Qt

    window = make_window(FAST, start=False)
    composer = window.composer
    composer.edit.setFocus()
    qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert composer.error_text == "Type a message first."
    qtbot.mouseClick(composer.compare_button, Qt.MouseButton.LeftButton)
    assert composer.error_label.isVisible()
    assert composer.error_text == "Type a message first, then Compare runs it twice."
    assert window.active is None and window.db.conversations() == []
    qtbot.mouseClick(composer.send_button, Qt.MouseButton.LeftButton)  # Send's own words stay as they were
    assert composer.error_text == "Type a message first."
    window.compare_action.trigger()  # Chat > Compare (Ctrl+Shift+Enter) says it too
    assert composer.error_text == "Type a message first, then Compare runs it twice."
    qtbot.keyClicks(composer.edit, "Hi")  # typing withdraws it
    assert composer.error_text == ""
