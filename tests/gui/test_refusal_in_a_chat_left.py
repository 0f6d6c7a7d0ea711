"""A reply the engine refuses for a setting, in a chat left before it failed: the settings are the window's, so its
field is flagged in place, but the words say which chat's reply was refused (trial: chat A refused for its long
system prompt while chat B, with none, was shown; the field under B read "Always kept 'auto' pins the 126-token
system prompt", as if B's settings or prompt had failed, and kept saying so after B's own reply went through)."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import two_chats
from helpers import engine_refuses_long_system_prompts
from test_unsent_message import click

#: What the engine's refusal (helpers.engine_refuses_long_system_prompts) of chat A's 129-token system prompt says.
REFUSAL = "Always kept 'auto' pins the 129-token system prompt, which leaves no room in Context length 64"


def flagged(window) -> dict[str, str]:
    pane = window.settings_pane
    return {name: label.text() for name, label in pane.error_labels.items() if label.isVisibleTo(pane)}


def _refused_in_chat_a(qtbot, make_window, monkeypatch, leave_before_the_refusal: bool):
    """A window whose reply in chat A the engine refused (chat A's system prompt does not fit in n_ctx; chat B has
    none: the same settings answer there), chat B opened before the refusal or left shown after it; returns it."""
    engine_refuses_long_system_prompts(monkeypatch)
    window = make_window(FAST.with_values(n_ctx=64))
    a, b = two_chats(window, "Chat A", "Chat B")
    window.db.set_system_prompt(a, "You are a helpful assistant. " * 20)
    click(window, a)
    window.composer.set_text("Are you there?")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.composer.submit()
        if leave_before_the_refusal:
            click(window, b)
    return window, b


def test_a_setting_refused_in_a_chat_left_is_flagged_naming_that_chat(qtbot, make_window, monkeypatch):
    window, _ = _refused_in_chat_a(qtbot, make_window, monkeypatch, leave_before_the_refusal=True)
    assert window.composer.error_text == ""  # B's box says nothing of A
    assert list(flagged(window)) == ["n_keep"]
    assert flagged(window)["n_keep"].startswith(f"The reply in “Chat A” was refused: {REFUSAL}: raise"), flagged(window)
    window.composer.set_text("Hi")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.submit()  # B answers with these settings
    assert finished.args[0] is not None and finished.args[0].state == "complete"
    assert flagged(window)["n_keep"].startswith(f"The reply in “Chat A” was refused: {REFUSAL}")  # (still true of A)


def test_a_setting_refused_in_the_chat_shown_names_it_too(qtbot, make_window, monkeypatch):
    """Refused while shown, then another chat opened: the flag, which stays, names the chat it came from."""
    window, b = _refused_in_chat_a(qtbot, make_window, monkeypatch, leave_before_the_refusal=False)
    assert window.composer.error_text.startswith(f"Could not generate a reply: {REFUSAL}")  # as before
    click(window, b)
    assert flagged(window)["n_keep"].startswith(f"The reply in “Chat A” was refused: {REFUSAL}")
