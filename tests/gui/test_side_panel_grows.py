"""The side panel grows with the window (newcomer trial): grown from 1440x900, or restored from a layout saved at
1366x768, to 1920x1080, the live graph kept its 104-211 px plot while 180-290 px stood empty under the settings, and
the restored panel stayed 410 px wide with "Auto (fastest measured: draf…" cut."""

from __future__ import annotations

from conftest import FAST

from app.gui.side_panel_width import PANEL_PX


def plot_height(window) -> int:
    """The shown plot's height in pixels between its axes, as laid out in the window's graph canvas."""
    graph = window.live_graph
    plot = graph.plots[graph.shown_plot]
    return graph.canvas.mapFromScene(plot.vb.sceneBoundingRect()).boundingRect().height()


def settled(qtbot, window, size: tuple[int, int]) -> int:
    """Resize ``window`` to ``size``, wait for the graph's canvas to fill its frame again; its plot height (a run is
    drawn first where none is: the plot is shown only then, and only for a run with points)."""
    from inference.events import StepStats

    graph = window.live_graph
    if not graph.series:
        graph.start_run("auto", conversation_id=None)  # (no conversation on screen)
        graph.add_events([StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=9.0, step_ms=10.0, k=0,
                                    cache_len=40, n_ctx=512, elapsed_s=0.1, generated=2)])  # fmt: skip
        graph.finish_run()
    window.resize(*size)
    qtbot.waitUntil(lambda: window.size().toTuple() == size, timeout=3000)
    qtbot.wait(50)
    qtbot.waitUntil(lambda: graph.canvas.size() == graph.canvas_frame.size() and graph.canvas.height() > 0, timeout=3000)
    return plot_height(window)


def empty_under_settings(window) -> int:
    """Pixels of the settings pane's viewport below its content (0 when the content fills it or scrolls)."""
    pane = window.settings_pane
    return max(0, pane.viewport().height() - pane.widget().sizeHint().height())


def test_the_graph_takes_the_height_a_taller_window_gives(qtbot, make_window):
    window = make_window(FAST.with_values(decoding="auto"), start=False)
    small = settled(qtbot, window, (1440, 900))
    large = settled(qtbot, window, (1920, 1080))
    assert large >= small + 150, (small, large)  # (the window is 180 px taller: all of it the graph's)
    assert empty_under_settings(window) <= 10, window.right_splitter.sizes()
    assert window.settings_pane.verticalScrollBar().maximum() == 0  # the settings still read whole
    splitter, fold = window.right_splitter, window.settings_pane.advanced
    graph = splitter.sizes()[0]
    fold.show(True)  # the settings' content grows: they take back the graph's extra height
    qtbot.waitUntil(lambda: splitter.sizes()[0] < graph - 100, timeout=3000)
    assert splitter.sizes()[0] >= window.live_graph.minimumSizeHint().height()
    fold.show(False)
    qtbot.waitUntil(lambda: splitter.sizes()[0] == graph, timeout=3000)
    assert settled(qtbot, window, (1440, 900)) == small  # and back


def test_a_layout_saved_on_a_small_screen_does_not_pin_the_panel(qtbot, make_window):
    first = make_window(FAST.with_values(decoding="auto"), start=False)
    restored_plot = settled(qtbot, first, (1366, 768))
    restored_graph = first.right_splitter.sizes()[0]
    first.close()  # saves its layout
    window = make_window(None, start=False)
    assert abs(window.side_panel_height.floor - restored_graph) <= 4 and window.side_panel_width.floor == PANEL_PX
    pane = window.settings_pane
    assert settled(qtbot, window, (1366, 768)) >= restored_plot - 4 and window.right_splitter.width() == PANEL_PX
    large = settled(qtbot, window, (1920, 1080))
    qtbot.waitUntil(lambda: not pane.decoding.is_elided() and not pane.draft_model.is_elided(), timeout=3000)
    assert window.right_splitter.width() > PANEL_PX
    assert large >= restored_plot + 200, (restored_plot, large)
    assert empty_under_settings(window) <= 10, window.right_splitter.sizes()
    settled(qtbot, window, (1366, 768))  # back on the small screen: the saved split stands as a minimum
    assert window.right_splitter.sizes()[0] >= restored_graph - 4 and window.right_splitter.width() == PANEL_PX


def test_a_split_the_user_drags_stands(qtbot, make_window):
    window = make_window(FAST, start=False)
    settled(qtbot, window, (1440, 900))
    splitter = window.right_splitter
    graph, settings = splitter.sizes()
    splitter.splitterMoved.emit(graph - 60, 1)  # as a drag of the handle says it
    splitter.setSizes([graph - 60, settings + 60])
    settled(qtbot, window, (1920, 1080))
    assert splitter.sizes()[0] == graph - 60  # (the settings take the window's extra height, as before the fix)
