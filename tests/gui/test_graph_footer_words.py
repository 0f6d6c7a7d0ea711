"""The live graph's summary says a reply's numbers in its footer's words: a newcomer read "acceptance rate 48%" in
the graph and "drafts: 48% accepted" under the reply as two different facts; and it said "context full 3 times:
earlier tokens dropped" where the footer said how many ("context full 3 times: 1,536 earlier tokens dropped")."""

from __future__ import annotations

from app.gui.reply_format import metrics_text
from inference.events import ContextRolled, StepStats


def _step(i: int, drafted: int = 0, accepted: int = 0, drafter: str = "", cache_len: int = 40) -> StepStats:
    return StepStats(drafted=drafted, accepted=accepted, emitted=accepted + 1, draft_ms=0.1, verify_ms=9.0,
                     step_ms=10.0, k=drafted, cache_len=cache_len + i, n_ctx=64, elapsed_s=0.1 * (i + 1),
                     generated=i + 1, drafter=drafter)  # fmt: skip


def _graph(qtbot):
    from app.gui.application import create_application
    from app.gui.widgets.live_graph import LiveGraph

    create_application()
    graph = LiveGraph()
    qtbot.addWidget(graph)
    graph.show_conversation(1)
    return graph


def test_the_graph_says_the_acceptance_in_the_footers_words(qtbot):
    graph = _graph(qtbot)
    graph.start_run("spec", conversation_id=1)
    graph.add_events([_step(i, drafted=7, accepted=2, drafter="lookup") for i in range(5)])  # 10 of 35: 29%
    graph.finish_run()
    footer = metrics_text({"acceptance_rate": round(10 / 35, 4), "drafters": {"lookup": {"steps": 5, "drafted": 35}}})
    assert footer == "drafts: 29% accepted"
    summary = graph.summary_text()
    assert "drafts: 29% accepted" in summary and "acceptance rate" not in summary, summary


def test_the_graph_says_all_drafts_where_several_drafters_drafted_as_the_footer_does(qtbot):
    graph = _graph(qtbot)
    graph.start_run("auto", conversation_id=1)
    graph.add_events([_step(0, drafted=4, accepted=2, drafter="head"), _step(1, drafted=4, accepted=0, drafter="lookup"),
                      _step(2, drafted=4, accepted=2, drafter="head")])  # fmt: skip
    graph.finish_run()
    drafters = {"head": {"steps": 2, "drafted": 8, "accepted": 4}, "lookup": {"steps": 1, "drafted": 4, "accepted": 0}}
    assert metrics_text({"acceptance_rate": round(4 / 12, 4), "drafters": drafters}) == "all drafts: 33% accepted"
    assert "all drafts: 33% accepted" in graph.summary_text(), graph.summary_text()


def test_the_accepted_drafts_wrap_as_one_group(qtbot):
    """As "acceptance rate 29%" did: the summary's two lines never break "29%" from its words."""
    graph = _graph(qtbot)
    graph.start_run("spec", conversation_id=1)
    graph.add_events([_step(i, drafted=7, accepted=2, drafter="lookup") for i in range(5)])
    graph.finish_run()
    assert "drafts:&nbsp;29%&nbsp;accepted" in graph.summary_html()


def test_the_graph_says_how_many_tokens_the_context_dropped_as_the_footer_does(qtbot):
    graph = _graph(qtbot)
    graph.start_run("ar", conversation_id=1)
    rolled = ContextRolled(discarded_tokens=24, n_keep=4, cache_len=39)
    graph.add_events([_step(0, cache_len=62), _step(1, cache_len=62), rolled, _step(2, cache_len=38), rolled,
                      _step(3, cache_len=38), rolled])  # fmt: skip
    graph.finish_run()
    footer = metrics_text({"discarded_tokens": 72, "rolls": 3})
    assert footer == "context full 3 times: 72 earlier tokens dropped"
    assert graph.summary_text().endswith(" · context full 3 times: 72 earlier tokens dropped"), graph.summary_text()


def test_rolls_while_the_prompt_was_read_are_not_the_replys_as_in_the_footer(qtbot):
    """A prompt longer than the context rolled while it was read: the footer says it was cut, and "context full" only
    for the reply's own rolls (``ReplyRecorder``); the graph counts those alone too (it said "context full 3 times"
    beside a footer's "context full: 24 earlier tokens dropped once")."""
    graph = _graph(qtbot)
    graph.start_run("ar", conversation_id=1)
    prefill = ContextRolled(discarded_tokens=40, n_keep=4, cache_len=24)
    graph.add_events([prefill, prefill, _step(0, cache_len=62), ContextRolled(24, 4, 39), _step(1, cache_len=39)])
    graph.finish_run()
    assert graph.summary_text().endswith(" · context full: 24 earlier tokens dropped once"), graph.summary_text()
    assert len(graph.series[-1].rolls) == 3  # (each still marked by a dashed line)
