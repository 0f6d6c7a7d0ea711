"""A message sent while a reply streams in another chat is refused with that chat named, so Stop (Esc) is known to
stop a reply the user does not see."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import send_and_wait


def test_a_message_sent_while_another_chat_replies_names_that_chat(qtbot, make_window):
    """A README trial: with a story streaming in chat "Write a long story about a dragon.", the user opened an
    earlier chat and pressed Enter; the box said "A reply is being generated: wait for it, or press Stop (Esc)" with
    no reply in sight, and Esc would have stopped the story in the other chat."""
    window = make_window(FAST.with_values(max_new_tokens=24))
    send_and_wait(qtbot, window, "Say hello.")
    first = window.chat_view.conversation_id
    window.choice.apply(window.settings.with_values(max_new_tokens=400))
    window.conversations.new()
    window.composer.set_text("Write a long story about a dragon.")
    window.composer.submit()
    qtbot.waitUntil(lambda: window.active is not None and window.active.recorder.last_step is not None, timeout=120_000)
    window.conversations.open(first)
    window.composer.set_text("Another question?")
    window.composer.submit()
    assert window.composer.error_text == (
        "A reply is being generated in “Write a long story about a dragon.”: wait for it, or press Stop (Esc).")
    assert window.composer.text() == "Another question?"  # kept for later
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.chat.stop()
    assert window.composer.error_text == ""
