"""A prompt longer than n_ctx is said in the reply's live footer while it prefills, before any reply text, its numbers
written as the progress line above it writes them ("10,277 tokens", not "10277" beside "2,093": newcomer trial)."""

from app.gui.history_db import HistoryDB
from app.gui.reply_recorder import ReplyRecorder
from inference.events import PromptOverflow, StepStats, TextDelta


def test_the_live_footer_names_the_discarded_prompt_tokens_until_the_reply_starts(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("t")
    message = db.message(db.add_message(conversation, "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message)
    assert recorder.snapshot().stats["live"] == "Generating…"
    recorder.add([PromptOverflow(prompt_tokens=5000, n_ctx=4096, discarded_tokens=2046)])
    live = recorder.snapshot().stats["live"]
    assert live == (
        "Generating… · the conversation is 5,000 tokens, more than the context length (4,096): the model skips 2,046 of "
        "its oldest tokens (raise Context length in the settings to keep them)"
    )
    step = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0, verify_ms=5, step_ms=5, k=0, cache_len=4000, n_ctx=4096, elapsed_s=1.0, generated=2)
    recorder.add([TextDelta("Hi", 1, False), step])
    assert recorder.snapshot().stats["live"].startswith("Generating · 2 tokens")
    db.close()
