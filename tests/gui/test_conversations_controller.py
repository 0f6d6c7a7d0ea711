"""``Conversations`` built from only what it drives (no ``MainWindow``, no model): an in-memory history, the
conversation list, the chat view, the composer, the live graph and the sampling group, and a reply controller with
no reply streaming. Opening, starting, renaming, search and a JSON export imported back change what those widgets
show, and the window's title arrives as a signal."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QObject, Qt, Signal

from app.gui.conversations import Conversations
from app.gui.history_db import HistoryDB
from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.widgets.chat_view import ChatView
from app.gui.widgets.composer import Composer
from app.gui.widgets.conversation_list import ConversationList
from app.gui.widgets.live_graph import LiveGraph
from app.gui.widgets.sampling_group import SamplingGroup


class NoReplyStreaming(QObject):
    """The reply controller as ``Conversations`` uses it, while no reply streams (its signals emitted by hand)."""

    started = Signal(object)
    finished = Signal(object)
    active = None

    async def stop_in(self, conversation_id: int) -> None:
        raise AssertionError("no reply streams: nothing to stop")


@pytest.fixture
def parts(qtbot, tmp_path, request):
    """The controller and its widgets on an in-memory history, or on a history file with ``indirect`` "file"."""
    db = HistoryDB(tmp_path / "history.sqlite3" if getattr(request, "param", None) == "file" else ":memory:")
    store = SettingsStore(tmp_path / "settings.json")
    widgets = {
        "conversation_list": ConversationList(),
        "chat_view": ChatView(),
        "composer": Composer(),
        "live_graph": LiveGraph(),
        "sampling": SamplingGroup(store),
    }
    for widget in widgets.values():
        qtbot.addWidget(widget)
    said, titles, shown = [], [], []
    conversations = Conversations(db, store, NoReplyStreaming(), **widgets, say=lambda text, _ms: said.append(text))
    conversations.title_changed.connect(titles.append)
    conversations.shown.connect(shown.append)
    yield SimpleNamespace(db=db, store=store, conversations=conversations, said=said, titles=titles, shown=shown, **widgets)
    db.close()


def add_chat(db: HistoryDB, title: str, question: str, answer: str) -> int:
    conversation_id = db.create_conversation(title)
    db.add_message(conversation_id, "user", question)
    db.add_message(conversation_id, "assistant", answer)
    return conversation_id


def shown_texts(qtbot, chat_view: ChatView) -> list[tuple[str, str]]:
    """The messages in the chat view, once its bubbles are added (a turn of the event loop after it is filled)."""
    qtbot.waitUntil(lambda: chat_view.fully_loaded, timeout=5000)
    return [(widget.message.role, widget.message.content) for widget in chat_view.message_widgets()]


def test_opening_a_chat_shows_it_selects_it_and_titles_the_window(qtbot, parts):
    colours = add_chat(parts.db, "Colours", "Name three colours.", "Red, green and blue.")
    numbers = add_chat(parts.db, "Numbers", "Count to three.", "One, two, three.")
    parts.conversations.refresh()
    assert sorted(parts.conversation_list.ids()) == sorted([colours, numbers])

    parts.conversations.open(colours)
    assert parts.conversations.current_id == parts.chat_view.conversation_id == colours
    assert shown_texts(qtbot, parts.chat_view) == [("user", "Name three colours."), ("assistant", "Red, green and blue.")]
    assert parts.conversation_list.current_id() == colours
    assert (parts.titles, parts.shown) == (["Colours — SpecChat"], [colours])

    parts.conversations.new()
    assert parts.chat_view.conversation_id is None and shown_texts(qtbot, parts.chat_view) == []
    assert parts.conversation_list.current_id() is None
    assert (parts.titles[-1], parts.shown[-1]) == ("SpecChat", None)


def test_a_chat_deleted_elsewhere_is_dropped_from_the_list_when_opened(parts):
    kept = add_chat(parts.db, "Kept", "Hello?", "Hello.")
    gone = add_chat(parts.db, "Gone", "Bye?", "Bye.")
    parts.conversations.refresh()
    parts.db.delete_conversation(gone)  # (another window on the same history)
    parts.conversations.open(gone)
    assert parts.conversation_list.ids() == [kept] and parts.chat_view.conversation_id is None


def test_renaming_keeps_the_saved_title_and_refuses_an_empty_one(parts):
    chat = add_chat(parts.db, "Colours", "Name three colours.", "Red, green and blue.")
    parts.conversations.refresh()
    parts.conversations.open(chat)
    parts.conversations.rename(chat, "  Hues ")
    assert parts.db.conversation(chat).title == "Hues" and parts.titles[-1] == "Hues — SpecChat"
    parts.conversations.rename(chat, "   ")
    assert parts.said == ["a conversation title cannot be empty"] and parts.db.conversation(chat).title == "Hues"


def test_search_lists_only_the_matching_chats(parts):
    add_chat(parts.db, "Colours", "Name three colours.", "Red, green and blue.")
    numbers = add_chat(parts.db, "Numbers", "Count to three.", "One, two, three.")
    parts.conversation_list.search.setText("two")
    parts.conversations.refresh()
    assert parts.conversation_list.ids() == [numbers]


def test_a_json_export_imports_back_as_a_new_chat_shown(qtbot, parts, tmp_path):
    with pytest.raises(ValueError, match="nothing to export"):
        parts.conversations.export(tmp_path / "empty.json", "json")  # a new chat
    chat = add_chat(parts.db, "Colours", "Name three colours.", "Red, green and blue.")
    parts.conversations.open(chat)
    written = parts.conversations.export(tmp_path / "colours.json", "json")
    imported = parts.conversations.import_file(written)
    assert imported != chat and parts.chat_view.conversation_id == imported
    assert shown_texts(qtbot, parts.chat_view) == [("user", "Name three colours."), ("assistant", "Red, green and blue.")]
    assert sorted(parts.conversation_list.ids()) == sorted([chat, imported])
    listed = {cid: parts.conversation_list.item_for(cid).text() for cid in (chat, imported)}
    assert listed[chat].startswith("Colours") and listed[imported].startswith("Colours (imported)")  # two entries told apart


def test_a_refused_history_write_is_said_in_the_composer_and_the_status_bar(parts):
    parts.conversations.write_failed("the new title", sqlite3.OperationalError("database or disk is full"))
    assert parts.composer.error_text.startswith("Could not save the new title: ")
    assert parts.said == [parts.composer.error_text]


def test_deleting_the_chat_shown_opens_its_neighbour_in_the_list(qtbot, parts, monkeypatch, qasync_loop):
    """Newcomer trial: deleting the last chat of the list opened the top one; the one below opens, or the one above
    for the last."""
    import asyncio


    _deletes_without_asking(monkeypatch, parts)
    for name in ("One", "Two", "Three", "Four"):
        add_chat(parts.db, name, f"{name}?", f"{name}.")
    parts.conversations.refresh()
    order = [c.id for c in parts.db.conversations()]  # as the list shows them

    def delete(conversation_id: int) -> None:
        parts.conversations.open(conversation_id)
        task = asyncio.ensure_future(parts.conversations.delete(conversation_id))
        qtbot.waitUntil(task.done, timeout=5000)
        assert task.result()

    delete(order[1])
    assert parts.conversations.current_id == order[2]  # the one below
    delete(order[3])
    assert parts.conversations.current_id == order[2]  # the last: the one above

    for name in ("Red", "Blue", "Green"):  # newest first: Green, Blue, Red
        add_chat(parts.db, name, f"{name}?", f"{name}.")
    parts.conversation_list.search.setText("re")  # the list shows Green and Red, not Blue between them
    parts.conversations.refresh()
    green, red = [c.id for c in parts.db.conversations("re")]
    delete(green)
    assert parts.conversations.current_id == red  # its neighbour in the list searched, not Blue below it in the store


def test_the_delete_confirmation_names_its_action_and_defaults_to_cancel(qtbot, parts, monkeypatch, qasync_loop):
    """Desktop guidelines: a confirmation's button says what it does ("Delete"), not "Yes" (newcomer trial)."""
    import asyncio

    from PySide6.QtWidgets import QApplication, QMessageBox

    _no_reply_streams(monkeypatch, parts)
    conversation_id = add_chat(parts.db, "Bananas", "Tell me about bananas.", "Yellow.")
    parts.conversations.refresh()
    task = asyncio.ensure_future(parts.conversations.delete(conversation_id))

    def box() -> QMessageBox | None:
        return next((w for w in QApplication.topLevelWidgets() if w.objectName() == "confirmDelete" and w.isVisible()), None)

    qtbot.waitUntil(lambda: box() is not None, timeout=5000)
    buttons = {button.text(): button for button in box().buttons()}
    assert sorted(buttons) == ["&Delete", "Cancel"]  # (it said Yes)
    assert box().defaultButton() is buttons["Cancel"]
    buttons["&Delete"].click()
    qtbot.waitUntil(task.done, timeout=5000)
    assert task.result() is True and parts.db.conversation(conversation_id) is None


