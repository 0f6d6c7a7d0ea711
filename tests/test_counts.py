"""Counts in words, one home for the window and the command line (``app.counts``): a newcomer trial found two
token pluralizers, the command line's printing "[ar] 1024 tokens" where the window said "1,024 tokens"."""

from __future__ import annotations

from app.counts import tokens_text
from inference.events import GenerationStats


def test_token_counts_in_words():
    assert [tokens_text(n) for n in (0, 1, 2, 1024)] == ["0 tokens", "1 token", "2 tokens", "1,024 tokens"]


def test_the_command_line_and_the_window_say_a_token_count_alike():
    from app.cli.statistics import describe, speedup_text
    from app.gui.reply_format import metrics_text

    stats = GenerationStats(mode="ar", new_tokens=1024, ttft_ms=41.0, decode_tokens_per_s=20.0)
    assert describe(stats).startswith("[ar] 1,024 tokens, TTFT 41.0 ms, 20.0 tokens/s,"), describe(stats)
    assert metrics_text({"new_tokens": 1024}) == "1,024 tokens"
    one = GenerationStats(mode="auto", new_tokens=1, ttft_ms=41.0)
    assert speedup_text(stats, one, None) == (
        "no speedup to compare: plain decoding wrote 1,024 tokens and Auto 1 token, and a decode speed needs 2 or more"
    )
