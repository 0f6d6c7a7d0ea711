"""The live graph's summary after a reply stopped before its first token: it says so, never an earlier reply's
numbers (newcomer trial: "Last reply: 60.0 tokens/s" stayed under a chat whose last reply was stopped while its
prompt was read, and the previous reply's curves stayed drawn after a Stop pressed while the model was loading)."""

from __future__ import annotations

from app.gui.widgets.live_graph import STOPPED_EARLY
from inference.events import ContextRolled, StepStats

MEASURED = {"mode": "ar", "ttft_ms": 20.0, "tokens_per_s": 60.0, "new_tokens": 30}
STOPPED = {"mode": "auto", "ttft_ms": 0.0, "tokens_per_s": 0.0, "new_tokens": 0, "stop_reason": "cancelled"}


def _steps(count: int = 10):
    return [StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=9.0, step_ms=10.0, k=0,
                      cache_len=40 + i, n_ctx=512, elapsed_s=0.1 * (i + 1), generated=i + 1)
            for i in range(count)]  # fmt: skip


def test_a_stored_chat_whose_last_reply_was_stopped_early_shows_no_earlier_numbers(make_window):
    window = make_window(start=False)
    window.resize(1366, 768)  # (a narrower graph keeps the chat's range to the summary's tooltip)
    db, graph = window.db, window.live_graph
    chat = db.create_conversation("stopped")
    db.add_message(chat, "user", "Hi")
    db.add_message(chat, "assistant", "Hello!", stats=MEASURED)
    db.add_message(chat, "user", "A long paste…")
    db.add_message(chat, "assistant", "", state="stopped", stats=STOPPED)
    window.conversations.refresh()
    window.conversations.open(chat)
    assert graph.summary.text() == STOPPED_EARLY  # not "Last reply: TTFT 20 ms · 60.0 tokens/s …"
    db.add_message(chat, "user", "Again")
    db.add_message(chat, "assistant", "Sure.", stats={**MEASURED, "tokens_per_s": 70.0})
    window.conversations.new()
    window.conversations.open(chat)  # a measured reply after it: that one is the last reply, and the chat's range
    assert graph.summary.text().startswith("Last reply: TTFT 20 ms · 70.0 tokens/s")
    assert "This chat: 2 replies, 60-70 tokens/s" in graph.summary.text()


def test_a_live_reply_stopped_before_its_first_token_replaces_the_previous_replys_curves(make_window):
    window = make_window(start=False)
    db, graph = window.db, window.live_graph
    chat = db.create_conversation("live")
    db.add_message(chat, "user", "Hi")
    window.conversations.refresh()
    window.conversations.open(chat)
    graph.start_run("ar", conversation_id=chat)  # a reply of this session, drawn
    graph.add_events(_steps())
    graph.finish_run()
    assert graph.series and "tokens/s" in graph.summary_text()
    db.add_message(chat, "user", "Next")
    # the next reply is stopped while the model loads, before any run began: the graph must not keep the last one's
    stopped = db.add_message(chat, "assistant", "", state="stopped", stats={"model": "x"})
    window.replies.finished.emit(db.message(stopped))
    assert graph.series == [] and graph.summary.text() == STOPPED_EARLY
    window.conversations.new()
    window.conversations.open(chat)  # shown again: still no old numbers, no old curves
    assert graph.series == [] and graph.summary.text() == STOPPED_EARLY


def _graph_after_a_plain_run(make_window):
    """The live graph of a window showing conversation 7, one plain run of ``_steps()`` finished in it."""
    graph = make_window(start=False).live_graph
    graph.show_conversation(7)
    graph.start_run("ar", conversation_id=7)
    graph.add_events(_steps())
    graph.finish_run()
    return graph


def test_a_run_that_ended_with_no_step_says_it_was_stopped(make_window):
    """A Continue or a comparison's second run stopped during its prefill: its name is not followed by "…" (as
    if still waiting) once it has ended."""
    graph = _graph_after_a_plain_run(make_window)
    graph.start_run("spec", keep_previous=True, conversation_id=7)
    graph.refresh()
    assert "■ Speculative: …" in graph.summary_text()  # while it runs: waiting for its first token
    graph.finish_run()
    assert "■ Speculative: stopped before its first token" in graph.summary_text() and "…" not in graph.summary_text()


def test_a_run_stopped_while_its_prompt_rolled_the_context_says_no_context_full(make_window):
    """Newcomer trial: after Stop during a long prompt (a Continue), the summary kept "■ Auto: … · context full …",
    words of a run that never started decoding."""
    graph = _graph_after_a_plain_run(make_window)
    graph.start_run("auto", keep_previous=True, conversation_id=7)
    graph.add_events([ContextRolled(discarded_tokens=400, n_keep=4, cache_len=108)])  # the long prompt, cut
    graph.finish_run()
    summary = graph.summary_text()
    assert "■ Auto: stopped before its first token" in summary and "context full" not in summary, summary


def test_a_compare_stopped_during_its_plain_run_keeps_that_runs_curve(make_window):
    """A Compare stopped after its plain run wrote tokens, before Auto ran, measured that run: its curve stays and no
    "stopped before its first token" is said (newcomer trial: the message's text, the second run's, was empty)."""
    window = make_window(start=False)
    db, graph = window.db, window.live_graph
    chat = db.create_conversation("compare")
    db.add_message(chat, "user", "Write a long essay about mountains.")
    window.conversations.refresh()
    window.conversations.open(chat)
    graph.start_run("ar", conversation_id=chat)
    graph.add_events(_steps())
    graph.finish_run()
    plain = {**MEASURED, "new_tokens": 10, "text": "The majestic peaks"}
    stats = {"compare": {"ar": plain, "speedup": None, "identical": None, "stopped": True}}
    stopped = db.add_message(chat, "assistant", "", state="stopped", stats=stats)
    window.replies.finished.emit(db.message(stopped))
    assert [s.key for s in graph.series] == ["ar"] and graph.summary.text() != STOPPED_EARLY
    assert "tokens/s" in graph.summary_text()
    nothing = db.add_message(chat, "assistant", "", state="stopped", stats={"compare": {"stopped": True}})
    window.replies.finished.emit(db.message(nothing))  # stopped during the plain run's prefill: nothing measured
    assert graph.series == [] and graph.summary.text() == STOPPED_EARLY