def test_the_delete_confirmation_counts_the_messages_shown_and_the_earlier_versions_apart(
    qtbot, parts, monkeypatch, qasync_loop
):
    """Newcomer trial: a chat showing 2 messages asked "… and its 5 messages?", counting the versions Regenerate
    kept; the question counts what the chat shows, then the earlier versions."""
    import asyncio

    from PySide6.QtWidgets import QApplication

    _no_reply_streams(monkeypatch, parts)
    conversation_id = add_chat(parts.db, "What is the capital of Italy?", "What is the capital of Italy?", "Rome.")
    answer = parts.db.messages(conversation_id)[-1].id
    for text in ("Rome!", "It is Rome.", "Rome, of course."):  # three regenerations: 5 messages stored, 2 shown
        answer = parts.db.add_message(conversation_id, "assistant", text, replaces=answer)
    assert parts.db.conversation(conversation_id).message_count == 5 and len(parts.db.messages(conversation_id)) == 2
    parts.conversations.refresh()
    task = asyncio.ensure_future(parts.conversations.delete(conversation_id))

    def box():
        return next((w for w in QApplication.topLevelWidgets() if w.objectName() == "confirmDelete" and w.isVisible()), None)

    qtbot.waitUntil(lambda: box() is not None, timeout=5000)
    assert box().text() == "Delete “What is the capital of Italy?” and its 2 messages (and 3 earlier versions)?"
    next(button for button in box().buttons() if button.text() == "Cancel").click()
    qtbot.waitUntil(task.done, timeout=5000)
    assert task.result() is False


