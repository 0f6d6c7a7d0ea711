"""A continued reply's footer says that Continue wrote more of the earlier reply, and the totals, before the numbers
of the last part (newcomer trial: the footer read as if the reply were the continuation alone)."""

from __future__ import annotations

from app.gui.reply_format import continued_text, export_footer_text, footer_text, last_part

CONTINUED = {"mode": "ar", "ttft_ms": 850.0, "tokens_per_s": 40.0, "new_tokens": 1024, "earlier_tokens": 512,
             "continued": 1, "stop_reason": "max_new_tokens"}  # fmt: skip


def test_the_footer_of_a_continued_reply_gives_the_totals_then_the_last_part():
    assert footer_text(CONTINUED) == (
        "Length limit reached (Continue writes more) · Continued once: 1,024 tokens in all · last part: "
        "Plain decoding · TTFT 850 ms · 40.0 tokens/s · 512 tokens"
    )
    twice = {**CONTINUED, "continued": 2, "new_tokens": 1536, "earlier_tokens": 1024, "stop_reason": "eos"}
    assert footer_text(twice).startswith("Continued twice: 1,536 tokens in all · last part: Plain decoding")
    assert footer_text(twice).endswith("· 512 tokens")


def test_a_reply_continued_by_an_earlier_version_gives_only_its_total():
    """Stored before ``earlier_tokens``: the total is said once, the last part without a count of its own."""
    older = {key: value for key, value in CONTINUED.items() if key != "earlier_tokens"}
    assert continued_text(older) == "Continued once: 1,024 tokens in all"
    assert "new_tokens" not in last_part(older)
    assert footer_text(older).endswith("last part: Plain decoding · TTFT 850 ms · 40.0 tokens/s")
    assert footer_text({"continued": 1, "error": "gone"}, "error") == "Failed · Continued once: gone"


def test_token_counts_say_one_token_and_group_thousands():
    """Review: "Continued once: 1 tokens in all" and a footer's "1 tokens"."""
    assert continued_text({"continued": 1, "new_tokens": 1}) == "Continued once: 1 token in all"
    assert continued_text({"continued": 2, "new_tokens": 1024}) == "Continued twice: 1,024 tokens in all"
    assert footer_text({"mode": "ar", "new_tokens": 1}).endswith(" · 1 token")


def test_the_markdown_export_of_a_continued_reply_gives_the_totals_then_the_last_part():
    """Trial: a reply continued once (8 + 8 tokens) was exported as "16 tokens at 30.6 tokens/s, the first after
    35 ms": the last part's speed and TTFT given to the whole reply, whose first token came after 119 ms."""
    assert export_footer_text(CONTINUED) == (
        "Cut off at the length limit · continued once: 1,024 tokens in all · last part: Plain decoding · "
        "512 tokens at 40.0 tokens/s, the first after 850 ms"
    )
    older = {key: value for key, value in CONTINUED.items() if key != "earlier_tokens"}  # (no count of its own)
    assert export_footer_text(older) == (
        "Cut off at the length limit · continued once: 1,024 tokens in all · last part: Plain decoding · "
        "40.0 tokens/s, the first after 850 ms"
    )
