"""The history refusing a write (full disk, a lock held past the busy timeout) never leaves the window stuck: the
error is said in the composer, unsaved text stays where it was typed, Send works again, and a reply whose saves
fail while it streams is kept on screen and saved once the database accepts writes again."""

from __future__ import annotations

import sqlite3
from functools import partial

from conftest import FAST
from gui_helpers import send_and_wait
from PySide6.QtWidgets import QMessageBox

from app.gui import conversations, reply_controller
from app.gui.history_db import HistoryDB
from app.gui.reply_recorder import ReplyRecorder

TIMEOUT = 120_000


def _refuse(monkeypatch, method: str, message: str = "database or disk is full", after: int = 0) -> list[int]:
    """Make HistoryDB.<method> raise sqlite3.OperationalError(message) after ``after`` successful calls; returns
    a one-element list counting the calls."""
    original = getattr(HistoryDB, method)
    calls = [0]

    def refusing(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            raise sqlite3.OperationalError(message)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HistoryDB, method, refusing)
    return calls


def _integrity(window) -> str:
    raw = sqlite3.connect(window.db.path)
    try:
        return raw.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        raw.close()


def test_a_message_the_disk_cannot_take_stays_in_the_composer_and_send_works_again(qtbot, make_window, monkeypatch):
    window = make_window(FAST)
    _refuse(monkeypatch, "add_message")
    window.composer.set_text("Please keep this text")
    window.composer.submit()
    assert window.composer.text() == "Please keep this text"
    assert "Could not save your message" in window.composer.error_text
    assert "the disk is full: free some space" in window.composer.error_text
    assert window.active is None and window.composer.send_button.isEnabled()
    assert [m.content for c in window.db.conversations() for m in window.db.messages(c.id)] == []
    monkeypatch.undo()
    final = send_and_wait(qtbot, window, window.composer.text())
    assert final.state == "complete" and final.content
    assert [m.role for m in window.db.messages(final.conversation_id)] == ["user", "assistant"]


def test_a_reply_that_cannot_start_leaves_send_enabled(qtbot, make_window, monkeypatch):
    window = make_window(FAST)
    _refuse(monkeypatch, "add_message", "database is locked", after=1)  # the user message saves, the reply does not
    window.chat.send("Hello there")
    assert "Could not save the reply" in window.composer.error_text
    assert "another program holds the history database" in window.composer.error_text
    assert window.active is None and window.composer.send_button.isEnabled()
    assert not window.stop_action.isEnabled()
    [conversation] = window.db.conversations()
    assert [(m.role, m.content) for m in window.db.messages(conversation.id)] == [("user", "Hello there")]


def test_regenerate_edit_rename_delete_and_system_prompt_survive_a_locked_database(qtbot, make_window, monkeypatch):
    window = make_window(FAST)
    final = send_and_wait(qtbot, window, "Say hi")
    conversation_id = final.conversation_id
    saved = [(m.role, m.content) for m in window.db.messages(conversation_id)]

    _refuse(monkeypatch, "add_message", "database is locked")
    window.chat.regenerate(final.id)
    assert "Could not save the new reply" in window.composer.error_text
    assert window.active is None and window.composer.send_button.isEnabled()
    assert [(m.role, m.content) for m in window.db.messages(conversation_id)] == saved
    user_message = window.db.messages(conversation_id)[0]
    window.chat.resend_edited(user_message.id, "Say hello instead")
    assert "Could not save the edited message" in window.composer.error_text
    assert [(m.role, m.content) for m in window.db.messages(conversation_id)] == saved  # both writes or neither
    assert window.composer.send_button.isEnabled()
    monkeypatch.undo()

    _refuse(monkeypatch, "rename_conversation", "database is locked")
    window.conversations.rename(conversation_id, "A new title")
    assert "Could not save the new title" in window.composer.error_text
    assert window.db.conversation(conversation_id).title == "Say hi"
    _refuse(monkeypatch, "set_system_prompt", "database or disk is full")
    window.conversations.system_prompt_changed(conversation_id, "Be brief.")
    assert "Could not save the system prompt" in window.composer.error_text
    _refuse(monkeypatch, "delete_conversation", "database is locked")

    async def yes(*args, **kwargs):
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(conversations, "message_box", yes)
    task = window.tasks.spawn(window.conversations.delete(conversation_id))
    qtbot.waitUntil(task.done, timeout=5000)
    assert task.result() is False and window.db.conversation(conversation_id) is not None
    assert "it was kept" in window.composer.error_text
    monkeypatch.undo()
    assert send_and_wait(qtbot, window, "Still working?").state == "complete"


