"""The tokens a long prompt keeps add up the same in the context-length note and in the reading progress (newcomer
trial: "the conversation is 9,504 tokens … skips 6,138" leaves 3,366, while the bar read "of 3,362 tokens": the
first 4 tokens kept were in the model's memory from the earlier reply, and the bar counts only those it reads)."""

from __future__ import annotations

from app.gui.history_db import HistoryDB
from app.gui.reply_format import reading_text
from app.gui.reply_recorder import ReplyRecorder
from inference.events import PromptOverflow, PromptProgress


def _recorder(tmp_path) -> tuple[HistoryDB, ReplyRecorder]:
    db = HistoryDB(tmp_path / "h.sqlite3")
    message = db.message(db.add_message(db.create_conversation("t"), "assistant", "", state="streaming"))
    return db, ReplyRecorder(db, message, save_interval_s=0)


def test_the_reading_says_the_kept_tokens_already_in_memory(tmp_path):
    db, recorder = _recorder(tmp_path)
    recorder.add([PromptOverflow(prompt_tokens=9504, n_ctx=4096, discarded_tokens=6138, head_tokens=4, message_tokens=0,
                                 tail_tokens=3362),
                  PromptProgress(done=1024, total=3362, prompt_tokens=9504, elapsed_s=3.1, remaining_s=20.0)])  # fmt: skip
    stats = recorder.snapshot().stats
    assert "9,504 tokens" in stats["live"] and "skips 6,138" in stats["live"]  # 3,366 kept
    assert stats["prefill"]["in_memory"] == 4
    words = reading_text(stats["prefill"])
    assert words.startswith("Reading your message: 1,024 of 3,362 tokens (+4 in memory already) · 3.1 s so far")
    recorder.save()
    assert "prefill" not in db.message(recorder.message_id).stats  # (never saved)
    db.close()


def test_nothing_is_added_where_every_kept_token_is_read(tmp_path):
    db, recorder = _recorder(tmp_path)
    recorder.add([PromptOverflow(prompt_tokens=5000, n_ctx=4096, discarded_tokens=2046, head_tokens=4, message_tokens=0,
                                 tail_tokens=2950),
                  PromptProgress(done=0, total=2954, prompt_tokens=5000, elapsed_s=0.2)])  # fmt: skip
    assert "in_memory" not in recorder.snapshot().stats["prefill"]
    assert reading_text(recorder.snapshot().stats["prefill"]) == "Reading your message: 0 of 2,954 tokens · 200 ms so far"
    db.close()
    db, recorder = _recorder(tmp_path / "rolled")  # a prompt rolled through: it reads more than it keeps
    recorder.add([PromptOverflow(prompt_tokens=5000, n_ctx=4096, discarded_tokens=2046, head_tokens=4, message_tokens=0,
                                 tail_tokens=2950),
                  PromptProgress(done=0, total=5000, prompt_tokens=5000, elapsed_s=0.2)])  # fmt: skip
    assert "in_memory" not in recorder.snapshot().stats["prefill"]
    db.close()
