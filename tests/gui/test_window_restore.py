"""A restarted window comes back where it was, at its size, also without a window manager (newcomer trial under Xvfb:
a window saved filling the 1366x768 screen came back at 1364x742, 25 px down, through Qt's restoreGeometry, which
assumes a title bar it cannot measure there); a saved size too small to use, or not a size at all, is not taken."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import two_chats
from PySide6.QtCore import QSize

from app.gui.window_geometry import MIN_RESTORED, default_size, restore_geometry, saved_geometry


def test_a_window_filling_the_screen_comes_back_filling_it(qtbot, make_window):
    first = make_window(FAST, start=False)
    available = first.screen().availableGeometry()
    extra = QSize(first.frameGeometry().width() - first.width(), first.frameGeometry().height() - first.height())
    first.resize(available.size() - extra)  # the whole screen, frame included (as a window without a WM)
    first.move(available.topLeft())
    qtbot.waitUntil(lambda: first.frameGeometry() == available)
    saved = saved_geometry(first)
    first.close()
    second = make_window(None, start=False)  # the same settings file
    assert second.size() == available.size() - extra and second.pos() == available.topLeft()
    assert available.contains(second.frameGeometry()) and second.store.ui_state["window"] == saved


def test_a_saved_place_is_kept_on_screen_and_a_useless_one_is_not_taken(qtbot, make_window):
    window = make_window(FAST, start=False)
    available = window.screen().availableGeometry()
    assert restore_geometry(window, {"x": 60, "y": 40, "width": 720, "height": 500, "maximized": False})
    assert (window.pos().x(), window.pos().y(), window.width(), window.height()) == (60, 40, 720, 500)
    assert restore_geometry(window, {"x": -5000, "y": 9000, "width": 99999, "height": 99999})  # another screen's
    assert available.contains(window.frameGeometry())
    assert restore_geometry(window, {"x": 0, "y": 0, "width": 12, "height": 9})  # not a window anyone chose
    extra = QSize(window.frameGeometry().width() - window.width(), window.frameGeometry().height() - window.height())
    assert window.size() == default_size(available).boundedTo(available.size() - extra) and MIN_RESTORED.width() > 12
    window.resize(700, 560)
    for bad in (None, "AdnQywAD", {"x": 1, "y": 2, "width": "wide", "height": 3}, {"x": True, "y": 0, "width": 800, "height": 600}):
        assert not restore_geometry(window, bad) and window.size() == QSize(700, 560)


def test_a_restarted_window_opens_the_chat_open_at_quit_while_it_exists(qtbot, make_window):
    """A newcomer trial quit with an older chat open and the window came back on the newest one: it opens the chat
    that was open when it closed, and the newest where that one was deleted since (or a new chat was shown)."""
    window = make_window(FAST, start=False)
    older, newest = two_chats(window, "Older", "Newest")
    window.conversations.open(older)
    window.close()

    again = make_window(None, start=False)
    assert again.chat_view.conversation_id == older and again.conversation_list.current_id() == older
    again.conversations.new()
    again.close()
    assert make_window(None, start=False).chat_view.conversation_id == newest  # a new chat at quit: the newest

    third = make_window(None, start=False)
    third.conversations.open(older)
    third.close()
    third.db.delete_conversation(older)  # deleted since (elsewhere)
    assert make_window(None, start=False).chat_view.conversation_id == newest
