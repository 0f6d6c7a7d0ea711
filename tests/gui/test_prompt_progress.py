"""A long paste shows how far its prompt has been read (issue 35, item 2): a bar in the reply's bubble with "Reading
your message: 1,024 of 2,989 tokens · 3.1 s so far, about 20 s left", and Stop ends the reading with the message
saved."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import FAST
from gui_helpers import click

from app.gui.history_db import HistoryDB
from app.gui.reply_format import STOPPED_BEFORE_FIRST_TOKEN, footer_text, reading_text
from app.gui.reply_recorder import ReplyRecorder
from inference.events import PromptOverflow, PromptProgress, StepStats, TextDelta

GENESIS = Path(__file__).resolve().parents[2] / "bench" / "data" / "kjv_genesis.txt"
WORDS = re.compile(r"Reading your message: ([\d,]+) of ([\d,]+) tokens( \(\+[\d,]+ in memory already\))? · .+ so far(, about .+ left)?$")


def test_the_bar_follows_the_prompt_read_and_stop_ends_it(qtbot, make_window):
    window = make_window(FAST.with_values(n_ctx=4096))
    text = GENESIS.read_text(encoding="utf-8")[:30_000]  # ~7,500 tokens: ~3,000 kept after the cut, many passes
    seen = []  # (done, total, words, bar value, bar maximum) as the bubble showed them

    def look(reply, _text):
        widget = window.chat_view.widget(reply.id)
        if widget is not None:
            widget.flush()  # (a live bubble re-renders at most every 60 ms: see it as it will be drawn)
        if widget is not None and widget.prompt_progress is not None and widget.prompt_progress.isVisibleTo(widget):
            view = widget.prompt_progress
            prefill = reply.stats["prefill"]
            seen.append((prefill["done"], prefill["total"], view.words.text(), view.bar.value(), view.bar.maximum()))

    window.replies.updated.connect(look)
    with qtbot.waitSignal(window.generation_finished, timeout=180_000) as finished:
        window.composer.set_text(text)
        window.composer.submit()
        qtbot.waitUntil(lambda: len([s for s in seen if s[0] > 0]) >= 2, timeout=120_000)  # two passes read
        click(qtbot, window.composer.stop_button)
    final = finished.args[0]
    done, total, words, value, maximum = seen[-1]
    assert 0 < done < total < 4096 and (value, maximum) == (done, total)
    match = WORDS.match(words)
    assert match and match.group(1) == f"{done:,}" and match.group(2) == f"{total:,}" and match.group(4), words
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)  # it only moves forward
    assert seen[0][0] == 0 and "left" not in seen[0][2]  # shown before the first pass ends, without a guess
    # Stopped while reading: no text, the bar gone, the message and the stopped reply saved
    assert final.state == "stopped" and final.content == "" and final.stats["stop_reason"] == "cancelled"
    widget = window.chat_view.widget(final.id)
    assert not widget.prompt_progress.isVisibleTo(widget)
    assert "prefill" not in window.db.message(final.id).stats
    messages = window.db.messages(final.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"] and messages[0].content == text


def test_reading_words():
    progress = {"done": 12288, "total": 39935, "elapsed_s": 62.4, "remaining_s": 134.0}
    assert reading_text(progress) == "Reading your message: 12,288 of 39,935 tokens · 1 min 2 s so far, about 2 min 14 s left"
    assert reading_text({**progress, "done": 0, "remaining_s": None, "elapsed_s": 0.004}) == (
        "Reading your message: 0 of 39,935 tokens · 4 ms so far"
    )
    assert reading_text({**progress, "done": 39935, "remaining_s": 0.0}).endswith("tokens · 1 min 2 s so far")
    assert reading_text({"done": "many"}) == ""  # not a progress: nothing to say (the view hides)


def test_the_recorder_hands_the_reading_on_until_the_first_token_and_never_saves_it(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    message = db.message(db.add_message(db.create_conversation("t"), "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message, save_interval_s=0)
    recorder.add([PromptOverflow(prompt_tokens=5000, n_ctx=4096, discarded_tokens=2046, head_tokens=4, message_tokens=0,
                                 tail_tokens=2950),
                  PromptProgress(done=1024, total=2954, prompt_tokens=5000, elapsed_s=3.1, remaining_s=20.0)])  # fmt: skip
    stats = recorder.snapshot().stats
    assert stats["prefill"] == {"done": 1024, "total": 2954, "elapsed_s": 3.1, "remaining_s": 20.0}
    assert stats["live"].startswith("Earlier turns no longer fit: the conversation is 5,000 tokens, more than the "
                                    "context length (4,096)")
    recorder.save()
    assert "prefill" not in db.message(message.id).stats
    recorder.add([TextDelta("Hi", 1, False)])
    assert "prefill" not in recorder.snapshot().stats
    db.close()


def test_the_live_rate_counts_from_the_first_step_not_from_the_prompts_reading(tmp_path):
    """Newcomer trial: after a 100 KB paste read for 40 s the footer said "20 tokens · 0.5 tokens/s" beside a graph at
    5.4: the rate is the decode rate since the first step, as the finished reply's footer counts it."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    message = db.message(db.add_message(db.create_conversation("t"), "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message)

    def step(generated: int, elapsed_s: float) -> StepStats:
        return StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=100.0, step_ms=100.0, k=0,
                         cache_len=4000 + generated, n_ctx=4096, elapsed_s=elapsed_s, generated=generated)

    recorder.add([TextDelta("A", 1, False), step(1, 40.0)])
    assert recorder.live_text() == "Generating · 1 token"  # (one step: no rate yet)
    recorder.add([TextDelta(" reply", 2, False), step(20, 43.5)])
    assert recorder.live_text() == "Generating · 20 tokens · 5.4 tokens/s"  # 19 tokens in 3.5 s
    db.close()


def test_a_reply_the_window_closed_on_while_its_prompt_was_read_is_stopped_before_its_first_token(tmp_path):
    """Review: quitting during the prompt's reading left an empty "Interrupted" reply whose Continue wrote a fresh one
    as "Continued once"; it is stored as Stop during the prompt leaves it."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    message = db.message(db.add_message(db.create_conversation("t"), "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message)
    recorder.add([PromptProgress(done=1024, total=2954, prompt_tokens=2954, elapsed_s=3.1, remaining_s=20.0)])
    recorder.finish_before_first_token()
    saved = db.message(message.id)
    assert (saved.state, saved.content, saved.stats["new_tokens"]) == ("stopped", "", 0)
    assert footer_text(saved.stats, saved.state) == STOPPED_BEFORE_FIRST_TOKEN
    db.close()
