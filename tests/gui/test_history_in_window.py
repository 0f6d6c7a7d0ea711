"""The window on a history with bad rows, and on a history kept in memory only."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import FAST
from PySide6.QtWidgets import QMessageBox
from test_history_bad_rows import INSERT, _relaxed

from app.gui import main_window
from app.gui.history_db import HistoryDB, Message
from app.gui.widgets.message_widget import MessageWidget


def _chat_with_bad_rows(path) -> int:
    db = HistoryDB(path)
    chat = db.create_conversation("bad rows")
    db.add_message(chat, "user", "first question")
    db.add_message(chat, "assistant", "good answer", stats={"mode": "ar", "ttft_ms": 10.0, "tokens_per_s": 40.0})
    db.close()
    _relaxed(path, [
        (INSERT, (chat, 2, "assistant", None, 3.0, "complete", None, None)),
        (INSERT, (chat, 3, "assistant", "stats from an older build", 4.0, "complete",
                  '{"mode": "ar", "ttft_ms": "fast", "compare": "x"}', '[5, "a"]')),
        (INSERT, (chat, 4, "assistant", "compare gone wrong", 5.0, "complete", '{"compare": {"ar": 3}}', None)),
    ])  # fmt: skip
    return chat


def test_a_chat_with_bad_rows_opens_with_placeholders_and_everything_drawn(qtbot, make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    chat = _chat_with_bad_rows(history)
    window = make_window(FAST, history=history, start=False)
    assert window.chat_view.conversation_id == chat
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded, timeout=5000)
    widgets = window.chat_view.message_widgets()
    assert [w.message.content for w in widgets] == [
        "first question", "good answer", "", "stats from an older build", "compare gone wrong",
    ]  # fmt: skip
    assert widgets[1].footer.text().startswith("Plain decoding · TTFT 10 ms · 40.0 tokens/s")
    placeholder = widgets[2].body.toPlainText()
    assert placeholder == "Unreadable message: its text is missing (NULL). It is kept in the history file as it is."
    assert not widgets[2].footer.isVisible()
    for widget in widgets[3:]:  # drawn without statistics
        assert widget.body.toPlainText() == widget.message.content
        assert "TTFT" not in widget.footer.text() and not widget.is_compare
    assert not list(tmp_path.glob("*.unreadable-*"))
    raw = sqlite3.connect(history)
    assert raw.execute("SELECT COUNT(*) FROM messages WHERE typeof(content) = 'null'").fetchone() == (1,)  # not rewritten
    raw.close()


@pytest.mark.parametrize(
    "stats,spans",
    [
        ({"mode": "ar", "ttft_ms": "fast"}, []),
        ({"compare": "x"}, []),
        ({"compare": {"ar": {"text": 5}, "spec": [], "speedup": "2x"}}, []),
        ({"mode": {"a": 1}, "tokens_per_s": None}, [5, "a"]),
        ({}, [[3, 1], [0, 500]]),
    ],
)
def test_a_message_with_malformed_stats_draws_without_them(qtbot, stats, spans):
    message = Message(1, 1, 0, "assistant", "some reply text", 0.0, stats=stats, draft_spans=spans)
    widget = MessageWidget(message, True)
    qtbot.addWidget(widget)
    assert widget.body.toPlainText() == "some reply text"
    assert widget.footer.text() == ""


def _in_memory_window(make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    HistoryDB(history).close()
    raw = sqlite3.connect(history)
    raw.execute("PRAGMA user_version = 99")  # written by a newer SpecChat: opened in memory
    raw.close()
    return make_window(FAST, history=history, start=False)


def _answer(monkeypatch, button) -> list:
    asked = []

    async def answer(window, icon, title, text, *args, object_name="", **kwargs):
        asked.append((object_name, text))
        return button

    monkeypatch.setattr(main_window, "message_box", answer)
    return asked


def test_an_in_memory_history_shows_a_banner_and_asks_before_quitting(qtbot, make_window, tmp_path, monkeypatch):
    window = _in_memory_window(make_window, tmp_path)
    assert window.db.in_memory
    assert window.history_banner.isVisible() and "lost when you quit" in window.history_banner.text()
    chat = window.db.create_conversation("kept in memory")
    window.db.add_message(chat, "user", "hello")
    window.conversations.open(chat)  # its id means nothing to the next start's history: not remembered
    assert window.chat_view.conversation_id == chat and window.store.open_conversation is None
    asked = _answer(monkeypatch, QMessageBox.StandardButton.Cancel)
    window.request_quit()
    qtbot.waitUntil(lambda: asked != [], timeout=5000)
    assert asked == [("confirmQuitInMemory", "Quit and lose this session's chats?")]
    qtbot.wait(50)
    assert window.isVisible()  # cancelled
    asked = _answer(monkeypatch, QMessageBox.StandardButton.Yes)
    window.request_quit()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=5000)
    assert len(asked) == 1


def test_an_in_memory_history_without_chats_quits_at_once_and_a_file_history_has_no_banner(qtbot, make_window, tmp_path, monkeypatch):
    window = _in_memory_window(make_window, tmp_path)
    asked = _answer(monkeypatch, QMessageBox.StandardButton.Cancel)
    window.request_quit()
    assert not window.isVisible() and asked == []
    (tmp_path / "other").mkdir()
    file_window = make_window(FAST, history=tmp_path / "other" / "history.sqlite3", start=False)
    assert not file_window.history_banner.isVisible()
    file_window.db.add_message(file_window.db.create_conversation("on disk"), "user", "hello")
    file_window.request_quit()
    assert not file_window.isVisible() and asked == []


def test_an_in_memory_history_leaves_the_sampling_of_the_file_s_chats_as_it_was(qtbot, make_window, tmp_path, monkeypatch):
    """Bug: a history kept in memory numbers its chats 1, 2, … as the file's; choosing a preset in its chat 1 wrote
    ``ui.conversation_presets["1"]`` in settings.json, so the real chat 1 had that preset at the next start. Its chats'
    sampling is kept for the session only, apart from the file's entries, which stay as they were."""
    import json

    from app.gui.settings_store import SettingsStore

    settings_path = tmp_path / "config" / "settings.json"
    SettingsStore(settings_path).save(FAST)
    data = json.loads(settings_path.read_text())
    data["ui"]["conversation_presets"] = {"1": "Precise", "2": "Balanced"}  # the file's chats 1 and 2
    settings_path.write_text(json.dumps(data))
    history = tmp_path / "history.sqlite3"
    HistoryDB(history).close()
    raw = sqlite3.connect(history)
    raw.execute("PRAGMA user_version = 99")  # written by a newer SpecChat: opened in memory
    raw.close()
    window = make_window(None, history=history, start=False)
    assert window.db.in_memory and window.history_banner.isVisible()
    chat = window.db.create_conversation("kept in memory")
    assert chat == 1
    window.conversations.open(chat)
    assert window.store.conversation_preset(chat) is None  # not the file's chat 1's
    window.settings_pane.sampling.choose_preset("Creative")
    assert window.store.conversation_preset(chat) == "Creative"  # kept for the session
    window.conversations.new()
    window.settings_pane.sampling.choose_preset("Precise")  # a new chat not saved: remembered by none
    window.conversations.open(chat)
    assert window.settings_pane.sampling.preset.currentData() == "Creative"
    assert json.loads(settings_path.read_text())["ui"]["conversation_presets"] == {"1": "Precise", "2": "Balanced"}
    _answer(monkeypatch, QMessageBox.StandardButton.Yes)
    window.request_quit()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=5000)
    assert json.loads(settings_path.read_text())["ui"]["conversation_presets"] == {"1": "Precise", "2": "Balanced"}
