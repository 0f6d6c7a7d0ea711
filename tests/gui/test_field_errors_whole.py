"""A setting's error reads whole under its field at 1366x768 (a later trial: "Context length must be between 16 and
8192; you typ…" and every longer error cut with "…" there): it is wrapped onto the lines it needs, as the notice
above the message box is, and the side panel keeps its width."""

from __future__ import annotations

import shutil

from conftest import FAST
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QTextLayout, QTextOption

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


def _is_whole(pane, name: str) -> bool:
    """``_assert_whole`` as a condition to wait for."""
    try:
        _assert_whole(pane, name)
    except AssertionError:
        return False
    return True


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
    flagged = (*numbers, "temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
               "stop_strings")  # fmt: skip
    qtbot.waitUntil(lambda: all(_is_whole(pane, name) for name in flagged), timeout=5000)  # (posted layouts settle)
    assert "more digits than the field holds (it holds 999999999)" in pane.error_labels["n_ctx"].text()
    assert pane.error_labels["k"].text().endswith(f"({K_UNUSED_NOTE})")
    for name in flagged:
        _assert_whole(pane, name)
    assert pane.width() == width and pane.widget().width() == inner_width  # the panel is no wider
    assert pane.widget().minimumSizeHint().width() <= pane.viewport().width()
    help_lines = pane.error_labels["n_ctx"].parentWidget().help
    assert help_lines is not None and not help_lines.isVisibleTo(pane)  # the error is said in its place


def _line_count(label, text: str, width: int) -> int:
    """How many lines ``text`` takes in ``label``'s font at ``width``, wrapped as a FieldError wraps it."""
    layout = QTextLayout(text, label.font())
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    layout.setTextOption(option)
    layout.beginLayout()
    count = 0
    while (line := layout.createLine()).isValid():
        line.setLineWidth(width)
        count += 1
    layout.endLayout()
    return count


def test_a_drafter_refused_while_a_model_is_loaded_reads_whole(qtbot, make_window, tiny_ir, tmp_path, monkeypatch):
    """Newcomer trial: Other folder… then a folder holding a model of another vocabulary, while the default model was
    loaded: the refusal under the Drafter box ended at "or use prompt", "lookup" missing. It wrapped onto one line
    more once the side panel's scroll bar (which its own lines brought) narrowed it, and the label grew, but its slot
    stayed as tall as before, cutting the last line. The drafter's name here is one that makes the message need that
    one line more."""
    from app.gui.widgets import settings_pane
    from app.gui.widgets.settings_pane import BROWSE_DRAFT

    folders = []

    async def chosen(*_args, **_kwargs):
        return str(folders[0])

    monkeypatch.setattr(settings_pane, "choose_file", chosen)
    window = make_window(FAST.with_values(decoding=Decoding.AUTO.value))
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=3000)
    qtbot.wait(100)
    pane = window.settings_pane
    error = pane.error_labels["draft_model"]
    assert not pane.verticalScrollBar().isVisible()
    wide, narrow = error.width(), error.width() - pane.verticalScrollBar().sizeHint().width()

    def refusal(name: str) -> str:
        return (f"The draft model {name} has another tokenizer than the target {window.worker.spec.target_dir.name} "
                "(the token ids of a probe text differ): choose a draft from the same model family, or use prompt lookup")

    name = next(f"tiny-other{'x' * n}" for n in range(40)
                if _line_count(error, refusal(f"tiny-other{'x' * n}"), wide) < _line_count(error, refusal(f"tiny-other{'x' * n}"), narrow))  # fmt: skip
    folders.append(shutil.copytree(tiny_ir["other"], tmp_path / name))
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(BROWSE_DRAFT))
    qtbot.waitUntil(lambda: window.model_state == "error" and error.text() != "", timeout=60_000)
    qtbot.wait(200)  # (layouts settle in posted events)
    assert error.text() == refusal(name)
    assert pane.verticalScrollBar().isVisible() and error.width() == narrow
    _assert_whole(pane, "draft_model")
    assert error.shown_text().split()[-4:] == ["or", "use", "prompt", "lookup"]
