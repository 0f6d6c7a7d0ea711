"""Counts in words, said alike by the window (``app.gui``) and the command line (``app.cli``); no Qt."""

from __future__ import annotations


def tokens_text(count: int) -> str:
    """``1 token``, ``24 tokens``, ``1,024 tokens``."""
    return f"{count:,} token{'' if count == 1 else 's'}"
