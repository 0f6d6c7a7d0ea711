"""A prompt longer than n_ctx is said in the reply's live footer while it prefills, before any reply text, its numbers
written as the progress line above it writes them ("10,277 tokens", not "10277" beside "2,093": newcomer trial)."""

from app.gui.history_db import HistoryDB
from app.gui.reply_format import metrics_text
from app.gui.reply_recorder import ReplyRecorder
from inference.events import PromptOverflow, StepStats, TextDelta


def test_the_live_footer_names_the_discarded_prompt_tokens_until_the_reply_starts(tmp_path):
    """The note is a sentence of its own, capitalised: the footer shows each part joined by " · " on a line of its
    own where it wraps (a newcomer read "Generating…" then "the conversation is 9,816 tokens…" in lower case)."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("t")
    message = db.message(db.add_message(conversation, "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message)
    assert recorder.snapshot().stats["live"] == "Generating…"
    recorder.add([PromptOverflow(prompt_tokens=8778, n_ctx=4096, discarded_tokens=5194, head_tokens=24,
                                 message_tokens=256, tail_tokens=3304)])  # (the engine's cut of the trial's paste)
    live = recorder.snapshot().stats["live"]
    assert live == (
        "Generating… · Your message is too long: the conversation is 8,778 tokens, more than the context length "
        "(4,096), so the model keeps the first 280 tokens (your message's first 256 among them) and the last 3,304, and skips 5,194 in the middle "
        "(raise Context length in the settings to keep them)"
    )  # (280 + 3,304 + 5,194 = 8,778)
    step = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0, verify_ms=5, step_ms=5, k=0, cache_len=4000, n_ctx=4096, elapsed_s=1.0, generated=2)
    recorder.add([TextDelta("Hi", 1, False), step])
    assert recorder.snapshot().stats["live"].startswith("Generating · 2 tokens")
    db.close()


def test_a_conversation_longer_than_the_model_allows_is_not_told_to_raise_the_context_length(tmp_path):
    """Newcomer trial: a 9,504-token paste was told "raise Context length in the settings to keep them" while the
    setting stops at the model's 8,192: no setting keeps them, so the advice is what can."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("t")
    lives = []
    for prompt_tokens in (8000, 9504):
        message = db.message(db.add_message(conversation, "assistant", "", state="streaming"))
        recorder = ReplyRecorder(db, message)
        recorder.add([PromptOverflow(prompt_tokens=prompt_tokens, n_ctx=4096, discarded_tokens=prompt_tokens - 3366,
                                     head_tokens=4, message_tokens=0, tail_tokens=3362, max_n_ctx=8192)])
        lives.append(recorder.snapshot().stats["live"])
    assert lives[0].endswith("(raise Context length in the settings to keep them)")
    assert lives[1] == (
        "Generating… · Earlier turns no longer fit: the conversation is 9,504 tokens, more than the context length "
        "(4,096), so the model keeps the first 4 tokens and the last 3,362, and skips 6,138 in the middle (this model reads at most 8,192 tokens: "
        "shorten the message or start a new chat to keep it whole)"
    )
    db.close()


def test_the_footer_writes_dropped_tokens_with_thousands_separators():
    footer = metrics_text({"discarded_tokens": 6138, "rolls": 1, "new_tokens": 12})
    assert "context full: 6,138 earlier tokens dropped once" in footer


def _finished_footer(tmp_path, events, **stats) -> str:
    """The footer of a reply recorded from ``events`` then a ``Finished`` with ``stats``."""
    from app.gui.reply_format import footer_text
    from inference.events import Finished, GenerationStats

    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("t")
    recorder = ReplyRecorder(db, db.message(db.add_message(conversation, "assistant", "", state="streaming")))
    recorder.add([*events, Finished(GenerationStats(mode="ar", stop_reason="eos", **stats))])
    recorder.finish("complete")
    footer = footer_text(db.message(recorder.message_id).stats)
    db.close()
    return footer


def test_the_footer_says_the_conversation_was_cut_to_fit_and_how_much_the_model_read(tmp_path):
    """A reply at n_ctx 64 to a longer prompt said only "context full twice: 1,136 earlier tokens dropped", not that
    the prompt itself was cut to fit: the footer says so with what was kept (the engine's cut of a 1,124-token chat:
    the first 30 and the last 18), and the context full only for the tokens the reply's own rolls dropped."""
    from inference.events import ContextRolled

    step = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0, verify_ms=5, step_ms=5, k=0, cache_len=49, n_ctx=64,
                     elapsed_s=0.1, generated=1)  # fmt: skip
    cut = PromptOverflow(prompt_tokens=1124, n_ctx=64, discarded_tokens=1076, head_tokens=24, message_tokens=6,
                         tail_tokens=18, max_n_ctx=8192)  # fmt: skip
    rolled = ContextRolled(discarded_tokens=30, n_keep=4, cache_len=34)
    footer = _finished_footer(tmp_path / "cut", [cut, TextDelta("A", 1, False), step, rolled, rolled],
                              prompt_tokens=1124, new_tokens=60, rolls=2, discarded_tokens=1136)  # fmt: skip
    assert (
        " · your message is too long: the model read 48 of the conversation's 1,124 tokens (the first 30 and the "
        "last 18) · context full twice: 60 earlier tokens dropped · 60 tokens"
    ) in footer
    # rolled through (its rolls before the first token): the cut alone, no context full of the reply's
    through = PromptOverflow(prompt_tokens=700, n_ctx=64, discarded_tokens=640, head_tokens=4, message_tokens=0,
                             tail_tokens=56)  # fmt: skip
    prefill_rolls = [ContextRolled(discarded_tokens=40, n_keep=4, cache_len=24)] * 16
    footer = _finished_footer(tmp_path / "through", [through, *prefill_rolls, TextDelta("A", 1, False), step],
                              prompt_tokens=700, new_tokens=3, rolls=16, discarded_tokens=640)  # fmt: skip
    assert footer.endswith(
        " · earlier turns no longer fit: the model read 60 of the conversation's 700 tokens (the first 4 and the last "
        "56) · 3 tokens"
    ), footer
    assert "context full" not in footer


def test_a_first_message_longer_than_the_model_allows_is_not_told_to_start_a_new_chat(tmp_path):
    """Trial: a 50 KB paste sent as a new chat's first message (9,816 tokens, the model reads 8,192) was told
    "shorten the message or start a new chat to keep it whole": it was a new chat, with nothing before it to leave
    out. A message after earlier turns keeps that advice."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    lives = []
    for turns in (0, 1):
        conversation = db.create_conversation("t")
        for _ in range(turns):
            db.add_message(conversation, "user", "Hi")
            db.add_message(conversation, "assistant", "Hello!")
        db.add_message(conversation, "user", "Summarize this text in two sentences: ...")
        message = db.message(db.add_message(conversation, "assistant", "", state="streaming"))
        recorder = ReplyRecorder(db, message)
        recorder.add([PromptOverflow(prompt_tokens=9816, n_ctx=4096, discarded_tokens=6020, head_tokens=24,
                                     message_tokens=256, tail_tokens=3516, max_n_ctx=8192)])
        lives.append(recorder.snapshot().stats["live"])
    assert lives[0].endswith("(this model reads at most 8,192 tokens: shorten the message to keep it whole)")
    assert lives[1].endswith(
        "(this model reads at most 8,192 tokens: shorten the message or start a new chat to keep it whole)"
    )
    db.close()
