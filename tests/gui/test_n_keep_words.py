"""The rolling context's "Always kept (n_keep)" field says what auto keeps of a system prompt longer than half the
context length: its first half-context-length tokens (``ContextSettings.resolve``), not nothing."""

from __future__ import annotations

from conftest import FAST

from inference.settings import ContextSettings


def test_the_always_kept_tooltip_says_what_auto_keeps_of_a_long_system_prompt(make_window):
    """A README trial: the tooltip said "auto keeps the system prompt while it takes at most half the context
    length", so a 99-token system prompt at Context length 128 read as kept not at all; the window's footer then said
    "part of the system prompt (99 tokens) dropped", and the engine had kept its first 64 tokens through every roll."""
    window = make_window(FAST.with_values(n_ctx=128), start=False)
    assert ContextSettings(n_ctx=128).resolve(system_prompt_tokens=99)[0] == 64  # what the tooltip describes
    assert window.settings_pane.n_keep.toolTip() == (
        "n_keep: tokens at the start of the chat that are never forgotten; auto keeps the system prompt, and of one "
        "longer than half the context length its first half-context-length tokens (the rest rolls out with the chat)"
    )
    assert window.settings_pane.n_keep.text() == "auto (system prompt)"
