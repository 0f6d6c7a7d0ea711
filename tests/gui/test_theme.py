"""Light and dark themes: every text colour of the theme table reads on its background (WCAG AA, 4.5:1), and
screenshots of the chat view, the settings pane and the status bar in both themes show text that does; the window
follows the desktop's scheme when its theme is System."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import FAST
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QFormLayout, QLabel

from app.gui import theme

REPLY = "Here is **bold** text, a list:\n\n- one\n- two\n\n```python\nprint('hi')\n```"


def text_contrast(widget) -> float:
    """The contrast of a widget's text with its background, read from a screenshot: the background is the most
    common colour, the text the pixel of highest contrast with it (a glyph's stem has the text's full colour)."""
    image = widget.grab().toImage()
    pixels = [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]
    background = Counter(p.rgb() for p in pixels).most_common(1)[0][0]
    back = next(p for p in pixels if p.rgb() == background)
    return max(theme.contrast_ratio(p, back) for p in pixels)


@pytest.mark.parametrize("table", [theme.LIGHT, theme.DARK], ids=["light", "dark"])
def test_every_text_colour_of_the_theme_table_reads_on_its_background(table):
    for where, (foreground, background) in table.text_pairs().items():
        assert theme.contrast_ratio(foreground, background) >= theme.MIN_CONTRAST, (table.name, where)
    assert theme.contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert theme.contrast_ratio(theme.readable("#75715e", table.code), table.code) >= theme.MIN_CONTRAST


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_the_chat_settings_and_status_bar_read_in_both_themes_at_1366x768(qtbot, make_window, choice):
    window = make_window(FAST, start=False)
    window.resize(1366, 768)
    conversation = window.db.create_conversation("Contrast check")
    window.db.add_message(conversation, "user", "Show me some Markdown.")
    window.db.add_message(conversation, "assistant", REPLY, stats={"mode": "ar", "ttft_ms": 20.0, "tokens_per_s": 50.0,
                                                                   "new_tokens": 30, "target_model": "x"})  # fmt: skip
    window.conversations.refresh()
    window.conversations.open(conversation)
    window.set_theme(choice)
    table = theme.current()
    assert table.name == choice
    view = window.chat_view
    qtbot.waitUntil(lambda: view.fully_loaded and len(view.message_widgets()) == 2, timeout=3000)
    user, reply = view.message_widgets()
    qtbot.waitUntil(reply.isVisible, timeout=3000)
    qtbot.wait(50)
    pane = window.settings_pane
    label = next(form.labelForField(pane.fields["decoding"]) for form in pane.findChildren(QFormLayout)
                 if form.labelForField(pane.fields["decoding"]))  # fmt: skip
    checked = {
        "reply text": reply.body.text_views()[0], "reply footer": reply.footer, "role": reply.role_label,
        "Copy button": reply.copy_button, "your message": user.body.text_views()[0], "chat title": view.title_label,
        "code": reply.body.code_blocks()[0].text, "settings label": label, "setting explanation": pane.findChild(QLabel, "settingHelp"), "decoding field": pane.fields["decoding"], "status bar": window.model_label,
        "conversation list": window.conversation_list.list,
    }  # fmt: skip
    for where, widget in checked.items():
        assert widget is not None and widget.isVisible(), where
        ratio = text_contrast(widget)
        assert ratio >= theme.MIN_CONTRAST, f"{where}: contrast {ratio:.2f} in the {choice} theme"


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_the_model_notice_takes_the_themes_colours_and_reads(qtbot, make_window, choice):
    from PySide6.QtGui import QColor

    window = make_window(FAST, start=False)
    window.set_theme(choice)
    notice = window.model_notice
    notice.show_notice("test", "This chat was answered by another model.", "Switch", lambda: None)
    qtbot.waitUntil(notice.isVisible, timeout=3000)
    image = notice.grab().toImage()
    background = image.pixelColor(2, image.height() // 2)
    assert theme.contrast_ratio(background, QColor(theme.current().notice)) < 1.05, background.name()
    assert text_contrast(notice.text) >= theme.MIN_CONTRAST


def test_no_widget_sets_a_colour_of_its_own():
    """Every colour comes from the theme table (``app/gui/theme.py``): no colour literal elsewhere in the GUI."""
    import re
    from pathlib import Path

    folder = Path(theme.__file__).parent
    literal = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b(?![0-9a-fA-F])|\brgba?\(\s*\d")
    found = [
        f"{path.relative_to(folder)}:{number}: {line.strip()}"
        for path in sorted(folder.rglob("*.py")) if path.name != "theme.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if literal.search(line)
    ]
    assert found == []


def test_system_follows_the_desktops_scheme(qtbot, make_window, monkeypatch):
    window = make_window(FAST, start=False)
    window.set_theme("system")
    monkeypatch.setattr(theme, "system_is_dark", lambda: True)
    window.apply_theme()  # (what a change of the desktop's scheme triggers: QStyleHints.colorSchemeChanged)
    assert theme.current() is theme.DARK
    monkeypatch.setattr(theme, "system_is_dark", lambda: False)
    window.apply_theme()
    assert theme.current() is theme.LIGHT
    window.set_theme("dark")
    window.apply_theme()
    assert theme.current() is theme.DARK  # a fixed choice does not follow the desktop
    window.set_theme("light")


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_the_conversation_lists_scroll_bar_is_drawn_in_the_theme(qtbot, make_window, choice):
    from PySide6.QtGui import QColor

    window = make_window(FAST, start=False)
    for index in range(40):
        window.db.create_conversation(f"Chat {index}")
    window.conversations.refresh()
    window.set_theme(choice)
    bar = window.conversation_list.list.verticalScrollBar()
    bar.setValue(0)
    qtbot.waitUntil(bar.isVisible, timeout=3000)
    image = bar.grab().toImage()
    groove = image.pixelColor(image.width() // 2, image.height() - 4)  # below the handle: the empty part
    assert theme.contrast_ratio(groove, QColor(theme.current().panel)) < 1.2, groove.name()  # the panel's, not black


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_an_unticked_check_box_is_outlined_at_3_to_1_in_both_themes(qtbot, make_window, choice):
    """WCAG 1.4.11 asks 3:1 for a control's outline against what surrounds it; Fusion draws a check box's outline
    40% darker than the window, 1.14:1 on the dark theme (the "JSON output" box was all but invisible)."""
    from PySide6.QtWidgets import QStyle, QStyleOptionButton

    window = make_window(FAST, start=False)
    window.set_theme(choice)
    box = window.chat_view.json_box
    assert not box.isChecked()
    option = QStyleOptionButton()
    option.initFrom(box)
    indicator = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, box)
    image = box.grab().toImage()
    outside = image.pixelColor(indicator.right() + 3, indicator.center().y())  # the gap between box and label
    ring = [image.pixelColor(x, y) for x in range(indicator.left(), indicator.right() + 1)
            for y in (indicator.top(), indicator.top() + 1, indicator.bottom() - 1, indicator.bottom())]  # fmt: skip
    assert max(theme.contrast_ratio(p, outside) for p in ring) >= 3.0


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_the_graphs_chosen_plot_stands_out_from_the_others_in_both_themes(qtbot, make_window, choice):
    """A newcomer could not tell which of Speed, Acceptance and Context was shown in the dark theme (the three buttons
    looked alike; in light the chosen one was a faint grey): the chosen one is filled with the accent colour, at
    3:1 or more against an unchosen one's background (WCAG 1.4.11), its word readable on it."""
    window = make_window(FAST, start=False)
    window.set_theme(choice)
    graph = window.live_graph
    graph.plot_buttons["acceptance"].click()
    qtbot.wait(20)

    def background(button):
        image = button.grab().toImage()
        return image.pixelColor(3, image.height() // 2)  # inside the border, left of the word

    chosen, other = background(graph.plot_buttons["acceptance"]), background(graph.plot_buttons["rate"])
    assert theme.contrast_ratio(chosen, other) >= 3.0, (chosen.name(), other.name())
    assert text_contrast(graph.plot_buttons["acceptance"]) >= theme.MIN_CONTRAST


@pytest.mark.parametrize("choice", ["light", "dark"])
@pytest.mark.parametrize("state", ["focused", "invalid"])
def test_a_number_field_shows_its_arrows_when_focused_or_invalid(qtbot, make_window, choice, state):
    """Where the style sheet styles a number field (a focus ring, an invalid value's red frame), Qt draws each arrow
    alone, and Fusion's drawing of it left the buttons blank: the arrow must stand out from its button at 3:1."""
    from PySide6.QtWidgets import QStyle, QStyleOptionSpinBox

    window = make_window(FAST, start=False)
    window.set_theme(choice)
    field = window.settings_pane.fields["max_new_tokens"]
    field.setValue((field.minimum() + field.maximum()) // 2)  # both ways enabled
    if state == "focused":
        field.setFocus()
        qtbot.waitUntil(field.hasFocus, timeout=3000)
    else:
        field.setProperty("invalid", "true")
        field.style().unpolish(field)
        field.style().polish(field)
    option = QStyleOptionSpinBox()
    field.initStyleOption(option)
    image = field.grab().toImage()
    for control in (QStyle.SubControl.SC_SpinBoxUp, QStyle.SubControl.SC_SpinBoxDown):
        button = field.style().subControlRect(QStyle.ComplexControl.CC_SpinBox, option, control, field).adjusted(2, 2, -2, -2)
        pixels = [image.pixelColor(x, y) for x in range(button.left(), button.right() + 1)
                  for y in range(button.top(), button.bottom() + 1)]  # fmt: skip
        background = Counter(p.name() for p in pixels).most_common(1)[0][0]
        assert max(theme.contrast_ratio(p, QColor(background)) for p in pixels) >= 3.0, (control, background)


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_a_focused_button_keeps_room_for_its_whole_label(qtbot, make_window, choice):
    """Newcomer trial: focused, "Reset to defaults" read "ꞁeset to default": the focus ring's border and padding
    (2 + 10 px a side) took more room than Fusion's own margins (7 px a side) the button was sized by. Every push
    button of the window, focused, must keep its label's width inside its contents."""
    from PySide6.QtWidgets import QPushButton, QStyle, QStyleOptionButton

    window = make_window(FAST, start=False)
    window.set_theme(choice)
    window.resize(1366, 768)
    window.show()
    qtbot.waitExposed(window)
    buttons = [b for b in window.findChildren(QPushButton) if b.isVisible() and b.text() and b.isEnabled()]
    assert len(buttons) >= 3, [b.text() for b in buttons]
    short = []
    for button in buttons:
        button.setFocus()
        qtbot.waitUntil(button.hasFocus, timeout=3000)
        option = QStyleOptionButton()
        button.initStyleOption(option)
        contents = button.style().subElementRect(QStyle.SubElement.SE_PushButtonContents, option, button)
        if contents.width() < button.fontMetrics().horizontalAdvance(button.text().replace("&", "")):
            short.append((button.text(), contents.width(), button.fontMetrics().horizontalAdvance(button.text())))
    assert not short, short


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_a_disabled_send_looks_disabled(qtbot, make_window, choice):
    """Newcomer trial: in the dark theme the disabled Send kept its bright white bold text. Its text is the
    colour of the theme's on_accent_off, of less contrast with its background than the enabled button's."""
    window = make_window(FAST, start=False)
    window.set_theme(choice)
    send = window.composer.send_button
    window.composer.set_generating(False)
    window.composer.set_text("Hello")
    qtbot.waitUntil(send.isEnabled, timeout=3000)
    enabled = text_contrast(send)
    window.composer.set_generating(True)
    assert not send.isEnabled()
    qtbot.wait(20)
    disabled = text_contrast(send)
    assert disabled < 0.7 * enabled, (choice, enabled, disabled)


@pytest.mark.parametrize("choice", ["light", "dark"])
def test_a_disabled_text_field_looks_disabled(qtbot, make_window, choice):
    """Newcomer trial: the Local server dialog's API key field, disabled while serving, kept the white background
    of a field one can type in (the port beside it looked the same). A disabled field is drawn on the theme's panel
    colour, not its base, its text the theme's disabled grey."""
    window = make_window(FAST, start=False)
    window.set_theme(choice)
    window.local_server_action.trigger()
    field = window.server_control.dialog.api_key
    field.setText("s3cret")
    table = theme.current()

    def background() -> str:  # right of the text, inside the frame
        qtbot.wait(20)
        image = field.grab().toImage()
        return image.pixelColor(image.width() - 8, image.height() // 2).name()

    field.setEnabled(True)
    assert background() == table.base
    field.setEnabled(False)
    assert background() == table.panel != table.base, choice
    assert field.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text).name() == table.graph_axis
    window.server_control.dialog.close()
