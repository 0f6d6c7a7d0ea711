"""A conversation longer than the context length is said with what made it so: a long message cut before it was
read, and a chat whose earlier turns no longer fit (earlier rolls had dropped them, or the message fits but not with
them), both read "conversation cut to fit the context length" in the footer and "The conversation is … tokens" while
the reply started, and a newcomer could not tell whether to shorten the message or start a new chat."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import send_and_wait
from test_empty_reply import PASTE

from app.gui.history_db import HistoryDB
from app.gui.reply_format import footer_text, metrics_text
from app.gui.reply_recorder import ReplyRecorder
from inference.events import Finished, GenerationStats, PromptOverflow, StepStats, TextDelta

STEP = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0, verify_ms=5, step_ms=5, k=0, cache_len=3600, n_ctx=4096,
                 elapsed_s=1.0, generated=1)  # fmt: skip
#: The engine's middle cut of a long paste: its first 256 tokens pinned (``prefill.middle_cut``).
LONG_MESSAGE = PromptOverflow(prompt_tokens=8778, n_ctx=4096, discarded_tokens=5194, head_tokens=24,
                              message_tokens=256, tail_tokens=3304, max_n_ctx=32768)  # fmt: skip
#: A short message after a long chat: it lies whole in the kept end, only earlier turns go.
LONG_CHAT = PromptOverflow(prompt_tokens=5000, n_ctx=4096, discarded_tokens=1584, head_tokens=4, message_tokens=0,
                           tail_tokens=3412, max_n_ctx=32768)  # fmt: skip


def _recorder(db: HistoryDB, earlier_turns: int) -> ReplyRecorder:
    conversation = db.create_conversation("t")
    for _ in range(earlier_turns):
        db.add_message(conversation, "user", "Hi")
        db.add_message(conversation, "assistant", "Hello!")
    db.add_message(conversation, "user", "Summarize this: ...")
    return ReplyRecorder(db, db.message(db.add_message(conversation, "assistant", "", state="streaming")))


def _live_and_footer(tmp_path, overflow: PromptOverflow, earlier_turns: int) -> tuple[str, str]:
    db = HistoryDB(tmp_path / f"h{earlier_turns}{overflow.message_tokens}.sqlite3")
    recorder = _recorder(db, earlier_turns)
    recorder.add([overflow])
    live = recorder.snapshot().stats["live"]
    recorder.add([TextDelta("A", 1, False), STEP, Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=1,
                                                                          prompt_tokens=overflow.prompt_tokens))])
    recorder.finish("complete")
    footer = footer_text(db.message(recorder.message_id).stats)
    db.close()
    return live, footer


def test_a_message_too_long_for_the_context_says_so_while_the_reply_starts_and_in_its_footer(tmp_path):
    live, footer = _live_and_footer(tmp_path, LONG_MESSAGE, earlier_turns=1)
    assert live == (
        "Generating… · Your message is too long: the conversation is 8,778 tokens, more than the context length "
        "(4,096), so the model keeps the first 280 tokens (your message's first 256 among them) and the last 3,304, "
        "and skips 5,194 in the middle (raise Context length in the settings to keep them)"
    )
    assert " · your message is too long: the model read 3,584 of the conversation's 8,778 tokens (the first 280 " \
           "and the last 3,304) · " in footer, footer
    assert "conversation cut" not in footer


def test_the_line_while_the_prompt_is_read_names_the_system_prompt_as_the_footer_does(tmp_path):
    """The footer said "(the system prompt's 24 tokens, your message's first 256 and the last 3,304)" and the line
    shown while the prompt was read "keeps the first 280 tokens (your message's first 256 among them)": the engine's
    ``PromptOverflow`` now says the system prompt's length, and both say it alike."""
    from dataclasses import replace

    live, _ = _live_and_footer(tmp_path, replace(LONG_MESSAGE, system_prompt_tokens=24), earlier_turns=1)
    assert "so the model keeps the system prompt's 24 tokens, your message's first 256 and the last 3,304, and " \
           "skips 5,194 in the middle (raise" in live, live


def test_earlier_turns_that_no_longer_fit_are_said_as_such(tmp_path):
    live, footer = _live_and_footer(tmp_path, LONG_CHAT, earlier_turns=3)
    assert live.startswith(
        "Generating… · Earlier turns no longer fit: the conversation is 5,000 tokens, more than the context length "
        "(4,096), so the model keeps the first 4 tokens and the last 3,412, and skips 1,584 in the middle"
    ), live
    assert " · earlier turns no longer fit: the model read 3,416 of the conversation's 5,000 tokens (the first 4 " \
           "and the last 3,412) · " in footer, footer


def test_a_new_chats_first_message_has_no_earlier_turns_to_blame(tmp_path):
    """A first message whose start the cut did not pin (a long system prompt took the room) is still the message's
    length: there is no earlier turn."""
    live, footer = _live_and_footer(tmp_path, LONG_CHAT, earlier_turns=0)
    assert live.startswith("Generating… · Your message is too long: the conversation is 5,000 tokens"), live
    assert "your message is too long: the model read 3,416" in footer, footer


def test_a_reply_stored_before_the_cause_was_recorded_keeps_its_words():
    stats = {"prompt_kept_first": 30, "prompt_kept_last": 18, "prompt_tokens": 1124, "new_tokens": 3}
    assert metrics_text(stats) == ("conversation cut to fit the context length: the model read 48 of its 1,124 tokens "
                                   "(the first 30 and the last 18) · 3 tokens")


