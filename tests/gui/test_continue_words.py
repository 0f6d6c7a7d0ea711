"""Only the reply that has a Continue button points to it: an earlier reply cut at the length limit (or interrupted)
says so without "Continue writes more" (newcomer trial: the words stood above a later message, with no Continue
anywhere near them)."""

from __future__ import annotations

from conftest import FAST

from app.gui.history_db import HistoryDB

CUT = {"mode": "ar", "ttft_ms": 40.0, "tokens_per_s": 50.0, "new_tokens": 24, "stop_reason": "max_new_tokens"}


def test_an_earlier_reply_cut_at_the_limit_does_not_point_to_a_continue_it_lacks(qtbot, make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Stories")
    db.add_message(chat, "user", "Tell me a story.")
    first = db.add_message(chat, "assistant", "Once upon a time", stats=CUT)
    db.add_message(chat, "user", "And another one.")
    interrupted = db.add_message(chat, "assistant", "There was", state="streaming", stats={})
    db.close()
    window = make_window(FAST, history=history, start=False)
    assert window.chat_view.conversation_id == chat  # (the last chat opens)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded, timeout=5000)

    earlier, last = window.chat_view.widget(first), window.chat_view.widget(interrupted)
    assert earlier.footer.text().startswith("Length limit reached · Plain decoding · TTFT 40 ms")
    assert "Continue" not in earlier.footer.text() and not earlier.continue_button.isVisible()
    assert last.footer.text().endswith("(the text up to then was kept; Continue writes more)")
    assert last.continue_button.isVisible()


def test_a_reply_stopped_before_its_first_token_has_nothing_to_copy(qtbot, make_window, tmp_path):
    """Its Copy button said "Copied" and put nothing on the clipboard (newcomer trial): an empty reply has none."""
    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Long paste")
    db.add_message(chat, "user", "Summarize this text: ...")
    empty = db.add_message(chat, "assistant", "", state="stopped", stats={"mode": "auto", "new_tokens": 0})
    db.add_message(chat, "user", "Hi")
    said = db.add_message(chat, "assistant", "Hello!", stats=CUT)
    db.close()
    window = make_window(FAST, history=history, start=False)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and window.chat_view.widget(empty) is not None, timeout=5000)
    stopped = window.chat_view.widget(empty)
    assert stopped.footer.text() == "Stopped before the first token" and not stopped.copy_button.isVisibleTo(stopped)
    assert window.chat_view.widget(said).copy_button.isVisibleTo(window.chat_view.widget(said))
