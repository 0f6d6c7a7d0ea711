"""Counts and outcomes in words, said alike by the window (``app.gui``) and the command line (``app.cli``); no Qt."""

from __future__ import annotations

#: A reply the model ended at its first token: no text to show (a trial's window showed an empty bubble).
NOTHING_GENERATED = "The model ended its reply at once (nothing generated)"


def tokens_text(count: int) -> str:
    """``1 token``, ``24 tokens``, ``1,024 tokens``."""
    return f"{count:,} token{'' if count == 1 else 's'}"


def ended_at_once(new_tokens: object, stop_reason: object) -> bool:
    """Whether a reply is empty because the model ended it at once: no token, its end the model's own (an end of
    reply token), not a stop, a failure or a length limit."""
    return new_tokens == 0 and not isinstance(new_tokens, bool) and stop_reason == "eos"


def nothing_generated_text(cut: bool, larger_context: str, again: str) -> str:
    """:data:`NOTHING_GENERATED`, with what can help: where the prompt was cut to fit the context length (a trial's
    631-token paste at n_ctx 256), a larger one (``larger_context``: the window's "Context length in the settings",
    the command line's "--n-ctx") or a shorter message; else ``again`` (the window's "Regenerate, or rephrase your
    message")."""
    if cut:
        return (f"{NOTHING_GENERATED}: it read only part of a conversation longer than the context length; raise "
                f"{larger_context}, or send a shorter message")
    return f"{NOTHING_GENERATED}: {again}"
