"""The live graph's summary keeps to two lines at 1366x768, so the settings below it fit without scrolling: a
restarted window whose last reply was a Compare said "Last reply: No speedup: Auto decoded plainly, drafts would not
pay at these settings (…) · speed only: texts differ by design (sampling). Its plots are drawn only while a reply is
generated." in four lines, and the settings scrolled, their last row below the screen. A shortened summary keeps
the whole text in its tooltip."""

from __future__ import annotations

import pytest

from app.gui.history_db import HistoryDB
from app.gui.settings_store import AppSettings

PLAIN = {"mode": "ar", "new_tokens": 96, "tokens_per_s": 30.0, "ttft_ms": 50.0, "text": "The knight rode on."}
AUTO_PLAIN = {"mode": "auto", "new_tokens": 96, "tokens_per_s": 29.1, "ttft_ms": 50.0, "text": "x",
              "drafters": {"plain": {"steps": 96}}}  # fmt: skip
AUTO_HEAD = {"mode": "auto", "new_tokens": 96, "tokens_per_s": 41.3, "ttft_ms": 50.0, "text": "x",
             "acceptance_rate": 0.29, "drafters": {"plain": {"steps": 20}, "head": {"steps": 50, "drafted": 90, "accepted": 26},
                                                   "lookup": {"steps": 5, "drafted": 10, "accepted": 3}}}  # fmt: skip
ROLLED = {"mode": "auto", "new_tokens": 512, "tokens_per_s": 41.3, "ttft_ms": 1250.0, "acceptance_rate": 0.52,
          "discarded_tokens": 1200, "rolls": 5, "drafters": {"plain": {"steps": 20}, "head": {"steps": 200, "drafted": 600, "accepted": 300},
                                                             "lookup": {"steps": 5, "drafted": 10, "accepted": 3}}}  # fmt: skip

LAST_REPLIES = {
    "compare, Auto stayed plain, sampled": {"compare": {"ar": PLAIN, "spec": AUTO_PLAIN, "speedup": 0.97, "identical": False, "sampled": True}},
    "compare, Auto drafted with two drafters": {"compare": {"ar": PLAIN, "spec": AUTO_HEAD, "speedup": 1.38, "identical": True}},
    "a reply whose context rolled": ROLLED,
}  # fmt: skip


@pytest.mark.parametrize("last", sorted(LAST_REPLIES))
def test_a_restarted_window_keeps_the_summary_to_two_lines_and_the_settings_whole(qtbot, make_window, tmp_path, last):
    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Knights")
    for index in range(3):  # (a chat's summary of its replies' speeds, after the last reply's)
        db.add_message(chat, "user", f"Question {index}")
        db.add_message(chat, "assistant", "An answer.", stats={"mode": "ar", "new_tokens": 40, "tokens_per_s": 31.0 + index})
    db.add_message(chat, "user", "Write a story about a brave knight.")
    db.add_message(chat, "assistant", PLAIN["text"], stats=LAST_REPLIES[last])
    db.close()
    window = make_window(AppSettings(), history=history, start=False)
    window.resize(1366, 768)
    summary, pane = window.live_graph.summary, window.settings_pane
    bar = pane.verticalScrollBar()
    qtbot.waitUntil(lambda: summary.text().startswith("Last reply: "), timeout=5000)
    qtbot.waitUntil(lambda: bar.maximum() == 0 and not bar.isVisible(), timeout=3000)  # the settings whole
    lines = round((summary.needed_height() - 4) / summary.fontMetrics().lineSpacing())
    assert lines <= 2, (summary.text(), lines)
    assert summary.height() >= summary.needed_height()  # (nothing of it cut)
    if summary.toolTip():  # a shortened summary: its tooltip says it whole
        assert summary.toolTip().startswith(summary.text().removesuffix("."))
        assert len(summary.toolTip()) > len(summary.text())