def test_a_full_disk_while_a_reply_streams_keeps_the_reply_and_saves_it_later(qtbot, make_window, monkeypatch):
    """A genuine SQLITE_FULL: once the reply has started, the database may not grow (``PRAGMA max_page_count`` at
    its size), so the saves fail as soon as the reply outgrows the free space of its page (a 3,000-character
    message of another chat fills most of it)."""
    window = make_window(FAST.with_values(max_new_tokens=320))
    window.db.add_message(window.db.create_conversation("padding"), "user", "padding " * 375)

    def disk_full_from_now(_conversation_id: int) -> None:
        pages = window.db._db.execute("PRAGMA page_count").fetchone()[0]
        window.db._db.execute(f"PRAGMA max_page_count = {pages}")

    window.generation_started.connect(disk_full_from_now)
    failures = []
    window.replies.save_failed.connect(failures.append)
    final = send_and_wait(qtbot, window, "Write a long story about a dragon who learns to cook, with many details.")
    conversation_id = final.conversation_id
    assert final.state == "complete" and len(final.content) > 1200, "the reply fits in its page: make it longer"
    assert len(failures) == 1 and "database or disk is full — the disk is full" in failures[0]
    assert "The reply could not be saved" in window.composer.error_text
    assert window.chat_view.widget(final.id).message.content == final.content  # kept on screen
    assert window.composer.send_button.isEnabled() and window.active is None
    saved = window.db.message(final.id)  # the saves before the disk filled up are there, the rest is not...
    assert saved.state == "streaming" and 0 < len(saved.content) < len(final.content)
    assert final.content.startswith(saved.content)
    assert _integrity(window) == "ok"  # ...and is not damaged
    assert window.replies.unsaved

    window.generation_started.disconnect(disk_full_from_now)
    window.db._db.execute("PRAGMA max_page_count = 1073741823")  # space again: the next send saves it first
    with qtbot.waitSignal(window.replies.saved_again, timeout=5000):
        window.chat.send("Thanks")
    assert window.composer.error_text == "" and "The reply was saved" in window.statusBar().currentMessage()
    stored = window.db.message(final.id)
    assert (stored.content, stored.state, stored.stats["new_tokens"]) == (final.content, "complete", final.stats["new_tokens"])
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT):
        window.chat.stop()
    assert _integrity(window) == "ok"
    assert [m.role for m in window.db.messages(conversation_id)] == ["user", "assistant"] * 2
    assert len(window.db.conversations()) == 2


def test_saves_failing_after_some_writes_mid_reply_keep_the_text(qtbot, make_window, monkeypatch):
    """Injected: the recorder's third and later writes fail while the reply streams."""
    window = make_window(FAST.with_values(max_new_tokens=160))
    monkeypatch.setattr(reply_controller, "ReplyRecorder", partial(ReplyRecorder, save_interval_s=0.0))  # every batch
    calls = _refuse(monkeypatch, "update_message", after=2)
    final = send_and_wait(qtbot, window, "Write a long story about a dragon who learns to cook, with many details.")
    assert calls[0] > 3, "the reply was saved only once: make it longer"
    assert final.content and window.chat_view.widget(final.id).message.content == final.content
    assert "The reply could not be saved" in window.composer.error_text
    saved = window.db.message(final.id)
    assert saved.state == "streaming" and final.content.startswith(saved.content)
    monkeypatch.undo()
    assert window.replies.retry_unsaved()
    assert window.db.message(final.id).content == final.content
    assert _integrity(window) == "ok"
