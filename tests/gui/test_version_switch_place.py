"""A version switch ("‹ 2/2 ›") keeps the message switched where it was on screen and, pressed with the keyboard, keeps
the focus on the switch (newcomer trial: Space on › sent the focus to "New chat" at the top of the window, the
pressed button being destroyed with its bubble, and the view jumped to the bottom of the chat)."""

from __future__ import annotations

from conftest import FAST
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.gui.history_db import HistoryDB


def _chat_with_a_switched_reply(history) -> tuple[int, int, int]:
    """A chat of 20 messages whose 12th, a reply, has two versions, followed by 6 and 8 messages; returns the chat's
    id and the two versions' ids (the second one shown)."""
    db = HistoryDB(history)
    chat = db.create_conversation("Long chat")
    for turn in range(5):
        db.add_message(chat, "user", f"Question {turn}?")
        db.add_message(chat, "assistant", f"Answer {turn}.\n\nWith a second paragraph.")
    db.add_message(chat, "user", "Question 5?")
    first = db.add_message(chat, "assistant", "Answer 5, first version.")
    for turn in range(6, 9):
        db.add_message(chat, "user", f"Question {turn} after the first version?")
        db.add_message(chat, "assistant", f"Answer {turn} after the first version.\n\nWith a second paragraph.")
    second = db.add_message(chat, "assistant", "Answer 5, second version.", replaces=first)
    for turn in range(6, 10):
        db.add_message(chat, "user", f"Question {turn}?")
        db.add_message(chat, "assistant", f"Answer {turn}.\n\nWith a second paragraph.")
    db.close()
    return chat, first, second


def test_the_keyboard_switch_keeps_the_message_in_place_and_the_focus_on_the_switch(qtbot, make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    chat, first, second = _chat_with_a_switched_reply(history)
    window = make_window(FAST, history=history, start=False)
    window.activateWindow()
    view = window.chat_view
    assert view.conversation_id == chat
    qtbot.waitUntil(lambda: view.fully_loaded, timeout=5000)
    view.show_earlier()  # the switched reply is older than the first page
    qtbot.waitUntil(lambda: view.fully_loaded and view.widget(second) is not None, timeout=5000)
    reply = view.widget(second)
    bar = view.scroll_area.verticalScrollBar()
    # the bubbles get their sizes from later layout events: once (a fresh clone's suite, 2 busy cores) the content
    # below the reply was still short when it was placed (value 217, maximum 395), so wait for it first
    qtbot.waitUntil(lambda: bar.maximum() - (view._content_y(reply) - 100) > 200, timeout=5000)
    bar.setValue(max(0, view._content_y(reply) - 100))  # the reply 100 px below the top of the view
    qtbot.waitUntil(lambda: view._content_y(reply) - bar.value() == 100, timeout=3000)
    assert bar.value() < bar.maximum() - 200  # (far from the bottom: a jump there would show)
    assert reply.version_label.text() == "2/2"

    reply.previous_version.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.keyClick(reply.previous_version, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: view.fully_loaded and view.widget(first) is not None, timeout=5000)
    qtbot.wait(50)  # (laid out)
    shown = view.widget(first)
    assert shown.version_label.text() == "1/2" and not shown.previous_version.isEnabled()
    assert QApplication.focusWidget() is shown.next_version  # the button still enabled at version 1
    assert view._content_y(shown) - bar.value() == 100  # where the switched reply was
    assert view.message_widgets()[-1].message.content.startswith("Answer 8 after the first version.")

    qtbot.keyClick(shown.next_version, Qt.Key.Key_Space)  # and back: the focus stays on the switch
    qtbot.waitUntil(lambda: view.fully_loaded and view.widget(second) is not None, timeout=5000)
    qtbot.wait(50)
    back = view.widget(second)
    assert back.version_label.text() == "2/2" and QApplication.focusWidget() is back.previous_version
    assert view._content_y(back) - bar.value() == 100


def _switched_and_held(qtbot, make_window, history):
    """A window on :func:`_chat_with_a_switched_reply`'s chat, its switched reply 100 px below the top of the view,
    switched to its first version with the ‹ button, which the view holds there; returns ``(window, chat)``."""
    chat, first, second = _chat_with_a_switched_reply(history)
    window = make_window(FAST, history=history, start=False)
    view = window.chat_view
    qtbot.waitUntil(lambda: view.fully_loaded, timeout=5000)
    view.show_earlier()
    qtbot.waitUntil(lambda: view.fully_loaded and view.widget(second) is not None, timeout=5000)
    bar = view.scroll_area.verticalScrollBar()
    reply = view.widget(second)
    qtbot.waitUntil(lambda: bar.maximum() - (view._content_y(reply) - 100) > 200, timeout=5000)
    bar.setValue(max(0, view._content_y(reply) - 100))  # (as the test above: the reply near the top)
    qtbot.waitUntil(lambda: view._content_y(reply) - bar.value() == 100, timeout=3000)
    reply.previous_version.click()
    qtbot.waitUntil(lambda: view.fully_loaded and view.widget(first) is not None, timeout=5000)
    qtbot.wait(50)
    assert view._content_y(view.widget(first)) - bar.value() == 100  # held where the switched reply was
    return window, chat


def test_a_message_sent_after_a_switch_is_followed_to_the_bottom(qtbot, make_window, tmp_path):
    """After ‹ or › the view holds the switched reply in place; the next message sent and its reply are followed
    to the bottom (a newcomer's streamed below the view, its footer and Continue out of sight)."""
    history = tmp_path / "history.sqlite3"
    window, chat = _switched_and_held(qtbot, make_window, history)
    view, bar = window.chat_view, window.chat_view.scroll_area.verticalScrollBar()
    db = HistoryDB(history)
    sent = db.messages(db.add_message(chat, "user", "A new question?\n\n" + "Its long details. " * 200) and chat)[-1]
    view.append_message(sent)
    reply = db.messages(db.add_message(chat, "assistant", "") and chat)[-1]
    widget = view.append_message(reply, live=True)
    for length in range(1, 6):  # the reply grows as it streams
        reply.content = "A streamed paragraph of the answer.\n\n" * (20 * length)
        view.update_message(reply, live=True)
        qtbot.wait(20)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() and view._content_y(widget) + widget.height() > bar.value(),
                    timeout=3000)
    db.close()


def test_a_reply_continued_after_a_switch_is_followed_to_the_bottom(qtbot, make_window, tmp_path):
    """Review: Continue writes into the last reply in place (no bubble appended), so after ‹ or › the view still held
    the switched reply and the continued text grew below it."""
    window, _ = _switched_and_held(qtbot, make_window, tmp_path / "history.sqlite3")
    view, bar = window.chat_view, window.chat_view.scroll_area.verticalScrollBar()
    last = view.message_widgets()[-1].message  # the chat's last reply, continued in place
    window.replies.started.emit(last)
    for length in range(1, 6):
        last.content += "\n\nMore of the continued answer." * (10 * length)
        view.update_message(last, live=True)
        qtbot.wait(20)
    widget = view.widget(last.id)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum() and view._content_y(widget) + widget.height() > bar.value(),
                    timeout=3000)