def test_the_list_tooltip_counts_the_messages_shown_and_the_earlier_versions_apart(parts):
    """The chat list's tooltip said "5 messages" of a chat showing 2, counting the versions Regenerate kept; it
    counts what the chat shows, then the earlier versions, as the delete confirmation does."""
    import time

    regenerated = add_chat(parts.db, "Italy", "What is the capital of Italy?", "Rome.")
    answer = parts.db.messages(regenerated)[-1].id
    for text in ("Rome!", "It is Rome.", "Rome, of course."):  # three regenerations: 5 messages stored, 2 shown
        answer = parts.db.add_message(regenerated, "assistant", text, replaces=answer)
    plain = add_chat(parts.db, "Colours", "Name three colours.", "Red, green and blue.")
    parts.conversations.refresh()

    def tooltip(conversation_id: int) -> str:
        return parts.conversation_list.item_for(conversation_id).toolTip()

    def at(conversation_id: int) -> str:
        return time.strftime("%H:%M", time.localtime(parts.db.conversation(conversation_id).updated_at))

    assert tooltip(regenerated) == f"Italy\n2 messages (and 3 earlier versions) · {at(regenerated)}"
    assert tooltip(plain) == f"Colours\n2 messages · {at(plain)}"


def test_the_export_suggests_the_title_without_trailing_punctuation(qtbot, parts, monkeypatch, qasync_loop):
    """Newcomer trial: the Markdown export suggested "Give me three tips for better sleep_.md" (the title's last
    "." read "_"); trailing punctuation is dropped, other unsafe characters are still replaced."""
    import asyncio

    import app.gui.conversations as module

    suggested = []

    async def cancelled(*_args, **kwargs):
        suggested.append(kwargs["suggested"])
        return ""

    monkeypatch.setattr(module, "choose_file", cancelled)
    for title in ("Give me three tips for better sleep.", "Why is the sky blue?", "a/b: c*d", "¿Qué? (imported)", "?!"):
        parts.conversations.open(add_chat(parts.db, title, "Hi", "Hello."))
        for fmt in ("md", "json"):
            task = asyncio.ensure_future(parts.conversations.export_dialog(fmt))
            qtbot.waitUntil(task.done, timeout=5000)
    assert suggested == [
        "Give me three tips for better sleep.md", "Give me three tips for better sleep.json",
        "Why is the sky blue.md", "Why is the sky blue.json",
        "a_b_ c_d.md", "a_b_ c_d.json",
        "Qué_ _imported.md", "Qué_ _imported.json",
        "chat.md", "chat.json",
    ]  # fmt: skip


