"""The window works from the keyboard and for screen readers: Tab leaves the message box, every control is reached
with Tab and named, the focused control shows a ring, and Help lists every shortcut the window has."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import activate, click, find_dialog, send_and_wait
from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible, QTextCursor
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QTextEdit,
    QWidget,
)

from app.gui import theme

CONTROLS = (QAbstractButton, QComboBox, QAbstractSpinBox, QLineEdit, QPlainTextEdit, QTextEdit, QListWidget)


def _tab_through(qtbot, window, presses: int = 150) -> list:
    """The widgets that get the focus on each Tab press, starting in the message box."""
    window.composer.edit.setFocus(Qt.FocusReason.TabFocusReason)
    seen = []
    for _ in range(presses):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        seen.append(QApplication.focusWidget())
    return seen


def _ring(qtbot, window, widget) -> int:
    """Pixels of ``widget`` its focus changes with a contrast of 3:1 or more (WCAG's for the parts of a control),
    the focus reached by Tab from the message box, as a user gets there (styles draw the ring only then)."""
    window.composer.edit.setFocus()
    before = widget.grab().toImage()
    while not widget.hasFocus():
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
    after = widget.grab().toImage()
    return sum(
        theme.contrast_ratio(before.pixelColor(x, y), after.pixelColor(x, y)) >= 3
        for x in range(after.width()) for y in range(after.height())
    )  # fmt: skip


def test_tab_leaves_the_message_box_and_ctrl_enter_sends(qtbot, make_window):
    window = make_window(FAST, start=False)
    activate(qtbot, window)
    edit = window.composer.edit
    edit.setFocus()
    qtbot.keyClicks(edit, "hello")
    qtbot.keyClick(edit, Qt.Key.Key_Tab)
    assert edit.toPlainText() == "hello" and QApplication.focusWidget() is window.composer.send_button
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier)
    assert QApplication.focusWidget() is edit
    qtbot.keyClick(edit, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)
    assert edit.toPlainText() == "hello\t" and QApplication.focusWidget() is edit  # Ctrl+Tab types a tab
    with qtbot.waitSignal(window.composer.send_requested, timeout=2000) as sent:
        qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert sent.args == ["hello\t"]


def test_every_control_is_reached_with_tab_and_named_for_screen_readers(qtbot, make_window):
    window = make_window(FAST, start=False)
    activate(qtbot, window)
    reached = set(_tab_through(qtbot, window))
    pane = window.settings_pane
    for control in (
        window.composer.send_button, window.composer.compare_button, window.model_picker.combo,
        pane.fields["decoding"], pane.fields["n_ctx"], pane.fields["temperature"], pane.fields["max_new_tokens"],
        pane.sampling.preset, pane.advanced.button, window.conversation_list.search, window.conversation_list.new_button,
        window.chat_view.system_button,
    ):  # fmt: skip
        assert control in reached, f"{type(control).__name__} {control.objectName()!r} is never reached with Tab"
    unnamed = []
    for control in window.findChildren(QAbstractButton) + [w for kind in CONTROLS[1:] for w in window.findChildren(kind)]:
        inner = isinstance(control.parent(), (QAbstractSpinBox, QComboBox))  # a spin box's own line edit
        if control.isVisibleTo(window) and control.focusPolicy() & Qt.FocusPolicy.TabFocus and not inner:
            name = QAccessible.queryAccessibleInterface(control).text(QAccessible.Text.Name)
            if not name.strip():
                unnamed.append(f"{type(control).__name__} {control.objectName()!r}")
    assert unnamed == []
    assert QAccessible.queryAccessibleInterface(pane.fields["n_ctx"]).text(QAccessible.Text.Name) == "Context length (n_ctx)"


def test_the_focused_control_shows_a_ring(qtbot, make_window):
    window = make_window(FAST, start=False)
    activate(qtbot, window)
    pane = window.settings_pane
    for widget in (
        window.composer.send_button, window.chat_view.system_button, window.composer.compare_button,
        window.model_picker.combo, pane.fields["decoding"], pane.fields["n_ctx"], pane.fields["temperature"],
        window.chat_view.json_box, window.chat_view.scroll_area,
    ):  # fmt: skip  (the last: the Tab stop after System prompt, without a ring until now)
        assert _ring(qtbot, window, widget) > 2 * widget.width(), f"{type(widget).__name__} {widget.accessibleName()!r}"  # a line, not a speck


def test_the_settings_pane_takes_no_tab_stop_of_its_own(qtbot, make_window):
    """Newcomer trial: Tab from Compare outlined the whole settings pane, a stop with nothing to do (its scroll bar
    follows the focused field anyway); Tab goes from control to control inside it."""
    window = make_window(FAST, start=False)
    activate(qtbot, window)
    pane = window.settings_pane
    reached = _tab_through(qtbot, window)
    assert pane not in reached and pane.viewport() not in reached and pane.widget() not in reached
    assert pane.focusPolicy() == Qt.FocusPolicy.NoFocus
    assert {pane.fields[name] for name in ("decoding", "n_ctx", "temperature", "max_new_tokens")} <= set(reached)


def _edit_first_message(qtbot, window):
    """Click Edit on the first message of the chat shown (a user message); returns its bubble, the editor focused."""
    activate(qtbot, window)
    qtbot.waitUntil(lambda: len(window.chat_view.message_widgets()) >= 1, timeout=3000)
    message = window.chat_view.message_widgets()[0]
    qtbot.waitUntil(lambda: message.edit_button.isVisible(), timeout=3000)
    click(qtbot, message.edit_button)
    qtbot.waitUntil(lambda: message.editor is not None and message.editor.hasFocus(), timeout=3000)
    return message


def _chat_with_one_message(window, title: str = "Edit me", text: str = "Hello there") -> int:
    """A conversation holding one user message, shown; returns its id."""
    conversation = window.db.create_conversation(title)
    window.db.add_message(conversation, "user", text)
    window.conversations.refresh()
    window.conversations.open(conversation)
    return conversation


def test_tab_leaves_the_edit_and_resend_box(qtbot, make_window):
    window = make_window(FAST, start=False)
    _chat_with_one_message(window)
    message = _edit_first_message(qtbot, window)
    qtbot.keyClick(message.editor, Qt.Key.Key_Tab)
    assert message.editor.toPlainText() == "Hello there"  # no tab typed
    assert QApplication.focusWidget() is message.cancel_edit_button
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is message.resend_button


def test_ctrl_enter_saves_an_edit_and_enter_adds_a_line(qtbot, make_window):
    """Newcomer trial: no key saved an edit (Enter adds a line, Ctrl+Enter did nothing)."""
    window = make_window(FAST, start=False)
    _chat_with_one_message(window)
    message = _edit_first_message(qtbot, window)
    message.editor.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClick(message.editor, Qt.Key.Key_Return)
    qtbot.keyClicks(message.editor, "How are you?")
    assert message.editor.toPlainText() == "Hello there\nHow are you?" and message.editing
    with qtbot.waitSignal(message.edit_submitted, timeout=3000) as submitted:
        qtbot.keyClick(message.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert submitted.args == [message.message.id, "Hello there\nHow are you?"]


def test_help_lists_every_shortcut_of_the_window(qtbot, make_window):
    window = make_window(FAST, start=False)
    window.shortcuts_action.trigger()
    qtbot.waitUntil(lambda: find_dialog(window, "shortcuts") is not None, timeout=3000)
    text = find_dialog(window, "shortcuts").text()
    actions = window.actions() + window.conversation_list.list.actions()
    for action in actions:
        keys = action.shortcut().toString()
        if keys:
            assert f"{keys}: " in text, f"{action.text()} ({keys}) is not listed"
    widget_keys = ("Esc in a message's edit box", "Esc in the chat search or its results", "Down in the chat search")
    for keys in ("Enter", "Shift+Enter", "Tab / Shift+Tab", "Ctrl+Tab", *widget_keys):
        assert f"{keys}: " in text
    # a line whose menu gave its words a context says it (newcomer trial: "F5: refresh", and "Del: delete chat",
    # which works in the chat list only)
    assert "\nF5: refresh the list of models\n" in text and "\nDel: delete chat (in the chat list)" in text
    assert "\nCtrl+N: new chat\n" in text  # the others: their menu text
    find_dialog(window, "shortcuts").close()


def test_help_keeps_the_capitals_of_format_and_mode_names(qtbot):
    """Newcomer trial: F1 listed "Ctrl+O: import conversation (json)", "Ctrl+Shift+M: export as markdown" and "compare
    plain vs auto decoding", as if JSON, Markdown and Auto were ordinary words; only a line's first letter is lowered
    (and not an acronym's, as "JSON output")."""
    from PySide6.QtGui import QAction

    from app.gui.widgets.help import shortcut_lines

    names = ("Import conversation (JSON)…", "Export as &Markdown…", "&Compare plain vs Auto decoding", "JSON output")
    actions = [QAction(name) for name in names]
    for number, action in enumerate(actions, 1):
        action.setShortcut(f"Ctrl+{number}")
    lines = shortcut_lines(actions)[-len(names):]
    assert lines == [
        "Ctrl+1: import conversation (JSON)",
        "Ctrl+2: export as Markdown",
        "Ctrl+3: compare plain vs Auto decoding",
        "Ctrl+4: JSON output",
    ]


def test_escape_cancels_a_message_edit_when_no_reply_streams(qtbot, make_window):
    window = make_window(FAST, start=False)
    conversation = _chat_with_one_message(window)
    message = _edit_first_message(qtbot, window)
    qtbot.keyClicks(message.editor, "Goodbye ")
    assert message.editor.toPlainText() == "Goodbye Hello there"  # (the editor opens with its cursor at the start)
    qtbot.keyClick(message.editor, Qt.Key.Key_Escape)
    assert not message.editing and not message.editor.isVisible() and message.body.isVisible()
    assert message.edit_button.isEnabled() and QApplication.focusWidget() is message.edit_button
    assert [m.content for m in window.db.messages(conversation)] == ["Hello there"]  # nothing resent
    click(qtbot, message.edit_button)
    assert message.editor.toPlainText() == "Hello there"  # the edit was discarded


def test_escape_clears_the_chat_search_when_no_reply_streams(qtbot, make_window):
    window = make_window(FAST, start=False)
    listing = window.conversation_list
    dragons = _chat_with_one_message(window, "Dragons", "Tell me about a dragon")
    cats = _chat_with_one_message(window, "Cats", "Tell me about cats")
    activate(qtbot, window)
    window.search_action.trigger()  # Ctrl+F
    assert QApplication.focusWidget() is listing.search
    qtbot.keyClicks(listing.search, "dragon")
    qtbot.waitUntil(lambda: listing.ids() == [dragons], timeout=3000)
    qtbot.keyClick(listing.search, Qt.Key.Key_Escape)
    assert listing.search.text() == ""
    qtbot.waitUntil(lambda: sorted(listing.ids()) == sorted([dragons, cats]), timeout=3000)
    assert window.chat_view.conversation_id == cats  # the chat shown is not changed by the search


def test_escape_in_the_results_clears_the_search_and_lists_every_chat(qtbot, make_window):
    """Newcomer trial: Ctrl+F, "apple", Down (into the results), Esc: the list stayed filtered. Esc in the list clears
    the search while it filters, the focus and the chat chosen staying where they are; with no search it does
    nothing."""
    window = make_window(FAST, start=False)
    listing = window.conversation_list
    apples = _chat_with_one_message(window, "Apples", "Tell me about an apple")
    pears = _chat_with_one_message(window, "Pears", "Tell me about pears")
    activate(qtbot, window)
    window.search_action.trigger()  # Ctrl+F
    qtbot.keyClicks(listing.search, "apple")
    qtbot.keyClick(listing.search, Qt.Key.Key_Down)
    assert QApplication.focusWidget() is listing.list and listing.ids() == [apples]
    qtbot.keyClick(listing.list, Qt.Key.Key_Escape)
    assert listing.search.text() == "" and sorted(listing.ids()) == sorted([apples, pears])  # at once: no debounce
    assert QApplication.focusWidget() is listing.list and listing.current_id() == apples
    assert window.chat_view.conversation_id == apples
    qtbot.keyClick(listing.list, Qt.Key.Key_Escape)  # nothing to clear: nothing changes
    assert sorted(listing.ids()) == sorted([apples, pears]) and listing.current_id() == apples


def test_escape_stops_a_streaming_reply_also_from_the_edit_box_and_the_search_box(qtbot, make_window):
    window = make_window(FAST.with_values(max_new_tokens=400))
    listing = window.conversation_list
    _chat_with_one_message(window, "Stories", "Hello there")
    message = _edit_first_message(qtbot, window)
    for focused in (message.editor, listing.search):
        texts = []
        window.reply_updated.connect(texts.append)
        with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
            window.chat.send("Write a long story about a lighthouse keeper.")
            qtbot.waitUntil(lambda texts=texts: len("".join(texts[-1:])) > 20, timeout=120_000)
            focused.setFocus()
            if focused is listing.search:
                qtbot.keyClicks(focused, "Stories")
            qtbot.keyClick(focused, Qt.Key.Key_Escape)
        window.reply_updated.disconnect(texts.append)
        final = finished.args[0]
        assert final.state == "stopped" and final.stats["stop_reason"] == "cancelled" and final.stats["new_tokens"] < 400
    assert message.editing and message.editor.toPlainText() == "Hello there"  # Esc stopped the reply, not the edit
    assert listing.search.text() == "Stories"  # nor cleared the search


def test_searching_keeps_the_chat_shown_selected_and_down_moves_into_the_results(qtbot, make_window):
    window = make_window(FAST, start=False)
    listing = window.conversation_list
    dragons = _chat_with_one_message(window, "Dragons", "Tell me about a dragon")
    dragon_cats = _chat_with_one_message(window, "Dragon cats", "Tell me about a dragon and cats")
    cats = _chat_with_one_message(window, "Cats", "Tell me about cats")
    window.conversations.open(dragons)
    assert listing.current_id() == dragons and listing.rename_button.isEnabled()
    activate(qtbot, window)
    window.search_action.trigger()  # Ctrl+F
    qtbot.keyClicks(listing.search, "dragon")
    qtbot.waitUntil(lambda: listing.ids() == [dragon_cats, dragons], timeout=3000)
    assert listing.current_id() == dragons and window.chat_view.conversation_id == dragons
    assert listing.rename_button.isEnabled() and listing.delete_button.isEnabled()
    qtbot.keyClick(listing.search, Qt.Key.Key_Down)  # into the results, on the first one
    assert QApplication.focusWidget() is listing.list
    assert listing.list.currentRow() == 0 and listing.current_id() == dragon_cats
    assert window.chat_view.conversation_id == dragon_cats
    qtbot.keyClick(listing.list, Qt.Key.Key_Down)
    assert listing.current_id() == dragons and window.chat_view.conversation_id == dragons
    listing.search.setFocus()
    qtbot.keyClick(listing.search, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: len(listing.ids()) == 3, timeout=3000)
    assert listing.current_id() == dragons and cats in listing.ids()
    qtbot.keyClicks(listing.search, "about cats")
    qtbot.keyClick(listing.search, Qt.Key.Key_Down)  # before the search ran (it waits for the typing to pause)
    assert listing.ids() == [cats] and listing.current_id() == cats and window.chat_view.conversation_id == cats
    assert QApplication.focusWidget() is listing.list


def test_every_action_that_starts_a_reply_leaves_the_focus_in_the_message_box(qtbot, make_window):
    """After Save & resend and Continue the focus landed on "+ New chat" (the clicked button was hidden), so Enter
    opened a new chat; after every action that starts a reply it is in the message box."""
    window = make_window(FAST)
    activate(qtbot, window)
    edit = window.composer.edit
    first = send_and_wait(qtbot, window, "Write a long story about a brave knight.")
    reply = window.chat_view.widget(first.id)
    qtbot.waitUntil(lambda: reply.continue_button.isVisible(), timeout=3000)
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        click(qtbot, reply.continue_button)
        assert QApplication.focusWidget() is edit, "after Continue"
    assert QApplication.focusWidget() is edit, "after Continue's reply ended"
    reply = window.chat_view.message_widgets()[-1]
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        click(qtbot, reply.regenerate_button)
        assert QApplication.focusWidget() is edit, "after Regenerate"
    message = _edit_first_message(qtbot, window)
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        click(qtbot, message.resend_button)
        assert QApplication.focusWidget() is edit, "after Save & resend"
    assert QApplication.focusWidget() is edit, "after the resent message's reply ended"


def test_after_stop_the_focus_is_in_the_message_box_and_typing_reaches_it(qtbot, make_window):
    """A newcomer clicked Stop, typed "zz" and it went nowhere: Stop, disabled with the focus on it once the reply
    ended, handed the focus to the graph's "Speed" button."""
    window = make_window(FAST)
    activate(qtbot, window)
    edit = window.composer.edit
    window.composer.set_text("Write a long story about a brave knight.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.composer.submit()
        qtbot.waitUntil(lambda: window.composer.stop_button.isEnabled(), timeout=60_000)
        click(qtbot, window.composer.stop_button)
    qtbot.waitUntil(lambda: not window.composer.stop_button.isEnabled(), timeout=5000)
    assert QApplication.focusWidget() is edit, QApplication.focusWidget()
    qtbot.keyClicks(QApplication.focusWidget(), "zz")
    assert edit.toPlainText() == "zz"


def test_every_tab_stop_of_the_window_shows_a_ring(qtbot, make_window):
    """A newcomer's Tab walk found two stops without a visible ring: an empty reply's text area, and the Greedy check
    box whose ring cut the "d" of its label. Each stop of a whole walk (a chat with an empty and a written reply shown)
    changes a line of pixels around it when it gets the focus, and a check box's text is as wide with its ring."""
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QStyle, QStyleOptionButton

    window = make_window(FAST, start=False)
    conversation = window.db.create_conversation("Rings")
    window.db.add_message(conversation, "user", "Hello")
    window.db.add_message(conversation, "assistant", "", state="stopped")  # an empty reply
    window.db.add_message(conversation, "user", "Again")
    window.db.add_message(conversation, "assistant", "A written reply.")
    window.conversations.refresh()
    window.conversations.open(conversation)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and len(window.chat_view.message_widgets()) == 4, timeout=3000)
    activate(qtbot, window)
    qtbot.wait(50)
    stops = []
    for widget in _tab_through(qtbot, window, presses=120):
        if widget is window.composer.edit:
            break
        if widget not in stops:
            stops.append(widget)
    replies = [w.body for w in window.chat_view.message_widgets() if w.message.role == "assistant"]
    assert len(stops) >= 20 and window.settings_pane.fields["decoding"] in stops
    assert any(replies[0].isAncestorOf(stop) or stop is replies[0] for stop in stops), "the empty reply is no Tab stop"

    missing = [f"{type(stop).__name__} {stop.objectName() or stop.accessibleName()!r}" for stop in stops
               if _ring(qtbot, window, stop) <= 2 * min(stop.width(), 200)]  # fmt: skip
    assert not missing, "; ".join(missing)
    # a check box's text keeps its room when its ring shows (the ring took 4 px of it: the "d" of "Greedy" was cut)
    greedy = window.settings_pane.sampling.greedy

    def text_room() -> QRect:
        option = QStyleOptionButton()
        greedy.initStyleOption(option)
        return greedy.style().subElementRect(QStyle.SubElement.SE_CheckBoxContents, option, greedy)

    window.composer.edit.setFocus()
    unfocused = text_room()
    greedy.setFocus(Qt.FocusReason.TabFocusReason)
    assert greedy.hasFocus() and text_room() == unfocused
    assert unfocused.width() >= greedy.fontMetrics().horizontalAdvance(greedy.text()) and unfocused.right() < greedy.width() - 2



def test_every_tab_stop_in_the_settings_pane_is_scrolled_into_view_with_a_remote_target(qtbot, make_window):
    """Newcomer trial: with a remote server as the target (the Weights row hidden), Tab reached a stop with no visible
    focus: Decoding, entered from the graph's buttons while the pane was scrolled down to Advanced, was focused out of
    sight. Every control the Tab walk focuses in the pane lies whole in its viewport."""
    from dataclasses import replace

    from PySide6.QtCore import QPoint, QRect

    window = make_window(FAST, start=False)
    window.resize(1366, 768)
    window.choice.apply(replace(window.settings, remote_url="http://127.0.0.1:9/v1", remote_model="m", use_remote=True))
    pane = window.settings_pane
    pane.advanced.show()  # (the pane scrolls: the walk leaves it scrolled down)
    qtbot.waitUntil(lambda: pane.verticalScrollBar().maximum() > 0, timeout=3000)
    activate(qtbot, window)
    assert not pane.bits.isVisibleTo(pane)
    # the pane's first stop: Sampling's preset (Decoding and the rolling context are off: a remote server's own)
    first = pane.findChild(QWidget, "setting_sampling_preset")
    assert not pane.decoding.isEnabled() and not pane.n_keep.isEnabled()
    window.composer.edit.setFocus(Qt.FocusReason.TabFocusReason)
    in_pane, scrolled_back = [], False
    for _ in range(100):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        stop = QApplication.focusWidget()
        if pane.widget().isAncestorOf(stop):
            where = QRect(stop.mapTo(pane.viewport(), QPoint(0, 0)), stop.size())
            assert pane.viewport().rect().contains(where), (stop.objectName() or type(stop).__name__, where)
            scrolled_back |= stop is first and pane.kv_cache_precision in in_pane  # (entered again, from outside)
            in_pane.append(stop)
    assert {first, pane.kv_cache_precision, pane.reset_button} <= set(in_pane) and scrolled_back
