"""Durations in words a person reads, wherever the window shows one (issue 35: a long paste's "TTFT 133757 ms")."""

import math

import pytest

from app.gui.reply_format import duration_text, export_footer_text, footer_text


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.0, "0 ms"),
        (0.0004, "0 ms"),
        (0.042, "42 ms"),
        (0.85, "850 ms"),
        (0.9996, "1.0 s"),  # rounds up into the next unit, never "1000 ms"
        (4.2, "4.2 s"),
        (9.96, "10 s"),
        (42.4, "42 s"),
        (59.6, "1 min 0 s"),
        (133.757, "2 min 14 s"),
        (3599.4, "59 min 59 s"),
        (3725, "1 h 2 min"),
        (-3, "0 ms"),
        (math.nan, "unknown"),
        (math.inf, "unknown"),
    ],
)
def test_duration_text(seconds, words):
    assert duration_text(seconds) == words


def test_footers_say_a_long_time_to_first_token_in_minutes():
    stats = {"mode": "ar", "drafter": None, "ttft_ms": 133757.0, "tokens_per_s": 40.0, "acceptance_rate": None,
             "new_tokens": 24, "stop_reason": "max_new_tokens"}  # fmt: skip
    assert "TTFT 2 min 14 s · 40.0 tokens/s" in footer_text(stats)
    assert "24 tokens at 40.0 tokens/s, the first after 2 min 14 s" in export_footer_text(stats)
    assert "TTFT 850 ms" in footer_text({**stats, "ttft_ms": 850.2})
