"""What is typed in the message box and not sent is each chat's own: it stays with its chat when another is opened,
and it is still there after SpecChat is closed and started again (trials: "draft text" typed, then Ctrl+Q, and the
next start showed an empty box; "draft for five" typed in chat A, then chat B clicked: the text stayed in the box,
and Enter sent it to chat B)."""

from __future__ import annotations

import asyncio
import json

from conftest import FAST
from gui_helpers import send_and_wait, two_chats
from helpers import engine_refuses_long_system_prompts


def saved_ui(tmp_path) -> dict:
    return json.loads((tmp_path / "config" / "settings.json").read_text(encoding="utf-8"))["ui"]


def click(window, conversation_id: int) -> None:
    """Pick a chat in the list, as a click does."""
    item = window.conversation_list.item_for(conversation_id)
    window.conversation_list.list.setCurrentItem(item)
    assert window.conversations.current_id == conversation_id


def test_a_message_typed_but_not_sent_is_in_the_box_again_after_a_restart(make_window, tmp_path):
    window = make_window(start=False)
    window.composer.set_text("half a question 🐉 龍\nsecond line")
    window.close()
    assert saved_ui(tmp_path)["unsent_messages"] == {"new": "half a question 🐉 龍\nsecond line"}
    again = make_window(settings=None, start=False)
    assert again.composer.text() == "half a question 🐉 龍\nsecond line"
    again.composer.clear()  # (sending empties the box: nothing comes back)
    again.close()
    third = make_window(settings=None, start=False)
    assert third.composer.text() == ""
    assert "unsent_messages" not in third.store.ui_state


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

    from app.gui.settings_store import UNSENT_MESSAGES

    window = make_window(start=False)
    state_before = window.store.ui_state
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "typed key by key")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Backspace)
    assert window.composer.text() == "typed key by ke"
    assert window.store.ui_state == state_before and UNSENT_MESSAGES not in window.store.ui_state
    window.close()
    assert saved_ui(tmp_path)[UNSENT_MESSAGES] == {"new": "typed key by ke"}
    assert make_window(settings=None, start=False).composer.text() == "typed key by ke"


def test_each_chat_keeps_its_own_unsent_message(make_window):
    """Newcomer trial: "draft for five" typed in chat A stayed in the box when chat B was clicked."""
    window = make_window(start=False)
    a, b = two_chats(window, "A", "B")
    click(window, a)
    window.composer.set_text("draft for five")
    click(window, b)
    assert window.composer.text() == ""  # B has none
    window.composer.set_text("B's own words")
    click(window, a)
    assert window.composer.text() == "draft for five"
    assert window.composer.edit.textCursor().position() == len("draft for five")  # (typing goes on at its end)
    click(window, b)
    assert window.composer.text() == "B's own words"
    window.conversations.new()
    assert window.composer.text() == ""  # a new chat starts empty
    click(window, a)
    assert window.composer.text() == "draft for five"


def test_a_restart_gives_each_chat_its_unsent_message_back(make_window, tmp_path):
    window = make_window(start=False)
    a, b = two_chats(window, "A", "B")
    click(window, a)
    window.composer.set_text("draft in A")
    click(window, b)
    window.composer.set_text("draft in B")
    window.close()
    assert saved_ui(tmp_path)["unsent_messages"] == {str(a): "draft in A", str(b): "draft in B"}
    again = make_window(settings=None, start=False)
    assert again.conversations.current_id == b and again.composer.text() == "draft in B"
    click(again, a)
    assert again.composer.text() == "draft in A"
    click(again, b)
    assert again.composer.text() == "draft in B"


def test_the_one_unsent_message_of_an_older_specchat_goes_to_the_chat_shown(make_window, tmp_path):
    """An older SpecChat kept one unsent message for the window (``ui.unsent_message``): the first start shows it
    in the chat opened, whose own from then on it is; no other chat gets it."""
    window = make_window(start=False)
    a, b = two_chats(window, "A", "B")
    click(window, a)
    window.close()
    _edit_saved_ui(tmp_path, unsent_message="written by 0.9")
    again = make_window(settings=None, start=False)
    assert again.conversations.current_id == a and again.composer.text() == "written by 0.9"
    click(again, b)
    assert again.composer.text() == ""
    again.close()
    ui = saved_ui(tmp_path)
    assert ui["unsent_messages"] == {str(a): "written by 0.9"} and "unsent_message" not in ui
    third = make_window(settings=None, start=False)
    assert third.conversations.current_id == b and third.composer.text() == ""
    click(third, a)
    assert third.composer.text() == "written by 0.9"


