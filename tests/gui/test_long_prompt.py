"""A long message in the window: the footer says what the rolling context discards before the reply starts, and
Stop ends the reply during the prefill, within seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import FAST
from gui_helpers import click

from app.gui.reply_format import export_footer_text, footer_text

GENESIS = Path(__file__).resolve().parents[2] / "bench" / "data" / "kjv_genesis.txt"
# A prefill pass takes about a second on 2 quiet cores; the inference thread runs at a lower priority (nice 5), so
# on a busy machine a pass takes several. The whole prefill below takes tens of seconds.
STOP_WITHIN_S = 15.0


@pytest.mark.serial  # a wall-time bound
def test_stop_during_a_long_prefill_after_the_overflow_notice(qtbot, make_window):
    window = make_window(FAST.with_values(n_ctx=8192))
    updates, read = [], []
    window.replies.updated.connect(lambda reply, text: updates.append((reply.stats.get("live") or "", text)))
    window.replies.updated.connect(lambda reply, text: read.append((reply.stats.get("prefill") or {}).get("done", 0)))
    # ~11,000 tokens: the middle is cut, 8,168 left to prefill in many passes (24 left for the reply)
    window.composer.set_text(GENESIS.read_text(encoding="utf-8")[:44_000])
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.submit()
        qtbot.waitUntil(lambda: any("more than the context length (8,192)" in live for live, _ in updates), timeout=30_000)
        qtbot.waitUntil(lambda: any(read), timeout=100_000)  # Stop once a prefill pass has been read, mid-prefill
        click(qtbot, window.composer.stop_button)
        stopped_at = time.perf_counter()
    stop_took = time.perf_counter() - stopped_at
    final = finished.args[0]
    assert stop_took < STOP_WITHIN_S, f"the reply ended {stop_took:.1f} s after Stop"
    # No text at all: the prefill itself was stopped (after it, the first token comes before cancel is checked).
    assert final.state == "stopped" and final.content == "" and final.stats["stop_reason"] == "cancelled"
    notice = next(i for i, (live, _) in enumerate(updates) if "more than the context length (8,192)" in live)
    assert all(text == "" for _, text in updates[: notice + 1])  # said before any reply text
    # the footer has no speed to show, and "Stopping…" goes once the reply has ended
    assert window.chat_view.widget(final.id).footer.text() == "Stopped before the first token"
    assert window.statusBar().currentMessage() == ""


def test_a_reply_stopped_before_its_first_token_says_so_without_figures():
    stats = {"mode": "ar", "drafter": None, "ttft_ms": 0.0, "tokens_per_s": 0.0, "acceptance_rate": None,
             "discarded_tokens": 8184, "rolls": 1, "new_tokens": 0, "stop_reason": "cancelled"}  # fmt: skip
    assert footer_text(stats, "stopped") == "Stopped before the first token"
    assert export_footer_text(stats, "stopped") == "Stopped before the first token"
    assert footer_text({**stats, "error": "the server sent nothing for 120 s"}, "stopped") == (
        "Stopped before the first token · the server sent nothing for 120 s"
    )
    # a reply stopped after its first token keeps its figures
    assert footer_text({**stats, "new_tokens": 3}, "stopped").startswith("Stopped · Plain decoding · TTFT 0 ms")
