"""The composer's notice ("Fix the settings first: …") appears without moving the chat (issue 35, a newcomer's
trial: a notice wrapped to two lines pushed the chat up two lines)."""

from __future__ import annotations

from conftest import FAST


def test_the_settings_notice_above_the_message_box_moves_no_part_of_the_chat(qtbot, make_window):
    window = make_window(FAST.with_values(decoding="spec_lookup"), start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=3000)
    qtbot.wait(100)
    view, composer = window.chat_view, window.composer

    def geometry():
        return view.mapTo(window, view.rect().topLeft()), view.size(), composer.edit.mapTo(window, composer.edit.rect().topLeft())

    before = geometry()
    window.settings_pane.k.setValue(99)  # the longest summary: the first field's error and a count of the others
    window.settings_pane.n_ctx.setValue(5)
    qtbot.wait(100)
    notice = composer.error_label
    assert composer.error_text.startswith("Fix the settings first: ") and composer.error_text.endswith("marked in red)")
    assert notice.isVisible() and geometry() == before
    # one line: the whole notice where it fits, else cut with "…" and whole in its tooltip
    assert notice.height() <= notice.fontMetrics().lineSpacing() + 2
    shown = notice.shown_text()
    assert "\n" not in shown and notice.fontMetrics().horizontalAdvance(shown) <= notice.width()
    assert shown == composer.error_text or (shown.endswith("…") and composer.error_text.startswith(shown[:-1]))
    assert notice.toolTip() == composer.error_text
    window.settings_pane.k.setValue(4)
    window.settings_pane.n_ctx.setValue(4096)
    qtbot.wait(100)
    assert composer.error_text == "" and geometry() == before
