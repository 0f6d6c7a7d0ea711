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


def test_a_system_prompt_dropped_under_a_numbered_always_kept_blames_that_setting(tmp_path):
    """Trial at n_ctx 256 with Always kept 4 and a 19-token system prompt: the footer read "part of the system prompt
    (19 tokens) dropped: a context length of 38 or more keeps it whole", at a context length of 256. Where the context
    length is twice the system prompt or more, only Always kept below its length drops it: the footer says so."""
    from app.gui.history_db import HistoryDB
    from app.gui.reply_format import footer_text
    from app.gui.reply_recorder import ReplyRecorder
    from inference.events import ContextRolled, Finished, GenerationStats, StepStats, TextDelta

    def footer(n_ctx: int, system_tokens: int) -> str:
        db = HistoryDB(tmp_path / f"h{n_ctx}.sqlite3")
        conversation = db.create_conversation("t")
        db.add_message(conversation, "user", "Tell me about birds.")
        recorder = ReplyRecorder(db, db.message(db.add_message(conversation, "assistant", "", state="streaming")))
        step = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0, verify_ms=5, step_ms=5, k=0, cache_len=255,
                         n_ctx=n_ctx, elapsed_s=1.0, generated=1)  # fmt: skip
        recorder.add([TextDelta("A", 1, False), step, ContextRolled(discarded_tokens=126, n_keep=4, cache_len=130),
                      Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=1, discarded_tokens=126, rolls=1,
                                               system_prompt_tokens=system_tokens, system_prompt_dropped=True))])
        recorder.finish("complete")
        text = footer_text(db.message(recorder.message_id).stats)
        db.close()
        return text

    assert " · part of the system prompt (19 tokens) dropped: Always kept of 19 or more (or auto) in the settings " \
           "keeps it whole · " in footer(256, 19), footer(256, 19)
    # a system prompt longer than half the context length: auto keeps half, a larger context length keeps it whole
    assert " · part of the system prompt (159 tokens) dropped: a context length of 318 or more keeps it whole · " \
           in footer(256, 159), footer(256, 159)