def test_a_long_first_line_titles_the_chat_up_to_a_word_and_the_tooltip_shows_it_whole(parts):
    """Newcomer trial: three chats read "Repeat the following text exactly, word for wor…", the "…" part of the
    title (Rename showed it), and the tooltip repeated the cut title. The title stops at a word, without "…" (the
    list elides it on screen), and the tooltip shows the whole first line."""
    import time

    from app.gui.chat_titles import title_from

    line = "Repeat the following text exactly, word for word, and keep its line breaks as they are"
    question = f"{line}\nThe quick brown fox."
    title = title_from(question)
    assert title == "Repeat the following text exactly, word for word, and keep"
    assert title_from("Short question?\nmore") == "Short question?"
    assert title_from("x" * 100) == "x" * 60  # one word longer than a title: cut, still without "…"
    long_chat = add_chat(parts.db, title, question, "Sure.")
    renamed = add_chat(parts.db, "Fox", question, "Sure.")  # renamed by the user: its own title only
    parts.conversations.refresh()

    def tooltip(conversation_id: int) -> str:
        return parts.conversation_list.item_for(conversation_id).toolTip()

    def at(conversation_id: int) -> str:
        return time.strftime("%H:%M", time.localtime(parts.db.conversation(conversation_id).updated_at))

    assert parts.conversation_list.item_for(long_chat).data(Qt.ItemDataRole.EditRole) == title  # what Rename edits
    assert tooltip(long_chat) == f"{line}\n2 messages · {at(long_chat)}"
    assert tooltip(renamed) == f"Fox\n2 messages · {at(renamed)}"


@pytest.mark.parametrize("parts", ["file", "memory"], indirect=True)
def test_deleting_a_chat_forgets_its_sampling_in_the_settings_file(qtbot, parts, monkeypatch, qasync_loop, tmp_path):
    """Newcomer trial: a deleted chat's ``ui.conversation_presets["10"]`` stayed in settings.json; a history started
    afresh numbers its chats from 1 again, and a new chat took an old one's sampling. Deleting a chat removes its
    entries from the file; a chat of a history kept in memory, its entries of the session, the file's (its chats
    numbered the same) left as they were."""
    import asyncio
    import json


    _deletes_without_asking(monkeypatch, parts)
    kept, gone = add_chat(parts.db, "Kept", "Hello?", "Hello."), add_chat(parts.db, "Gone", "Bye?", "Bye.")
    store = parts.store
    files_chats = {str(kept): "Balanced", str(gone): "Balanced"}  # the history file's chats of the same numbers
    if parts.db.in_memory:
        (tmp_path / "settings.json").write_text(json.dumps({"version": 1, "ui": {"conversation_presets": files_chats}}))
        store.load()
    store.set_conversation_preset(kept, "Precise")
    store.set_conversation_preset(gone, "Creative")
    parts.conversations.refresh()
    task = asyncio.ensure_future(parts.conversations.delete(gone))
    qtbot.waitUntil(task.done, timeout=5000)
    assert task.result() is True
    written = json.loads((tmp_path / "settings.json").read_text())
    assert written["ui"]["conversation_presets"] == (files_chats if parts.db.in_memory else {str(kept): "Precise"})
    assert store.conversation_preset(gone) is None and store.conversation_preset(kept) == "Precise"


def test_the_settings_of_chats_the_history_lacks_are_dropped_at_start(qtbot, tmp_path):
    """Entries of chats the history has not (deleted by an older SpecChat, or a history started afresh) are dropped
    when the window starts on them, and written so with the next save, so that a new chat numbered as an old one
    starts with the sampling chosen, not the old chat's; a history kept in memory (the file could not be opened)
    keeps them all and shows none for its chats: its numbers are not the file's."""
    import json

    settings_path = tmp_path / "settings.json"
    settings_path.write_text(json.dumps({
        "version": 1, "ui": {"conversation_presets": {"1": "Creative", "2": "Precise", "10": "Creative", "x": "Precise"}},
    }))  # fmt: skip
    for history, kept in ((":memory:", {"1", "2", "10", "x"}), (tmp_path / "history.sqlite3", {"2"})):
        db = HistoryDB(history)
        for number in range(1, 3):
            db.create_conversation(f"Chat {number}")
        db.delete_conversation(1)
        store = _controller_over(qtbot, db, settings_path)
        assert set(store.ui_state["conversation_presets"]) == kept
        assert store.conversation_preset(1) is None
        assert store.conversation_preset(2) == ("Precise" if kept == {"2"} else None)
        store.save_ui_state(AppSettings(), {})  # (the window's save at quit)
        assert set(json.loads(settings_path.read_text())["ui"]["conversation_presets"]) == kept
        db.close()


