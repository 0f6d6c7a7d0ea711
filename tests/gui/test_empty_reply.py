"""A reply the model ends at once says so (a trial: a 631-token paste with an instruction at n_ctx 256 got an empty
reply, the model ending right after the cut; the window showed an empty bubble under "Assistant", its footer "… · 0
tokens"), with what the user can do, in the words the command line says it in."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import send_and_wait

#: A paste of ~600 tokens with an instruction: at n_ctx 256 the engine cuts its middle.
PASTE = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined movable "
         "metal type, oil-based ink and a wooden screw press into a system that could produce books far faster than "
         "scribes. ") * 14 + "\n\nSummarize the text above in one sentence."
WORDS = ("The model ended its reply at once (nothing generated): it read only part of a conversation longer than the "
         "context length; raise Context length in the settings, or send a shorter message")


def test_a_reply_the_model_ends_at_once_says_so_and_what_helps(qtbot, make_window, shared_worker, monkeypatch):
    """The real model and the engine's real cut; its first token counted as an end of reply (every token is one
    here), as the trial's model chose to end at once: the reply is stored empty and complete, its chat saved."""
    window = make_window(FAST.with_values(n_ctx=256))
    target = shared_worker._engine.target
    monkeypatch.setitem(target.config, "eos_token_id", list(range(target.config["vocab_size"])))
    final = send_and_wait(qtbot, window, PASTE)
    assert final.content == "" and final.state == "complete" and final.stats["new_tokens"] == 0, final
    assert final.stats["stop_reason"] == "eos" and final.stats["prompt_kept_last"] > 0
    footer = window.chat_view.message_widgets()[-1].footer.text()
    assert footer.startswith(WORDS + " · "), footer
    assert " · your message is too long: the model read " in footer  # (the cut, as before)
    saved = window.db.messages(final.conversation_id)
    assert [(m.role, m.content) for m in saved] == [("user", PASTE), ("assistant", "")]
    assert saved[-1].state == "complete"


def test_an_empty_reply_without_a_cut_says_so_too():
    from app.gui.reply_format import export_footer_text, footer_text

    stats = {"mode": "ar", "ttft_ms": 30.0, "tokens_per_s": 0.0, "new_tokens": 0, "stop_reason": "eos"}
    words = "The model ended its reply at once (nothing generated): Regenerate, or rephrase your message"
    assert footer_text(stats).startswith(words + " · Plain decoding · TTFT 30 ms"), footer_text(stats)
    # the export, without the window's hints: what happened alone
    assert export_footer_text(stats).startswith("The model ended its reply at once (nothing generated) · Plain decoding")
    # not a reply stopped before its first token, nor one the length limit ended
    assert "ended its reply at once" not in footer_text({**stats, "stop_reason": "cancelled"}, "stopped")
    assert "ended its reply at once" not in footer_text({**stats, "new_tokens": 3})