def test_a_system_prompt_longer_than_the_context_is_blamed_not_a_short_first_message(tmp_path):
    """A trial set a 330-token system prompt at n_ctx 256 and sent "Hello, who are you?": the footer said "your message
    is too long: the model read 216 of the conversation's 343 tokens", for a 6-token message. Where a chat's first
    message was not cut (the engine pinned none of it) and the system prompt is the longer of the two, the system
    prompt is named."""
    overflow = PromptOverflow(prompt_tokens=343, n_ctx=256, discarded_tokens=127, head_tokens=108, message_tokens=0,
                              tail_tokens=108, max_n_ctx=8192)  # (the engine's cut of the trial's chat)
    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("t", system_prompt="Rule: always be polite and answer in French. " * 25)
    db.add_message(conversation, "user", "Hello, who are you?")
    recorder = ReplyRecorder(db, db.message(db.add_message(conversation, "assistant", "", state="streaming")))
    recorder.add([overflow])
    assert recorder.snapshot().stats["live"] == (
        "Generating… · Your system prompt is too long: the conversation is 343 tokens, more than the context length "
        "(256), so the model keeps the first 108 tokens and the last 108, and skips 127 in the middle (raise Context "
        "length in the settings to keep them)"
    )
    recorder.add([TextDelta("A", 1, False), STEP, Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=1,
                                                                          prompt_tokens=343))])
    recorder.finish("complete")
    footer = footer_text(db.message(recorder.message_id).stats)
    assert " · your system prompt is too long: the model read 216 of the conversation's 343 tokens (the first 108 " \
           "and the last 108) · " in footer, footer
    assert "your message" not in footer
    # a long message after a short system prompt is still the message's length
    other = db.create_conversation("u", system_prompt="Be brief.")
    db.add_message(other, "user", "word " * 600)
    recorder = ReplyRecorder(db, db.message(db.add_message(other, "assistant", "", state="streaming")))
    recorder.add([overflow])
    assert recorder.snapshot().stats["live"].startswith("Generating… · Your message is too long: ")
    db.close()


def test_the_kept_head_is_named_the_system_prompt_where_it_is_one(tmp_path):
    """The footer said "(the first 25 and the last 3,412)" where those 25 were the system prompt the cut pins (a
    trial read it as the first 25 tokens of the chat's text): where the kept head is the system prompt's length
    (``system_prompt_tokens``, stored with a cut), it is named so, with the message's first tokens kept after it."""
    overflow = PromptOverflow(prompt_tokens=5000, n_ctx=4096, discarded_tokens=1563, head_tokens=25, message_tokens=0,
                              tail_tokens=3412, max_n_ctx=32768)  # fmt: skip
    db = HistoryDB(tmp_path / "h.sqlite3")
    footers = []
    for turns, event in ((3, overflow), (0, LONG_MESSAGE)):
        recorder = _recorder(db, turns)
        recorder.add([event, TextDelta("A", 1, False), STEP,
                      Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=1, prompt_tokens=event.prompt_tokens,
                                               system_prompt_tokens=event.head_tokens))])  # fmt: skip
        recorder.finish("complete")
        footers.append(footer_text(db.message(recorder.message_id).stats))
    assert " · earlier turns no longer fit: the model read 3,437 of the conversation's 5,000 tokens (the system " \
           "prompt's 25 tokens and the last 3,412) · " in footers[0], footers[0]
    assert " · your message is too long: the model read 3,584 of the conversation's 8,778 tokens (the system " \
           "prompt's 24 tokens, your message's first 256 and the last 3,304) · " in footers[1], footers[1]
    db.close()
    # a head that is not the system prompt's length (a reply stored before its length was) keeps its words
    assert metrics_text({"prompt_kept_first": 30, "prompt_kept_last": 18, "prompt_tokens": 1124,
                         "system_prompt_tokens": 25}).endswith("(the first 30 and the last 18)")


def test_a_long_paste_cut_by_the_real_model_names_the_system_prompt(qtbot, make_window):
    window = make_window(FAST.with_values(n_ctx=256, max_new_tokens=4))
    final = send_and_wait(qtbot, window, PASTE)
    footer = window.chat_view.message_widgets()[-1].footer.text()
    # SmolLM2's template writes its own system prompt where the chat has none: 24 tokens with the user turn's start
    assert final.stats["system_prompt_tokens"] == 24, final.stats
    assert " · your message is too long: the model read 252 of the conversation's 616 tokens (the system prompt's " \
           "24 tokens, your message's first 31 and the last 197) · " in footer, footer


def test_a_reply_reading_a_memory_without_all_of_the_system_prompt_says_so():
    """Trial at n_ctx 256 with a 159-token system prompt ("Always kept" auto pins 128): a reply whose prefill rolled
    said "part of the system prompt (159 tokens) dropped"; the same reply regenerated, reading the memory that roll
    left (the first 128 tokens and the last 66, no roll of its own), said only "earlier turns no longer fit: … (the
    first 128 and the last 66)", as if the model still read its whole system prompt."""
    regenerated = {"new_tokens": 60, "prompt_tokens": 322, "prefilled_tokens": 1, "discarded_tokens": 0, "rolls": 0,
                   "prompt_kept_first": 128, "prompt_kept_last": 66, "prompt_kept_message": 0,
                   "system_prompt_tokens": 159, "reply_rolls": 0, "reply_discarded_tokens": 0,
                   "prompt_cut": "earlier_turns"}  # fmt: skip
    assert metrics_text(regenerated) == (
        "earlier turns no longer fit: the model read 194 of the conversation's 322 tokens (the first 128 and the last "
        "66) · part of the system prompt (159 tokens) dropped: a context length of 318 or more keeps it whole · 60 "
        "tokens")
    # the system prompt kept whole (the first 19 tokens are all of it): nothing more to say
    whole = {**regenerated, "prompt_kept_first": 19, "prompt_kept_last": 175, "system_prompt_tokens": 19}
    assert "system prompt" not in metrics_text(whole).split(" · ", 1)[1], metrics_text(whole)
