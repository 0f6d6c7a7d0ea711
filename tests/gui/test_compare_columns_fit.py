"""A comparison's columns hold their heading, text and statistics line whole, one under the other, in a narrow
window (high-DPI trial: at 1366x768 and 125% scaling, a 1093x614 window, the Auto column's statistics line wrapped
to three lines where the bubble had room for two, and it was drawn over the last line of the reply, cut in half)."""

from __future__ import annotations

from conftest import FAST
from pytestqt.exceptions import TimeoutError as WaitTimeout

from app.gui.history_db import HistoryDB
from app.gui.widgets.message_widget import MessageWidget

ANSWER = ("Here are a few more names for your favorite colors that include multiple color options. Black is another way "
          "to refer to black, which isn't an official color name. So, in this list there are many different ways of "
          "referring to a certain color.")  # fmt: skip
PLAIN = {"mode": "ar", "ttft_ms": 959.8, "tokens_per_s": 48.84, "acceptance_rate": None, "new_tokens": 104,
         "stop_reason": "eos", "drafters": {"plain": {"steps": 104}}, "text": "Red, green and blue."}  # fmt: skip
AUTO = {"mode": "auto", "drafter": "head", "ttft_ms": 283.2, "tokens_per_s": 58.2, "acceptance_rate": 0.5833,
        "new_tokens": 168, "stop_reason": "eos", "text": ANSWER,
        "drafters": {"head": {"steps": 96, "drafted": 96, "accepted": 56, "k_max": 1}, "plain": {"steps": 16}}}  # fmt: skip


def test_each_column_keeps_its_text_clear_of_its_statistics_at_every_width(qtbot, make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Colours")
    db.add_message(chat, "user", "Name three colors.")
    compare = {"ar": PLAIN, "spec": AUTO, "speedup": 1.19, "identical": False, "sampled": True}
    reply = db.add_message(chat, "assistant", ANSWER, stats={**AUTO, "compare": compare})
    db.close()
    window = make_window(FAST, history=history, start=False)
    view = window.chat_view
    qtbot.waitUntil(lambda: view.fully_loaded and view.widget(reply) is not None, timeout=5000)
    widget: MessageWidget = view.widget(reply)
    def problems() -> list[str]:
        found = []
        for column in (widget.ar_column, widget.spec_column):
            title, text, metrics = column.title.geometry(), column.view.geometry(), column.metrics.geometry()
            if text.height() < sum(part.height() for part in column.view.text_views()):
                found.append(f"{column.title.text()}: its text is cut ({text.height()} px shown)")
            if not (title.bottom() < text.top() and text.bottom() < metrics.top() and metrics.bottom() < column.height()):
                found.append(f"{column.title.text()}: overlap ({title}, {text}, {metrics} in {column.height()} px)")
            if column.mapTo(widget, column.rect().bottomLeft()).y() >= widget.footer.geometry().top():
                found.append(f"{column.title.text()}: under the bubble's footer")
        return found

    wrapped = set()
    for width in range(1000, 1400, 12):  # 1093: a 1366x768 screen at 125%; the statistics wrap at some widths
        window.resize(width, 614)
        try:
            qtbot.waitUntil(lambda: not problems(), timeout=1000)  # (the layout settles in a few passes)
        except WaitTimeout:
            raise AssertionError((width, problems())) from None
        wrapped.add(widget.spec_column.metrics.height())
    assert len(wrapped) > 1  # the statistics took more lines at some widths than at others (else this proves nothing)
