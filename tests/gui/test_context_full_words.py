"""What the rolling context did is said in words a user reads (newcomer trial: "(1 roll)" in a footer and "1 roll" in
the graph's summary were jargon)."""

from __future__ import annotations

from app.gui.reply_format import dropped_text, footer_text, metrics_text


def test_the_footer_says_the_context_was_full_and_how_often():
    assert dropped_text(512, 1) == "context full: 512 earlier tokens dropped once"
    assert dropped_text(1024, 2) == "context full twice: 1,024 earlier tokens dropped"
    assert dropped_text(6144, 12) == "context full 12 times: 6,144 earlier tokens dropped"
    assert dropped_text(6138, 0) == "context full: 6,138 earlier tokens dropped"  # a long prompt cut before reading
    footer = footer_text({"mode": "ar", "tokens_per_s": 50.0, "discarded_tokens": 512, "rolls": 1, "new_tokens": 90})
    assert footer == "Plain decoding · 50.0 tokens/s · context full: 512 earlier tokens dropped once · 90 tokens"
    assert "roll" not in metrics_text({"discarded_tokens": 48, "rolls": 2, "new_tokens": 9})


def test_the_graph_summary_says_the_context_was_full(qtbot):
    from app.gui.application import create_application
    from app.gui.widgets.live_graph import CONTEXT_FULL_MARK, LiveGraph
    from inference.events import ContextRolled, StepStats

    create_application()
    graph = LiveGraph()
    qtbot.addWidget(graph)
    graph.show_conversation(1)
    graph.start_run("ar", conversation_id=1)
    step = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=9.0, step_ms=10.0, k=0, cache_len=63,
                     n_ctx=64, elapsed_s=0.5, generated=10)  # fmt: skip
    graph.add_events([step, ContextRolled(discarded_tokens=24, n_keep=4, cache_len=39), step])
    graph.finish_run()
    summary = graph.summary_text()
    assert summary.endswith("context full: 24 earlier tokens dropped once") and "roll" not in summary
    # the dashed lines' legend: their mark before the words (the button row's legend said "┆ full", jargon: room
    # for words was only in the summary)
    assert f"{CONTEXT_FULL_MARK}</span>&nbsp;context full: 24 earlier tokens dropped once" in graph.summary_html()
    assert "roll" not in graph.legend.text() and "full" not in graph.legend.text()
