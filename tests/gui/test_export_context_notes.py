"""A Markdown export's reply line carries the notes the window's footer has about the context: a prompt cut to fit,
earlier tokens the reply's rolls dropped, part of the system prompt dropped (a trial's export said only "Plain decoding
· 3 tokens at … · model …" under a reply whose footer said its message was too long and the system prompt cut)."""

from __future__ import annotations

from app.gui.history_db import HistoryDB
from app.gui.history_transfer import export_markdown
from app.gui.reply_format import cut_text, dropped_text, footer_text, system_prompt_dropped_text
from app.gui.reply_recorder import ReplyRecorder
from inference.events import ContextRolled, Finished, GenerationStats, PromptOverflow, StepStats, TextDelta

STEP = StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0, verify_ms=5, step_ms=5, k=0, cache_len=200, n_ctx=256,
                 elapsed_s=1.0, generated=1)  # fmt: skip


def test_the_export_says_what_the_footer_says_of_the_context(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("t", system_prompt="Rule: answer in French. " * 20)
    db.add_message(conversation, "user", "Summarize this: " + "word " * 600)
    recorder = ReplyRecorder(db, db.message(db.add_message(conversation, "assistant", "", state="streaming")))
    recorder.add([PromptOverflow(prompt_tokens=780, n_ctx=256, discarded_tokens=548, head_tokens=100,
                                 message_tokens=24, tail_tokens=108, max_n_ctx=8192),
                  TextDelta("Un", 1, False), STEP, ContextRolled(discarded_tokens=64, n_keep=100, cache_len=192),
                  TextDelta(" mot", 2, False),
                  Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=2, prompt_tokens=780, ttft_ms=40.0,
                                           decode_tokens_per_s=50.0, system_prompt_tokens=130,
                                           system_prompt_dropped=True))])  # fmt: skip
    recorder.finish("complete")
    stats = db.message(recorder.message_id).stats
    notes = [cut_text(124, 108, 780, "message"), dropped_text(64, 1), system_prompt_dropped_text(130)]
    footer = footer_text(stats)
    assert all(f" · {note} · " in footer for note in notes), footer  # (the window's, as before)
    exported = export_markdown(db, conversation)
    line = next(line for line in exported.splitlines() if line.startswith("*Plain decoding"))
    assert line == f"*Plain decoding · 2 tokens at 50.0 tokens/s, the first after 40 ms · {' · '.join(notes)}*", line
    db.close()
