"""End to end on the default model: a message streams into the view and into the database."""

from __future__ import annotations

import sqlite3

from conftest import FAST
from PySide6.QtCore import Qt

from app.gui.reply_format import dropped_text


def test_reply_streams_into_the_view_and_the_database(qtbot, make_window, tmp_path):
    window = make_window(FAST.with_values(max_new_tokens=40))
    db_path = tmp_path / "history.sqlite3"
    observed = []  # (text in the signal, text in the bubble, rows in the database) while streaming

    def on_update(text: str) -> None:
        widget = window.chat_view.message_widgets()[-1]
        widget.flush()
        with sqlite3.connect(db_path) as other:  # another connection, as after a crash
            rows = other.execute("SELECT role, content, state FROM messages ORDER BY position").fetchall()
        observed.append((text, widget.body.markdown, rows))

    window.reply_updated.connect(on_update)
    started = []
    window.generation_started.connect(
        lambda cid: started.append([(m.role, m.content) for m in window.db.messages(cid)])
    )
    qtbot.keyClicks(window.composer.edit, "Name three colours.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)  # Enter sends
    final = finished.args[0]

    # the user message was in the database before generation started
    assert started == [[("user", "Name three colours."), ("assistant", "")]]
    assert window.composer.text() == ""
    # the reply arrived in pieces, each one extending the last, and the bubble showed it
    texts = [text for text, _, _ in observed]
    assert len(texts) >= 3 and final.content.startswith(texts[-2]) and texts[-1] == final.content
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert any(0 < len(shown) < len(final.content) for _, shown, _ in observed)
    # the database followed the stream: every partial reply stored is a prefix of the final one
    stored = [rows[1][1] for _, _, rows in observed if len(rows) == 2]
    assert all(final.content.startswith(s) for s in stored)
    assert all(rows[1][2] == "streaming" for _, _, rows in observed[:-1] if len(rows) == 2)
    # the final row
    row = window.db.message(final.id)
    assert row.content == final.content and row.state == "complete"
    stats = row.stats
    assert stats["mode"] == "auto"  # the default: per step a drafter (the default model's head, prompt lookup) or none
    assert sum(use["steps"] for use in stats["drafters"].values()) == sum(stats["k_steps"].values()) > 0
    assert stats["drafted"] == sum(use["drafted"] for use in stats["drafters"].values())
    assert 1 <= stats["new_tokens"] <= 40 and stats["tokens_per_s"] > 0 and stats["ttft_ms"] > 0
    assert stats["stop_reason"] in ("eos", "max_new_tokens") and stats["model"].startswith("SmolLM2-135M-Instruct-int4")
    # the bubble shows the footer with the reply's numbers
    footer = window.chat_view.message_widgets()[-1].footer.text()
    limit = "Length limit reached (Continue writes more) · " if stats["stop_reason"] == "max_new_tokens" else ""
    assert footer.startswith(f"{limit}Auto (") and "steps" in footer.split(" · TTFT")[0]  # what Auto did
    assert f" · TTFT {stats['ttft_ms']:.0f} ms · {stats['tokens_per_s']:.1f} tokens/s" in footer
    assert f" · {stats['new_tokens']} tokens · " in footer and "dropped" not in footer  # nothing dropped, nothing said
    # the conversation got its title from the message and is listed
    assert window.conversation_list.list.item(0).text() == "Name three colours."
    assert window.chat_view.title_label.text() == "Name three colours."
    # the graph was drawn live, at least 4 times a second
    times = window.live_graph.refresh_times
    if len(times) >= 2:
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert max(gaps) < 0.25 + 0.2, gaps  # 200 ms timer; allow for a busy machine
    assert window.live_graph.series[-1].key == "auto" and window.live_graph.series[-1].steps


def test_speculative_reply_records_acceptance_and_highlights_drafts(qtbot, make_window):
    window = make_window(FAST.with_values(decoding="spec_lookup", k=4, max_new_tokens=48))
    window.composer.set_text("Repeat exactly: one two three four five. one two three four five. one two three four five.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.submit()
    final = finished.args[0]
    stats = final.stats
    assert stats["mode"] == "spec" and stats["drafter"] == "lookup" and stats["k"] == 4
    assert stats["drafted"] > 0 and stats["acceptance_rate"] == round(stats["accepted"] / stats["drafted"], 4)
    widget = window.chat_view.message_widgets()[-1]
    assert "Speculative (prompt lookup, K 4)" in widget.footer.text() and f"drafts: {stats['acceptance_rate']:.0%} accepted" in widget.footer.text()
    if stats["accepted"]:
        assert final.draft_spans, "accepted draft tokens must be recorded as spans"
        assert all(0 <= a < b <= len(final.content) for a, b in final.draft_spans)
        assert widget.body.highlighted_text(), "accepted draft tokens must be highlighted"
    series = window.live_graph.series[-1]
    assert series.key == "spec" and series.drafted == stats["drafted"] and series.accepted == stats["accepted"]
    assert window.live_graph.acceptance_plot.listDataItems()


def test_rolling_context_is_shown_in_the_graph_and_the_footer(qtbot, make_window):
    import pyqtgraph as pg

    # a small n_ctx: the reply outgrows the KV cache, which rolls (attention sinks kept)
    window = make_window(FAST.with_values(n_ctx=64, n_keep=4, n_discard=24, max_new_tokens=120))
    window.composer.set_text("Write a long story about a cat who travels the world.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.submit()
    stats = finished.args[0].stats
    assert stats["rolls"] >= 1 and stats["discarded_tokens"] == 24 * stats["rolls"]
    footer = window.chat_view.message_widgets()[-1].footer.text()
    assert dropped_text(stats["discarded_tokens"], stats["rolls"]) in footer and " roll" not in footer
    series = window.live_graph.series[-1]
    assert len(series.rolls) == stats["rolls"]
    assert all(0 < fill <= 100 for _, fill in series.fill)
    assert max(fill for _, fill in series.fill) > 90  # the cache filled up before each roll
    lines = [item for item in window.live_graph.fill_plot.items if isinstance(item, pg.InfiniteLine)]
    assert len(lines) == stats["rolls"]
    # (the graph in the footer's words, the tokens dropped counted)
    assert dropped_text(stats["discarded_tokens"], stats["rolls"]) in window.live_graph.summary_text()


def test_json_output_makes_the_conversations_replies_json_objects(qtbot, make_window):
    """The "JSON output" box of a new chat is kept with the conversation it starts, and its replies are JSON
    objects (a grammar constrains every token); unchecked again, the next reply is free text."""
    import json

    window = make_window(FAST.with_values(max_new_tokens=120))
    window.chat_view.json_box.setChecked(True)
    qtbot.keyClicks(window.composer.edit, "Give me a JSON object with the name and the capital of France.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    assert isinstance(json.loads(finished.args[0].content), dict)
    conversation = window.db.conversation(window.chat_view.conversation_id)
    assert conversation.json_output is True
    window.chat_view.json_box.setChecked(False)
    assert window.db.conversation(conversation.id).json_output is False
    qtbot.keyClicks(window.composer.edit, "Now say hello in plain words.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    assert not finished.args[0].content.lstrip().startswith("{")
