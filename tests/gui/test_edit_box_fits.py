"""The editor of a sent message fits its text (newcomer trial: a one-line message's editor stood about 190 px tall)
and grows with longer text, up to a bound past which it scrolls."""

from __future__ import annotations

from conftest import FAST
from test_keyboard import _chat_with_one_message, _edit_first_message

from app.gui.widgets.message_widget import EDIT_MAX_PX


def test_the_edit_box_fits_its_text_and_grows_with_it(qtbot, make_window):
    window = make_window(FAST, start=False)
    window.resize(1440, 900)
    _chat_with_one_message(window)
    message = _edit_first_message(qtbot, window)
    editor = message.editor
    line = editor.fontMetrics().lineSpacing()
    qtbot.waitUntil(lambda: editor.height() == editor.sizeHint().height(), timeout=3000)
    short = editor.height()
    assert 2 * line <= short <= 5 * line + 10, (short, line)  # a few lines' room, not ~190 px
    assert editor.verticalScrollBar().maximum() == 0  # the text is shown whole
    editor.setPlainText("\n".join(f"Line {n} of a longer message." for n in range(1, 9)))
    qtbot.waitUntil(lambda: editor.height() >= 8 * line, timeout=3000)
    assert editor.height() <= EDIT_MAX_PX and editor.verticalScrollBar().maximum() == 0  # eight lines, whole
    editor.setPlainText("A long paste. " * 800)
    qtbot.waitUntil(lambda: editor.height() == EDIT_MAX_PX, timeout=3000)
    assert editor.verticalScrollBar().maximum() > 0  # past the bound it scrolls
    editor.setPlainText("Hello again")
    qtbot.waitUntil(lambda: editor.height() == short, timeout=3000)