def test_the_fullest_text_that_fits_is_shown_again_at_a_new_width(qtbot):
    from app.gui.application import create_application
    from app.gui.widgets.graph_summary import SummaryLabel

    create_application()
    summary = SummaryLabel()
    qtbot.addWidget(summary)
    summary.resize(400, 40)
    summary.show()
    full = "Last reply: " + "speedup and identity words, " * 8 + "the end."
    short = "Last reply: Speedup 1.38×."
    summary.set_texts([full, short])
    assert summary.text() == short and summary.toolTip() == full
    assert summary.height() < 3 * summary.fontMetrics().lineSpacing()
    summary.resize(1600, 40)  # wide enough for the whole text in two lines
    qtbot.waitUntil(lambda: summary.text() == full, timeout=2000)
    assert summary.toolTip() == ""
    summary.set_texts([full + " " + full + " " + full])  # one text: shown whatever its lines, none cut
    assert summary.text().endswith("the end.") and summary.height() >= summary.needed_height()


def test_the_context_s_numbers_wrap_as_one_group(make_window):
    """A newcomer's summary broke "context 73 / 4,096 (2%)" and "context 2,804 / 4,096" across its two lines: the
    group's spaces do not break (rich text and plain), so at any width the group is on one line; likewise a rate and
    its unit (the README's screenshot broke "65.6 tokens/" from its "s")."""
    from inference.events import StepStats

    graph = make_window(start=False).live_graph
    graph.show_conversation(5)
    graph.start_run("ar", conversation_id=5)
    graph.add_events([StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=9.0, step_ms=10.0, k=0,
                                cache_len=2800 + i, n_ctx=4096, elapsed_s=0.1 * (i + 1), generated=i + 1,
                                drafter="plain") for i in range(5)])  # fmt: skip
    graph.finish_run()
    group = "context 2,804 / 4,096 (68%)"
    assert group.replace(" ", "\u00a0") in graph.summary_text()
    _assert_wraps_whole(graph, group)
    rate = next(word for word in graph.summary_text().split(": ")[1:] if "tokens/s" in word).split(" tokens/s")[0]
    _assert_wraps_whole(graph, f"{rate} tokens/s")  # (the screenshot broke "65.6 tokens/" from its "s")


def test_the_acceptance_rate_wraps_as_one_group(make_window):
    """Beside the rate and the context's numbers, "acceptance rate 29%" (now the footer's "drafts: 29% accepted")
    could break across the summary's two lines: its spaces do not break either."""
    from inference.events import StepStats

    graph = make_window(start=False).live_graph
    graph.show_conversation(5)
    graph.start_run("spec", conversation_id=5)
    graph.add_events([StepStats(drafted=7, accepted=2, emitted=3, draft_ms=1.0, verify_ms=9.0, step_ms=10.0, k=7,
                                cache_len=100 + 3 * i, n_ctx=4096, elapsed_s=0.1 * (i + 1), generated=3 * (i + 1),
                                drafter="lookup") for i in range(5)])  # fmt: skip
    graph.finish_run()
    assert "drafts: 29% accepted" in graph.summary_text()
    _assert_wraps_whole(graph, "drafts: 29% accepted")


def _assert_wraps_whole(graph, group: str) -> None:
    """At every width that holds ``group``, the summary's rich text lays it out on one line (its spaces may be
    non-breaking, a slash followed by a word joiner)."""
    import re

    from PySide6.QtGui import QTextDocument

    document = QTextDocument()
    document.setDocumentMargin(0)
    document.setDefaultFont(graph.summary.font())
    document.setHtml(graph.summary_html())
    pattern = re.escape(group).replace("\\ ", "[ \u00a0]").replace("/", "/\u2060?")
    start, end = re.search(pattern, document.firstBlock().text()).span()
    widest = graph.summary.fontMetrics().horizontalAdvance(group)
    for width in range(widest + 8, 3 * widest, 3):  # (each width the group fits, at every place it may fall)
        document.setTextWidth(width)
        document.size()  # (laid out)
        layout = document.firstBlock().layout()
        lines = [(layout.lineAt(i).textStart(), layout.lineAt(i).textLength()) for i in range(layout.lineCount())]
        assert lines and any(first <= start and end <= first + length for first, length in lines), (group, width)