def test_deleting_a_chat_drops_its_unsent_message(qtbot, make_window, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    import app.gui.conversations as module

    async def yes(*_args, **_kwargs):
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(module, "message_box", yes)
    window = make_window(start=False)
    a, b = two_chats(window, "A", "B")
    c = window.db.create_conversation("C")
    window.db.add_message(c, "user", "Hey")
    window.conversations.refresh()
    for chat, draft in ((a, "draft in A"), (b, "draft in B"), (c, "draft in C")):
        click(window, chat)
        window.composer.set_text(draft)

    def delete(conversation_id: int) -> None:
        task = asyncio.ensure_future(window.conversations.delete(conversation_id))
        qtbot.waitUntil(task.done, timeout=5000)
        assert task.result() is True

    delete(a)  # not the chat shown: the box keeps C's
    assert window.composer.text() == "draft in C"
    assert saved_ui(tmp_path).get("unsent_messages", {}) == {str(b): "draft in B", str(c): "draft in C"}
    delete(c)  # the chat shown: its neighbour opens with its own
    assert window.conversations.current_id == b and window.composer.text() == "draft in B"
    assert saved_ui(tmp_path)["unsent_messages"] == {str(b): "draft in B"}  # (C's went with it)
    window.conversations.new()
    window.composer.set_text("draft in a new chat")
    click(window, b)
    delete(b)  # the last chat: a new chat shows, with what was typed in one
    assert window.conversations.current_id is None and window.composer.text() == "draft in a new chat"
    window.close()
    assert saved_ui(tmp_path)["unsent_messages"] == {"new": "draft in a new chat"}


def test_unsent_messages_of_chats_gone_or_not_text_are_dropped_at_start(make_window, tmp_path):
    """A settings file edited by hand, or holding a chat deleted by an older SpecChat: its entries that are not a
    chat of the history with a text are left out, the others kept."""
    window = make_window(start=False)
    a, b = two_chats(window, "A", "B")
    click(window, b)
    window.close()
    _edit_saved_ui(tmp_path, unsent_messages={str(a): "kept", "99": "a chat gone", "x": "no chat",
                                              str(b): ["not", "text"], "9" * 5000: "?"})
    again = make_window(settings=None, start=False)
    assert again.composer.text() == ""
    click(again, a)
    assert again.composer.text() == "kept"
    again.close()
    assert saved_ui(tmp_path)["unsent_messages"] == {str(a): "kept"}
    _edit_saved_ui(tmp_path, unsent_messages="not an object")
    assert make_window(settings=None, start=False).composer.text() == ""


def test_sending_clears_the_chats_unsent_message(qtbot, make_window, tmp_path):
    window = make_window()
    a, b = two_chats(window, "A", "B")
    click(window, b)
    window.composer.set_text("kept for later")
    click(window, a)
    send_and_wait(qtbot, window, "Say hi.")
    assert window.composer.text() == ""
    click(window, b)
    assert window.composer.text() == "kept for later"
    click(window, a)
    assert window.composer.text() == ""  # what was sent is no draft
    window.close()
    assert saved_ui(tmp_path)["unsent_messages"] == {str(b): "kept for later"}


def test_a_reply_failing_in_a_chat_left_puts_its_message_back_in_that_chat(qtbot, make_window, tmp_path, monkeypatch):
    """A reply that failed before its first token refilled the box of the chat shown only: sent in chat A, chat B
    opened before the failure, the message went back nowhere and the failure was said in B's box."""
    engine_refuses_long_system_prompts(monkeypatch)  # chat A's does not fit in n_ctx: the engine refuses the reply
    window = make_window(FAST.with_values(n_ctx=64))
    a, b = two_chats(window, "Chat A", "Chat B")
    window.db.set_system_prompt(a, "You are a helpful assistant. " * 20)
    click(window, a)
    window.composer.set_text("Are you there?")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.submit()
        click(window, b)  # before the first token
    assert finished.args[0] is None  # no reply
    assert window.composer.text() == "" and window.composer.error_text == ""  # B's box is B's
    status = window.statusBar().currentMessage()
    assert status.startswith("Could not generate the reply in “Chat A”: Always kept 'auto' pins the"), status
    assert status.endswith(" (your message is back in its box: open it and press Send to try again)"), status
    click(window, a)
    assert window.composer.text() == "Are you there?"  # Send retries it
    assert [(m.role, m.content) for m in window.db.messages(a)][-1] == ("user", "Are you there?")
    click(window, b)
    window.close()
    assert saved_ui(tmp_path)["unsent_messages"] == {str(a): "Are you there?"}


def _edit_saved_ui(tmp_path, **values) -> None:
    """Write ``values`` into the settings file's ``ui`` section, as a hand edit or an older SpecChat would."""
    path = tmp_path / "config" / "settings.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["ui"].update(values)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_a_message_typed_and_not_sent_is_on_disk_a_second_after_typing_stops(qtbot, make_window, tmp_path):
    """What was typed reached the settings file only at quit: a crash or kill lost it. It is written once typing
    has stopped for a second (not per keystroke), and at once when another chat is shown; a window started on that
    folder while the first one never quit (as a killed one leaves it) shows each chat's own."""
    from app.gui.conversations import DRAFT_SAVE_MS

    window = make_window(start=False)
    a, b = two_chats(window, "A", "B")
    click(window, a)
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "typed in A")
    assert "unsent_messages" not in saved_ui(tmp_path)  # (not written on each keystroke)
    qtbot.waitUntil(lambda: saved_ui(tmp_path).get("unsent_messages") == {str(a): "typed in A"}, timeout=3000)
    qtbot.keyClicks(window.composer.edit, " and on")
    click(window, b)  # another chat shown: written at once, no wait
    assert saved_ui(tmp_path)["unsent_messages"] == {str(a): "typed in A and on"}
    assert saved_ui(tmp_path)["open_conversation"] == b
    qtbot.keyClicks(window.composer.edit, "B's words")
    qtbot.wait(DRAFT_SAVE_MS + 500)
    assert saved_ui(tmp_path)["unsent_messages"] == {str(a): "typed in A and on", str(b): "B's words"}
    second = make_window(settings=None, start=False)  # the first window never quit
    assert second.conversations.current_id == b and second.composer.text() == "B's words"
    click(second, a)
    assert second.composer.text() == "typed in A and on"


def test_a_message_sent_leaves_the_file_once_the_box_is_empty(qtbot, make_window, tmp_path):
    """Emptying the box (as sending does) drops the chat's entry from the file after the same pause."""
    from app.gui.conversations import DRAFT_SAVE_MS

    window = make_window(start=False)
    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, "soon sent")
    qtbot.waitUntil(lambda: saved_ui(tmp_path).get("unsent_messages") == {"new": "soon sent"}, timeout=3000)
    window.composer.clear()
    qtbot.wait(DRAFT_SAVE_MS + 500)
    assert "unsent_messages" not in saved_ui(tmp_path)