def test_a_plain_chat_file_imports_as_a_new_chat_shown(qtbot, parts, tmp_path):
    """A chat in OpenAI's format, as Jan or LM Studio users have them, imports through the same door as an export."""
    import json

    path = tmp_path / "jan-thread.json"
    path.write_text(json.dumps({"messages": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": [{"type": "text", "text": "Bonjour."}]},
    ]}))  # fmt: skip
    imported = parts.conversations.import_file(path)
    assert parts.chat_view.conversation_id == imported and parts.conversation_list.ids() == [imported]
    assert shown_texts(qtbot, parts.chat_view) == [("user", "Say hello."), ("assistant", "Bonjour.")]
    assert (parts.titles[-1], parts.db.conversation(imported).system_prompt) == ("Say hello. — SpecChat", "Answer in French.")


def test_the_chat_a_reply_streams_in_is_marked_in_the_list_until_it_ends(parts):
    """Newcomer trial: a reply streaming in a chat left showed nothing in the list. Its entry reads "· replying…" after
    its title from the reply's start to its end (stopped, failed or complete), through refreshes; renaming it in
    place edits the title alone."""
    from app.gui.widgets.conversation_list import REPLYING_SUFFIX

    story, other = add_chat(parts.db, "Story", "Tell one.", "Once."), add_chat(parts.db, "Other", "Hi?", "Hi.")
    parts.conversations.refresh()
    listing, replies = parts.conversation_list, parts.conversations._replies

    def shown() -> dict[int, str]:
        return {cid: listing.item_for(cid).text() for cid in listing.ids()}

    assert shown() == {story: "Story", other: "Other"}
    replies.started.emit(SimpleNamespace(conversation_id=story))
    assert shown() == {story: "Story" + REPLYING_SUFFIX, other: "Other"} and REPLYING_SUFFIX == " · replying…"
    parts.conversations.open(other)  # the chat left
    parts.conversations.refresh()
    assert shown() == {story: "Story" + REPLYING_SUFFIX, other: "Other"}
    item = listing.item_for(story)
    assert item.data(Qt.ItemDataRole.EditRole) == "Story"  # what an edit in place starts from
    renamed = []
    listing.renamed.connect(lambda *args: renamed.append(args))
    item.setData(Qt.ItemDataRole.EditRole, "Saga")  # (an edit in place ends so)
    assert renamed == [(story, "Saga")] and item.text() == "Saga" + REPLYING_SUFFIX
    parts.conversations.rename(story, "Saga")  # (as the window does)
    replies.finished.emit(None)  # (a stopped or failed reply ends so too)
    assert shown() == {story: "Saga", other: "Other"}


def test_a_history_kept_in_memory_keeps_its_chats_unsent_messages_out_of_the_settings_file(qtbot, parts, tmp_path):
    """Chats of a history kept in memory (the file could not be opened) keep their unsent messages while the window
    is open, but their numbers are not the file's: none is written, and those the file holds (the older single one
    included) are left for the history on disk."""
    import json

    on_file = {"unsent_messages": {"1": "for the file's chat 1"}, "unsent_message": "old"}
    parts.store.save_ui_state(AppSettings(), on_file)
    store = SettingsStore(tmp_path / "settings.json")
    store.load()
    assert store.ui_state["unsent_messages"] == {"1": "for the file's chat 1"}  # (kept by the store, not the window)
    widgets = [ConversationList(), ChatView(), Composer(), LiveGraph(), SamplingGroup(store)]
    for widget in widgets:
        qtbot.addWidget(widget)
    conversations = Conversations(parts.db, store, NoReplyStreaming(), *widgets, say=lambda _text, _ms: None)
    composer = widgets[2]
    first, second = add_chat(parts.db, "One", "1?", "1."), add_chat(parts.db, "Two", "2?", "2.")
    conversations.refresh()
    conversations.show_first()
    assert conversations.current_id == second and composer.text() == ""  # not the file's chat 1's, nor the old one
    composer.set_text("typed in Two")
    conversations.open(first)
    composer.set_text("typed in One")
    conversations.open(second)
    assert composer.text() == "typed in Two"
    conversations.open(first)
    assert composer.text() == "typed in One"
    conversations.keep_draft()  # (at quit)
    store.save_ui_state(AppSettings(), {})
    written = json.loads((tmp_path / "settings.json").read_text())["ui"]
    assert written["unsent_messages"] == {"1": "for the file's chat 1"} and written["unsent_message"] == "old"


