"""Replies the user stopped (Esc, Stop) keep the actions their text calls for: a Compare stopped during its plain
run keeps Copy (newcomer trial: its header showed only "Regenerate", its plain column full of text)."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import click
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication


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
    QGuiApplication.clipboard().clear()
    click(qtbot, widget.copy_button)
    assert QGuiApplication.clipboard().text() == plain
