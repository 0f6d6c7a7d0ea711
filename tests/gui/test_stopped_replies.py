"""Replies the user stopped (Esc, Stop) keep the actions their text calls for: a Compare stopped during its plain
run keeps Copy (newcomer trial: its header showed only "Regenerate", its plain column full of text); a local reply
stopped offers Continue, as LM Studio and Jan do (a remote one and a Compare do not)."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import click
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.gui.reply_format import can_continue, stopped_at_limit


def test_a_compare_stopped_during_its_plain_run_copies_that_runs_text(qtbot, make_window):
    window = make_window(FAST.with_values(max_new_tokens=400))
    window.composer.set_text("Write a long story about a brave knight.")
    window.composer.submit_compare()
    qtbot.waitUntil(lambda: window.active is not None
                    and len(window.active.recorder.compare_data.get("ar", {}).get("text", "")) >= 20, timeout=120_000)
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as done:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    stopped = done.args[0]
    plain = stopped.stats["compare"]["ar"]["text"]
    assert stopped.state == "stopped" and stopped.content == "" and len(plain) >= 20  # the second run never wrote
    widget = window.chat_view.widget(stopped.id)
    assert widget.ar_column.view.toPlainText().startswith(plain.split()[0])
    assert widget.copy_button.isVisibleTo(widget) and widget.regenerate_button.isVisibleTo(widget)
    assert not can_continue(stopped.stats, stopped.state) and not widget.continue_button.isVisibleTo(widget)
    QGuiApplication.clipboard().clear()
    click(qtbot, widget.copy_button)
    assert QGuiApplication.clipboard().text() == plain


def test_a_stopped_reply_offers_continue_which_goes_on_from_the_text_kept(qtbot, make_window):
    window = make_window(FAST.with_values(max_new_tokens=400))
    window.composer.set_text("Write a long story about a brave knight.")
    window.composer.submit()
    qtbot.waitUntil(lambda: window.active is not None and window.active.recorder.last_step is not None
                    and window.active.recorder.last_step.generated >= 12, timeout=120_000)
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as done:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    stopped = done.args[0]
    written = stopped.stats["new_tokens"]
    assert stopped.state == "stopped" and written >= 12 and stopped.content
    assert can_continue(stopped.stats, stopped.state) and not stopped_at_limit(stopped.stats, stopped.state)
    widget = window.chat_view.widget(stopped.id)
    assert widget.footer.text().startswith("Stopped · Auto")
    assert widget.continue_button.isVisibleTo(widget) and "stopped" in widget.continue_button.toolTip()
    window.choice.apply(window.settings.with_values(max_new_tokens=24))
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as done:
        click(qtbot, widget.continue_button)
    continued = done.args[0]
    assert continued.id == stopped.id and continued.state == "complete" and continued.content.startswith(stopped.content)
    assert len(continued.content) > len(stopped.content) + 20
    assert continued.stats["new_tokens"] == written + 24 and continued.stats["earlier_tokens"] == written
    assert continued.stats["continued"] == 1 and window.db.message(stopped.id).content == continued.content
    assert [m.id for m in window.db.messages(stopped.conversation_id) if m.role == "assistant"] == [stopped.id]
    footer = window.chat_view.widget(stopped.id).footer.text()
    assert footer.startswith(f"Length limit reached (Continue writes more) · Continued once: {written + 24} tokens in all")


def test_a_remote_reply_or_one_stopped_before_its_first_token_is_not_continued():
    local = {"mode": "ar", "new_tokens": 30, "stop_reason": "cancelled", "model": "qwen2.5-0.5b on CPU"}
    assert can_continue(local, "stopped")
    assert not can_continue({**local, "model": "qwen2.5-7b on gpu-box:8000 (remote)"}, "stopped")
    assert not can_continue({**local, "new_tokens": 0}, "stopped")  # nothing to go on from: Regenerate
    assert not can_continue({"compare": {"ar": local, "stopped": True}}, "stopped")


def test_a_reply_streaming_in_a_chat_left_is_marked_in_the_list_until_stopped(qtbot, make_window):
    """Newcomer trial: a reply streaming in a chat the user left showed nothing in the chat list. Its entry reads
    "· replying…" after its title while it streams, and its title alone once it is stopped."""
    from app.gui.widgets.conversation_list import REPLYING_SUFFIX

    window = make_window(FAST.with_values(max_new_tokens=400))
    listing = window.conversation_list
    window.composer.set_text("Write a long story about a brave knight.")
    window.composer.submit()
    qtbot.waitUntil(lambda: window.active is not None and window.active.recorder.last_step is not None, timeout=120_000)
    story = window.active.conversation_id
    title = window.db.conversation(story).title
    window.new_action.trigger()  # the chat left while its reply streams
    assert window.chat_view.conversation_id is None and listing.item_for(story).text() == title + REPLYING_SUFFIX
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as done:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert done.args[0].state == "stopped" and listing.item_for(story).text() == title