def test_a_chats_unsent_message_shown_again_is_no_typing_that_withdraws_why_the_settings_refuse(parts):
    """Why the settings refused a send stays when another chat is shown (only what was said of the last chat's send
    goes), also when that chat's own unsent message fills the box: that is no typing of the user's."""
    first, second = add_chat(parts.db, "One", "1?", "1."), add_chat(parts.db, "Two", "2?", "2.")
    parts.conversations.open(first)
    parts.composer.set_text("typed in One")
    parts.conversations.open(second)
    parts.composer.show_blocked("Fix the settings first: Temperature must be at most 2")
    parts.conversations.open(first)
    assert parts.composer.text() == "typed in One"
    assert parts.composer.error_text == "Fix the settings first: Temperature must be at most 2"


def test_a_chat_number_too_long_for_an_int_in_the_settings_is_dropped_at_start(qtbot, tmp_path):
    """A settings file edited by hand with a chat's entry keyed by 5,000 digits stopped the window at start (Python's
    ``int`` refuses over 4,300 digits: "Exceeds the limit (4300 digits) for integer string conversion"): the entry is
    dropped as one of no chat, the others kept."""
    import json

    settings_path = tmp_path / "settings.json"
    presets = {"9" * 5000: "Creative", "1": "Precise"}
    settings_path.write_text(json.dumps({"version": 1, "ui": {"conversation_presets": presets}}))
    db = HistoryDB(tmp_path / "history.sqlite3")
    db.create_conversation("Chat 1")
    store = _controller_over(qtbot, db, settings_path)
    assert store.ui_state["conversation_presets"] == {"1": "Precise"}
    db.close()


def _no_reply_streams(monkeypatch, parts) -> None:
    """No chat has a reply streaming (a delete does not wait to stop one)."""

    async def nothing_streams(_conversation_id):
        return None

    monkeypatch.setattr(parts.conversations._replies, "stop_in", nothing_streams)


def _deletes_without_asking(monkeypatch, parts) -> None:
    """Every delete's confirmation answers Yes, and no reply streams."""
    from PySide6.QtWidgets import QMessageBox

    import app.gui.conversations as module

    async def yes(*_args, **_kwargs):
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(module, "message_box", yes)
    _no_reply_streams(monkeypatch, parts)


def _controller_over(qtbot, db, settings_path):
    """A ``Conversations`` built over ``db`` and the settings file at ``settings_path`` with its own widgets;
    returns the settings store it read (what it dropped or kept is there)."""
    store = SettingsStore(settings_path)
    store.load()
    widgets = [ConversationList(), ChatView(), Composer(), LiveGraph(), SamplingGroup(store)]
    for widget in widgets:
        qtbot.addWidget(widget)
    Conversations(db, store, NoReplyStreaming(), *widgets, say=lambda _text, _ms: None)
    return store


def test_a_title_cut_from_a_long_first_line_ends_in_an_ellipsis_in_the_list(parts):
    """Newcomer trial: "Repeat the following text exactly, word for word, and keep" read as the whole request, its
    cut unmarked (the stored title has no "…": Rename showed it). The list shows "…" after a title cut from its first
    message's line, Rename edits the title alone, and a title the user chose or a line that fit shows as it is."""
    from app.gui.chat_titles import title_from

    question = "Repeat the following text exactly, word for word, and keep its line breaks as they are\nThe fox."
    title = title_from(question)
    long_chat = add_chat(parts.db, title, question, "Sure.")
    renamed = add_chat(parts.db, "Repeat the following", question, "Sure.")  # the user's title, shorter than the line
    short = add_chat(parts.db, title_from("What is a fox?"), "What is a fox?", "An animal.")
    parts.conversations.refresh()
    listing = parts.conversation_list
    assert listing.item_for(long_chat).text() == f"{title}…"
    assert listing.item_for(long_chat).data(Qt.ItemDataRole.EditRole) == title  # what Rename edits: no "…"
    assert listing.item_for(renamed).text() == "Repeat the following"
    assert listing.item_for(short).text() == "What is a fox?"
    listing.set_replying(long_chat)
    assert listing.item_for(long_chat).text() == f"{title}… · replying…"
    listing.set_replying(None)
    listing.item_for(long_chat).setData(Qt.ItemDataRole.EditRole, "Fox text")  # renamed in place
    assert listing.item_for(long_chat).text() == "Fox text"
    parts.conversations.rename(long_chat, "Fox text")  # (what the window does on the list's ``renamed``)
    assert listing.item_for(long_chat).text() == "Fox text"
