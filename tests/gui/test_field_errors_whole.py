"""A setting's error reads whole under its field at 1366x768 (a later trial: "Context length must be between 16 and
8192; you typ…" and every longer error cut with "…" there): it is wrapped onto the lines it needs, as the notice
above the message box is, and the side panel keeps its width."""

from __future__ import annotations

from conftest import FAST
from PySide6.QtCore import QPoint, QRect, Qt

from app.gui.widgets.settings_pane import K_UNUSED_NOTE
from inference.settings import Decoding

#: More digits than a number field holds: its error says the digits it refused besides the range, its longest.
TOO_MANY_DIGITS = "99999999999"


def _type_into(qtbot, field, text: str) -> None:
    """Select a field's text and type ``text`` over it, key by key, as a user does."""
    field.setFocus()
    field.selectAll()
    qtbot.keyClick(field, Qt.Key.Key_Delete)
    qtbot.keyClicks(field, text)


def _assert_whole(pane, name: str) -> None:
    """The error of ``name`` is shown with every word, in lines within its width, in a label as tall as its lines,
    which covers no field."""
    error = pane.error_labels[name]
    whole, shown = error.text(), error.shown_text()
    assert error.isVisibleTo(pane) and whole, name
    lines = shown.split("\n")
    assert "…" not in shown and "".join(shown.split()) == "".join(whole.split()), (name, shown)
    metrics = error.fontMetrics()
    assert all(metrics.horizontalAdvance(line) <= error.width() for line in lines), (name, lines, error.width())
    assert error.height() >= len(lines) * metrics.lineSpacing(), (name, len(lines), error.height())
    inner = pane.widget()
    where = QRect(error.mapTo(inner, QPoint(0, 0)), error.size())
    slot = error.parentWidget()
    assert QRect(QPoint(0, 0), slot.size()).contains(error.geometry()), name  # not cut by the slot it is in
    fields = {field: QRect(widget.mapTo(inner, QPoint(0, 0)), widget.size()) for field, widget in pane.fields.items()
              if widget.isVisibleTo(pane)}  # fmt: skip
    assert [field for field, rect in fields.items() if where.intersects(rect)] == [], name


def test_every_setting_error_reads_whole_at_1366x768(qtbot, make_window):
    window = make_window(FAST.with_values(decoding=Decoding.AUTOREGRESSIVE.value), start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=3000)
    pane = window.settings_pane
    pane.set_max_position_embeddings(8192)
    pane.advanced.button.click()
    pane.sampling.more.show()
    qtbot.wait(100)  # (layouts settle in posted events)
    width, inner_width = pane.width(), pane.widget().width()
    sampling = pane.sampling
    for name in ("n_keep", "n_discard"):  # (each checked against the others valid: one at a time, first)
        field = getattr(pane, name)
        kept = field.value()
        _type_into(qtbot, field, TOO_MANY_DIGITS)
        qtbot.wait(100)
        _assert_whole(pane, name)
        field.setValue(kept)
    numbers = {"n_ctx": pane.n_ctx, "k": pane.k, "top_k": sampling.top_k, "max_new_tokens": sampling.max_new_tokens}
    for name, field in numbers.items():  # plain decoding: K's error also says only speculative decoding uses it
        _type_into(qtbot, field, TOO_MANY_DIGITS)
    for name in ("temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        field = getattr(sampling, name)
        field.setValue(field.maximum())
    _type_into(qtbot, sampling.seed, "9" * 30)  # one long word: broken where it must be, never cut
    refusal = ("The server refused the stop strings: it takes at most 4 of them, each at most 32 characters long, "
               "and you gave 6")  # fmt: skip
    pane.flag("stop_strings", refusal, blocking=False)  # said under its field, as a refusal of the engine is
    qtbot.wait(100)
    assert "more digits than the field holds (it holds 999999999)" in pane.error_labels["n_ctx"].text()
    assert pane.error_labels["k"].text().endswith(f"({K_UNUSED_NOTE})")
    for name in (*numbers, "temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                 "seed", "stop_strings"):  # fmt: skip
        _assert_whole(pane, name)
    assert pane.width() == width and pane.widget().width() == inner_width  # the panel is no wider
    assert pane.widget().minimumSizeHint().width() <= pane.viewport().width()
    help_lines = pane.error_labels["n_ctx"].parentWidget().help
    assert help_lines is not None and not help_lines.isVisibleTo(pane)  # the error is said in its place
