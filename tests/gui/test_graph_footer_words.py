"""The live graph's summary says a reply's numbers in its footer's words: a newcomer read "acceptance rate 48%" in
the graph and "drafts: 48% accepted" under the reply as two different facts."""

from __future__ import annotations

from app.gui.reply_format import metrics_text
from inference.events import StepStats


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
