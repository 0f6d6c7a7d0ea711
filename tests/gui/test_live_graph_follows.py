"""The live graph follows the conversation on screen and fits its time axis to the reply."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import FAST
from PySide6.QtCore import Qt

from app.gui.widgets.live_graph import MIN_X_RANGE_S, PLACEHOLDER, LiveGraph
from inference.events import Finished, GenerationStats, StepStats
from inference.settings import Decoding


def _steps(seconds: float, count: int = 20, drafted: int = 0):
    return [
        StepStats(drafted=drafted, accepted=drafted // 2, emitted=drafted // 2 + 1, draft_ms=0.1, verify_ms=9.0,
                  step_ms=10.0, k=4, cache_len=40 + i, n_ctx=512, elapsed_s=seconds * (i + 1) / count, generated=i + 1)
        for i in range(count)
    ]  # fmt: skip


@pytest.fixture
def graph(qtbot):
    from app.gui.application import create_application

    create_application()
    graph = LiveGraph()
    graph.resize(390, 320)
    qtbot.addWidget(graph)
    graph.show()
    return graph


def _drawn_points(graph: LiveGraph) -> int:
    return sum(len(item.xData if item.xData is not None else []) for item in graph.rate_plot.listDataItems())


def test_a_short_reply_fills_the_time_axis(graph):
    graph.show_conversation(1)
    graph.start_run("ar", conversation_id=1)
    graph.add_events(_steps(1.2))
    graph.refresh()
    start, end = graph.x_range
    assert start == pytest.approx(0.0, abs=1e-6) and 1.2 <= end <= 1.5  # while streaming: the next small step
    graph.finish_run()
    start, end = graph.x_range
    assert 1.2 <= end <= 1.25  # fitted to the reply with a small margin, not a fixed 5 s
    graph.start_run("ar", conversation_id=1)
    graph.add_events(_steps(0.05, count=3))
    graph.finish_run()
    assert graph.x_range[1] == pytest.approx(MIN_X_RANGE_S)  # a very short reply: the shortest axis


def test_the_graph_shows_the_last_reply_of_the_conversation_on_screen(graph):
    graph.show_conversation(1)
    graph.start_run("spec", conversation_id=1)
    graph.add_events(_steps(2.0, drafted=4))
    graph.finish_run()
    assert [s.key for s in graph.series] == ["spec"] and _drawn_points(graph) == 19
    graph.show_conversation(2, [{"mode": "ar", "ttft_ms": 20.0, "tokens_per_s": 118.2, "new_tokens": 17}])
    assert graph.series == [] and _drawn_points(graph) == 0
    assert graph.summary.text().startswith("Last reply: TTFT 20 ms · 118.2 tokens/s")
    assert "This chat" not in graph.summary.text()  # one reply: nothing more to say
    earlier = [{"mode": "ar", "tokens_per_s": rate} for rate in (41.0, 63.0, 58.0)]
    compared = {"compare": {"ar": {"tokens_per_s": 40.0}, "spec": {"mode": "spec", "tokens_per_s": 55.0}, "speedup": 1.4}}
    graph.show_conversation(4, [*earlier, {"mode": "user"}, compared])  # the chat's replies, not only the last
    assert "This chat: 4 replies, 41-63 tokens/s (median 56)." in graph.summary.text()
    # a reply streaming in conversation 2 while conversation 3 is shown is not drawn there
    graph.start_run("ar", conversation_id=2)
    graph.show_conversation(3)
    graph.add_events(_steps(1.0))
    graph.refresh()
    assert graph.series == [] and _drawn_points(graph) == 0 and graph.summary.text() == PLACEHOLDER
    graph.finish_run()
    graph.show_conversation(1)  # back: conversation 1's reply is drawn again, axis fitted to it
    assert [s.key for s in graph.series] == ["spec"] and _drawn_points(graph) == 19
    assert 2.0 <= graph.x_range[1] <= 2.1 and "drafts: 50% accepted" in graph.summary_text()
    graph.show_conversation(2)
    assert [s.key for s in graph.series] == ["ar"] and graph.series[0].steps


def test_the_window_graph_follows_the_conversation_shown(make_window):
    window = make_window(start=False)
    db = window.db
    older = db.create_conversation("older")
    db.add_message(older, "user", "Hi")
    db.add_message(older, "assistant", "Hello!", stats={"mode": "ar", "ttft_ms": 30.0, "tokens_per_s": 99.5})
    newer = db.create_conversation("newer")
    window.conversations.refresh()
    window.conversations.open(newer)
    window.live_graph.start_run("ar", conversation_id=newer)
    window.live_graph.add_events(_steps(1.0))
    window.live_graph.finish_run()
    assert window.live_graph.series
    window.conversations.open(older)
    assert window.live_graph.series == [] and "99.5 tokens/s" in window.live_graph.summary.text()
    window.conversations.open(newer)
    assert [s.key for s in window.live_graph.series] == ["ar"]


def test_the_plots_take_a_new_size_once_a_resize_has_settled(graph, qtbot):
    from app.gui.widgets.live_graph import RESIZE_SETTLE_MS

    qtbot.waitUntil(lambda: graph.canvas.size() == graph.canvas_frame.size())
    before = graph.canvas.size()
    for width in (420, 450, 480):  # a drag of the window's edge: the plots are not laid out again on each step
        graph.resize(width, 320)
        qtbot.wait(RESIZE_SETTLE_MS // 5)
        assert graph.canvas.size() == before and graph.canvas_frame.width() > before.width()
    qtbot.waitUntil(lambda: graph.canvas.size() == graph.canvas_frame.size(), timeout=RESIZE_SETTLE_MS * 10)
    assert graph.canvas.width() > before.width()


def test_a_reply_of_unknown_context_draws_no_context_fill(graph):
    graph.show_conversation(1)
    graph.start_run("ar", conversation_id=1)
    graph.add_events([replace(step, cache_len=0, n_ctx=0) for step in _steps(1.0)])  # as a remote server's reply
    graph.refresh()
    assert graph.series[0].fill == [] and len(graph.series[0].rate) > 10
    assert "tokens/s" in graph.summary_text() and "context" not in graph.summary_text()


def test_a_finished_reply_shows_the_rate_its_footer_shows(graph):
    """While streaming the headline shows the last half second's tokens/s; once the reply has finished, its whole
    decode rate, the number under the reply (not a second figure for the same reply)."""
    graph.show_conversation(1)
    graph.start_run("ar", conversation_id=1)
    graph.add_events(_steps(1.0))
    graph.refresh()
    live = graph.series[0].rate[-1][1]
    assert f"{live:.1f} tokens/s" in graph.summary_text() and abs(live - 47.2) > 1
    graph.add_events([Finished(GenerationStats(mode="ar", new_tokens=20, decode_tokens_per_s=47.2))])
    graph.finish_run()
    assert "Plain decoding: 47.2 tokens/s" in graph.summary_text()


def test_a_reply_stopped_before_its_first_token_is_not_the_last_measured_one(graph):
    """A newcomer saw "Last reply: TTFT 0 ms · 0.0 tokens/s … · 0 tokens" under a chat whose last reply was stopped
    while its prompt was read: such a reply measured nothing, so the summary speaks of the last one that did."""
    measured = {"mode": "ar", "ttft_ms": 20.0, "tokens_per_s": 118.2, "new_tokens": 17}
    stopped = {"mode": "auto", "ttft_ms": 0.0, "tokens_per_s": 0.0, "new_tokens": 0, "stop_reason": "cancelled"}
    graph.show_conversation(5, [measured, {"mode": "ar", "tokens_per_s": 60.0, "new_tokens": 30}, stopped])
    summary = graph.summary.text()
    assert summary.startswith("Last reply: 60.0 tokens/s · 30 tokens.") and "TTFT 0 ms" not in summary
    assert "This chat: 2 replies, 60-118 tokens/s" in summary  # the stopped one counts in neither


def test_the_runs_of_another_version_of_the_reply_are_not_drawn(graph):
    """After a version switch the graph speaks of the reply shown: a newcomer trial read 14.6 tokens/s in the graph
    beside a reply whose footer said 15.5, the runs drawn being those of the version switched away from."""
    graph.show_conversation(1)
    graph.start_run("spec", conversation_id=1, reply_id=12)
    graph.add_events(_steps(2.0, drafted=4))
    graph.finish_run()
    earlier = {"mode": "ar", "ttft_ms": 45.0, "tokens_per_s": 15.5, "new_tokens": 200}
    graph.show_conversation(1, [earlier], reply_id=11)  # version 1 of the reply shown: its stored numbers
    assert graph.series == [] and _drawn_points(graph) == 0
    assert graph.summary.text().startswith("Last reply: TTFT 45 ms · 15.5 tokens/s · 200 tokens.")
    graph.show_conversation(1, [{"mode": "spec", "tokens_per_s": 20.0, "new_tokens": 20}], reply_id=12)  # back
    assert [s.key for s in graph.series] == ["spec"] and _drawn_points(graph) == 19
    assert "drafts: 50% accepted" in graph.summary_text()


def test_the_rate_counts_the_first_step_after_the_prompt_as_the_footer_does():
    """The first token comes with the prompt's last pass; the first decode step after a long prompt also hands the
    fast prefill's states over (here 1 s): the curve shows that step, and its tokens over its time are the footer's
    rate (``GenerationStats.decode_tokens_per_s``: tokens after the first over the time since it), not the faster
    rate of the steps after it alone."""
    from app.gui.widgets.live_series import Series
    from inference.events import PromptProgress

    series = Series("ar", "Plain")
    prompt_end = 2.0
    series.add(PromptProgress(done=6000, total=6000, prompt_tokens=6000, elapsed_s=prompt_end))
    steps = [replace(step, elapsed_s=prompt_end + 1.0 + step.elapsed_s, generated=step.generated + 1)
             for step in _steps(2.0, count=40)]  # 1 s for the first step, then 40 steps in 2 s
    for step in steps:
        series.add(step)
    assert series.rate[0] == (steps[0].elapsed_s, pytest.approx(1 / (steps[0].elapsed_s - prompt_end)))
    footer_rate = (steps[-1].generated - 1) / (steps[-1].elapsed_s - prompt_end)
    mean_rate = (series.steps[-1][1] - series.steps[0][1]) / (series.steps[-1][0] - series.steps[0][0])
    assert mean_rate == pytest.approx(footer_rate)
    assert series.steps[0] == (prompt_end, 1)


def test_the_legend_names_the_speculative_colour_after_the_run_drawn_in_it(graph):
    """Auto (the default) and a fixed speculative decoding draw in one colour: the legend says which is drawn (a
    newcomer's Compare of plain against "Speculative, draft model" showed a legend saying Auto)."""
    assert graph.legend_names() == {} and not graph.legend.isVisible()  # nothing drawn: no legend
    graph.show_conversation(1)
    graph.start_run("ar", conversation_id=1)
    graph.add_events(_steps(1.0))
    graph.start_run("spec", keep_previous=True, conversation_id=1)
    graph.add_events(_steps(1.0, drafted=2))
    graph.finish_run()
    graph.refresh()
    assert graph.legend_names()["spec"] == "Speculative"
    graph.resize(700, 320)  # a wide side panel (1920 px window): the name whole
    graph.layout().activate()
    assert "Speculative" in graph.legend.text() and graph.legend.width() >= graph.legend.sizeHint().width()
    graph.resize(390, 320)  # the side panel of a 1366-1440 px window: shortened, the legend whole (it was cut)
    graph.layout().activate()
    assert "Spec." in graph.legend.text() and graph.legend.width() >= graph.legend.sizeHint().width()
    graph.start_run("auto", conversation_id=1)
    graph.add_events(_steps(1.0, drafted=2))
    graph.finish_run()
    graph.refresh()
    assert graph.legend_names() == {"spec": "Auto"} and "Speculative" not in graph.legend.text()


def test_no_legend_is_shown_while_nothing_is_drawn(make_window):
    """Newcomer trials: with "Speculative, prompt lookup" chosen, the legend said "Plain — Auto ┆ full" while no reply
    ran and after a reply stopped before its first token; later, under Auto, "Plain — Speculative" over empty axes.
    While nothing is drawn there is no legend, whatever the decoding chosen ("full" is said by the summary: see
    test_context_full_words)."""
    window = make_window(FAST.with_values(decoding=Decoding.PROMPT_LOOKUP), start=False)
    graph, pane = window.live_graph, window.settings_pane
    assert graph.legend_names() == {} and not graph.legend.isVisible()
    graph.start_run("spec", conversation_id=None)  # (no conversation on screen yet)
    assert graph.legend_names() == {"spec": "Speculative"} and "full" not in graph.legend.text()
    graph.stopped_early(None)
    assert graph.legend_names() == {} and not graph.legend.isVisible()
    for decoding in (Decoding.AUTO, Decoding.AUTOREGRESSIVE):
        pane.decoding.setCurrentIndex(pane.decoding.findData(decoding.value))
        assert graph.legend_names() == {} and not graph.legend.isVisible()


def test_a_reply_with_no_points_shows_a_note_in_place_of_empty_axes(graph, qtbot):
    """Newcomer trial: after a restart, on every chat and after switching back to an older version of a message, the
    plot showed empty axes (0-10 tokens/s, 0.1-0.4 s) and the legend "Plain — Speculative" under "Last reply: TTFT
    22 ms · 18.8 tokens/s … 290 tokens". Where nothing is drawn a centred note says why, without axes or legend;
    the plot comes back when a reply starts, its legend naming the runs drawn (Auto, the default: not
    "Speculative")."""
    assert not graph.canvas.isVisible() and not graph.legend.isVisible()  # nothing sent yet

    from app.gui.widgets.live_graph import NO_PLOT, NO_PLOT_YET

    def plotted() -> bool:
        return graph.canvas.isVisible() and graph.legend.isVisible() and not graph.no_plot.isVisible()

    assert graph.no_plot.isVisible() and graph.no_plot.text() == NO_PLOT_YET
    earlier = {"mode": "auto", "ttft_ms": 22.0, "tokens_per_s": 18.8, "new_tokens": 290}
    graph.show_conversation(1, [earlier], reply_id=11)  # a reply of an earlier session: its numbers only
    assert graph.summary.text().startswith("Last reply: TTFT 22 ms · 18.8 tokens/s")
    assert not graph.canvas.isVisible() and not graph.legend.isVisible()
    assert graph.no_plot.isVisible() and graph.no_plot.text() == NO_PLOT
    assert graph.no_plot.alignment() == Qt.AlignmentFlag.AlignCenter
    qtbot.waitUntil(lambda: graph.no_plot.geometry() == graph.canvas_frame.rect(), timeout=3000)  # the plot's area

    graph.start_run("auto", conversation_id=1, reply_id=12)  # Regenerate: the plot comes back as it starts
    assert plotted()
    graph.add_events(_steps(1.0, drafted=2))
    graph.finish_run()
    assert plotted() and graph.legend_names() == {"spec": "Auto"} and "Speculative" not in graph.legend.text()
    graph.show_conversation(1, [earlier], reply_id=11)  # back to the older version
    assert not plotted() and graph.no_plot.text() == NO_PLOT
    graph.show_conversation(1, [earlier, {"mode": "auto", "tokens_per_s": 20.0, "new_tokens": 20}], reply_id=12)
    assert plotted() and _drawn_points(graph) == 19
    graph.show_conversation(2)  # a new chat
    assert not plotted() and graph.no_plot.text() == NO_PLOT_YET
