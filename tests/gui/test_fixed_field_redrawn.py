"""A number field whose invalid value came from settings.json is drawn as every other field once the user fixes it
(a newcomer trial: settings.json held max_new_tokens 999999; 48 typed, then Tab, showed "48" by the arrows with no
frame nor background: the field was laid out under the invalid style at start and kept that layout)."""

from __future__ import annotations

from conftest import FAST
from PySide6.QtCore import Qt


def _layout(field) -> tuple:
    """What a number field's drawing depends on besides its colours: its height, size hint and the place of its
    text box inside its frame."""
    return field.height(), field.sizeHint().height(), field.lineEdit().geometry().topLeft(), field.lineEdit().height()


def test_a_field_fixed_after_an_invalid_value_from_the_file_is_laid_out_as_one_never_marked(qtbot, make_window):
    window = make_window(FAST.with_values(max_new_tokens=999999), start=False)
    qtbot.waitExposed(window)
    pane = window.settings_pane
    field, never_marked = pane.sampling.max_new_tokens, pane.fields["top_p"]
    assert field.property("invalid") and "the settings file holds 999999" in pane.error_labels["max_new_tokens"].text()
    field.setFocus()
    field.selectAll()
    qtbot.keyClick(field, Qt.Key.Key_Delete)
    qtbot.keyClicks(field, "48")
    qtbot.keyClick(field, Qt.Key.Key_Tab)
    qtbot.waitUntil(lambda: not field.property("invalid"))
    assert field.styleSheet() == never_marked.styleSheet() == ""
    assert not never_marked.property("invalid")
    qtbot.wait(100)  # (a layout Qt redoes later would have had its turn)
    assert _layout(field) == _layout(never_marked)
