"""A reply of one token has no decode speed (a speed needs an interval between two tokens): the window says so as
the command line does (``specchat generate``'s "1 token" with no speed, and its compare's "no speedup to compare")."""

from __future__ import annotations

from conftest import FAST
from gui_helpers import click


def test_a_one_token_compare_says_there_is_no_speedup_to_compare(qtbot, make_window):
    """Compare with Longest reply 1 finished, yet its footer said "Comparison incomplete": plain decoding's one token
    stored 0 tokens/s, so the recorder set no speedup. The footer and its export say why there is none."""
    from app.gui.reply_format import export_footer_text

    window = make_window(FAST.with_values(max_new_tokens=1))
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.set_text("Say hi.")
        click(qtbot, window.composer.compare_button)
    stats = finished.args[0].stats
    compare = stats["compare"]
    assert compare["ar"]["new_tokens"] == compare["spec"]["new_tokens"] == 1 and compare["spec"]["mode"] == "auto"
    assert compare["speedup"] is None and compare["identical"] is True  # greedy, exact precision
    words = "No speedup to compare: plain decoding wrote 1 token and Auto 1 token, and a decode speed needs 2 or more"
    footer = window.chat_view.message_widgets()[-1].footer.text()
    assert footer.startswith(f"{words} · texts identical"), footer  # (a trial: "no speedup … · speed and identity")
    assert "incomplete" not in footer and "speed and identity" not in footer
    assert f"{words}, texts identical" in export_footer_text(stats, "complete")


def test_a_compare_whose_second_run_wrote_one_token_claims_no_speedup(tmp_path):
    """Plain decoding wrote 4 tokens, the second run 1 (its texts differ): the second run's 0 tokens/s made a
    speedup of 0.00×, "Slower than plain decoding (0.00×)". One token has no speed to compare."""
    from app.gui.history_db import HistoryDB
    from app.gui.reply_format import SAMPLED_IDENTICAL, compare_headline, compare_summary, footer_text
    from app.gui.reply_recorder import ReplyRecorder
    from inference.events import Finished, GenerationStats, TextDelta

    def run(mode: str, text: str, ids: list[int], rate: float) -> GenerationStats:
        return GenerationStats(mode=mode, drafter="lookup" if mode == "spec" else None, new_tokens=len(ids),
                               ttft_ms=12.0, decode_tokens_per_s=rate, stop_reason="eos", text=text, token_ids=ids)

    db = HistoryDB(tmp_path / "h.sqlite3")
    message = db.message(db.add_message(db.create_conversation("t"), "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message, compare=True)
    recorder.begin_phase("ar")
    recorder.add([TextDelta("One two", 1, False), Finished(run("ar", "One two", [1, 2, 3, 4], 40.0))])
    recorder.begin_phase("spec", drafter="lookup", k=4)
    recorder.add([TextDelta("One", 1, False), Finished(run("spec", "One", [1], 0.0))])
    stats = recorder.finish("complete").stats
    db.close()
    assert stats["compare"]["speedup"] is None and stats["compare"]["identical"] is False
    words = ("No speedup to compare: plain decoding wrote 4 tokens and speculative decoding (prompt lookup) 1 token, "
             "and a decode speed needs 2 or more")
    assert footer_text(stats, "complete").startswith(f"{words} · texts differ"), footer_text(stats)
    sampled = {**stats["compare"], "sampled": True, "identical": True}
    assert compare_summary(sampled) == f"{words} · {SAMPLED_IDENTICAL}"  # not "· speed only: …"
    assert compare_headline(stats["compare"]) == words.split(",")[0]


def test_a_one_token_reply_shows_no_speed(qtbot, make_window):
    """A reply of Longest reply 1 read "Auto · TTFT 40 ms · 0.0 tokens/s · 1 token": one token has no speed, and the
    command line prints "1 token" without one. Nor do the footer, a Compare column's line, the export, or the
    chat's range of speeds (which read "0-63 tokens/s")."""
    from app.gui.reply_format import export_footer_text, export_run_text
    from app.gui.widgets.live_graph import chat_summary

    window = make_window(FAST.with_values(max_new_tokens=1))
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.chat.send("Say hi.")
    stats = finished.args[0].stats
    assert stats["new_tokens"] == 1 and stats["tokens_per_s"] == 0.0  # (stored as the engine measured it)
    footer = window.chat_view.message_widgets()[-1].footer.text()
    assert footer.startswith("Length limit reached (Continue writes more) · Auto · TTFT ") and " · 1 token · " in footer
    assert "tokens/s" not in footer, footer
    export = export_footer_text(stats, "complete")
    assert "1 token, the first after " in export and "tokens/s" not in export, export
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.set_text("Say hi.")
        click(qtbot, window.composer.compare_button)
    compare = finished.args[0].stats["compare"]
    widget = window.chat_view.message_widgets()[-1]
    for column, run in ((widget.ar_column, compare["ar"]), (widget.spec_column, compare["spec"])):
        assert "1 token" in column.metrics.text() and "tokens/s" not in column.metrics.text(), column.metrics.text()
        assert "tokens/s" not in export_run_text(run)
    many = {"mode": "ar", "tokens_per_s": 63.0, "new_tokens": 24}
    assert chat_summary([stats, many, {**many, "tokens_per_s": 41.0}]) == " This chat: 2 replies, 41-63 tokens/s (median 52)."


def test_the_graph_says_a_one_token_run_wrote_its_token(qtbot, make_window):
    """After a one-token reply the graph's summary read "■ Auto: stopped before its first token", of a reply that
    finished with its token: it took no decode step, and its speed of 0 tokens/s was left out as none. It says
    "1 token", and no speed; a Compare says it of both runs."""
    from app.gui.widgets.live_graph import ONE_TOKEN

    window = make_window(FAST.with_values(max_new_tokens=1))
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.chat.send("Say hi.")
    graph = window.live_graph
    assert graph.summary_text().startswith("■ Auto: 1 token"), graph.summary_text()
    assert "stopped" not in graph.summary_text() and "tokens/s" not in graph.summary_text()
    # the plot area says why nothing is drawn, in place of empty axes (0-10 tokens/s over 0.1-0.4 s, no point)
    assert graph.no_plot.isVisibleTo(graph) and not graph.canvas.isVisibleTo(graph)
    assert graph.no_plot.text() == ONE_TOKEN == "One token: no speed to plot (a speed needs two tokens or more)."
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.composer.set_text("Say hi.")
        click(qtbot, window.composer.compare_button)
    summary = graph.summary_text()
    assert summary.startswith("■ Plain decoding: 1 token · ■ Auto: 1 token"), summary
    assert graph.no_plot.isVisibleTo(graph) and graph.no_plot.text() == ONE_TOKEN
    assert not graph.canvas.isVisibleTo(graph) and not graph.legend.isVisibleTo(graph)
