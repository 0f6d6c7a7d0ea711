"""A comparison's column heading is drawn whole within its column at 1366x768 with the chat's scroll bar shown
(newcomer trial: "Auto (plain 77 steps; draft head 19 steps at" had its last word cut at the right edge: the
theme's padding gave the label a frame, and Qt indented its text by 4 px past the width its lines were fitted to)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from conftest import FAST

from app.gui.history_db import HistoryDB
from app.gui.reply_format import second_run_name

PLAIN = {"mode": "ar", "new_tokens": 96, "tokens_per_s": 30.0, "ttft_ms": 50.0, "text": "The knight rode on. " * 20}


def _auto(plain_steps: int) -> dict:
    head = {"steps": 19, "drafted": 30, "accepted": 15, "k_max": 2}
    return {"mode": "auto", "new_tokens": 96, "tokens_per_s": 40.0, "ttft_ms": 50.0,
            "drafters": {"plain": {"steps": plain_steps}, "head": head}}  # fmt: skip


def _ink_columns(label) -> tuple[int, int]:
    """The leftmost and rightmost pixel columns of the label's drawn text (pixels unlike its background)."""
    image = label.grab().toImage()
    pixels = [(x, y) for x in range(image.width()) for y in range(image.height())]
    background = Counter(image.pixel(x, y) for x, y in pixels).most_common(1)[0][0]
    ink = [x for x, y in pixels if image.pixel(x, y) != background]
    return min(ink), max(ink)


def test_the_auto_column_heading_is_drawn_whole_within_its_column(qtbot, make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Knights")
    for index in range(6):  # enough text above for the scroll bar
        db.add_message(chat, "user", f"Question {index}")
        db.add_message(chat, "assistant", "An answer.\n\n" * 8, stats={"mode": "ar", "new_tokens": 40})
    db.add_message(chat, "user", "Write a story about a brave knight.")
    compare = {"ar": PLAIN, "spec": {**_auto(77), "text": "x"}, "speedup": 1.33, "identical": True}
    reply = db.add_message(chat, "assistant", PLAIN["text"], stats={"compare": compare})
    db.close()
    window = make_window(FAST, history=history, start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and window.chat_view.widget(reply) is not None, timeout=5000)
    view = window.chat_view
    qtbot.waitUntil(lambda: view.scroll_area.verticalScrollBar().isVisible(), timeout=3000)
    widget = view.widget(reply)
    column, title = widget.spec_column, widget.spec_column.title
    viewport = view.scroll_area.viewport()
    fitted = 0
    for plain_steps in range(60, 100):  # headings of every length near the column's width, whatever the font
        message = view.widget(reply).message
        stats = {"compare": {**compare, "spec": {**_auto(plain_steps), "text": "x"}}}
        widget.set_message(replace(message, stats=stats))
        qtbot.wait(1)
        heading = second_run_name(stats["compare"])
        assert " ".join(title.lines()).split() == heading.split()  # every word, in order, none elided
        assert title.width() <= column.width()
        assert title.mapTo(viewport, title.rect().topRight()).x() < viewport.width()  # the column is in view
        left, right = _ink_columns(title)
        assert right < title.contentsRect().right(), (heading, title.lines(), left, right, title.width())
        metrics = title.fontMetrics()
        widest = max(metrics.horizontalAdvance(line) for line in title.lines())
        assert left + widest <= title.contentsRect().width(), (heading, title.lines())
        fitted += widest >= title.width() - 12  # a line within 12 px of the edge: the case the trial saw
    assert fitted > 0  # (some heading came near the edge, else this test proves nothing)
