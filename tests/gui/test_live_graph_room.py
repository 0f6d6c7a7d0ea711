"""The live graph can be read in the window: at 1366x768 and 1920x1080 each plot is measured in pixels as the window
lays it out, its y-axis draws values and a unit, and plain and speculative runs have their own colours, named by a
legend (three stacked plots had about 5 px each at 1366x768)."""

from __future__ import annotations

import pytest
from gui_helpers import drawn_axis_labels

from app.gui import theme
from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.widgets.live_graph import PLOTS
from inference.events import StepStats

#: The smallest plot area (pixels, between the axes) per window size: room for a curve to be read, and for the
#: y-axis's three or more values.
MIN_PLOT_HEIGHT = {(1366, 768): 100, (1920, 1080): 250}


@pytest.mark.parametrize("size", sorted(MIN_PLOT_HEIGHT))
def test_each_plot_has_room_values_and_units(qtbot, qasync_loop, shared_worker, tmp_path, size):
    from app.gui.application import create_main_window

    SettingsStore(tmp_path / "settings.json").save(AppSettings())
    window = create_main_window(tmp_path / "history.sqlite3", tmp_path / "settings.json", worker=shared_worker)
    qtbot.addWidget(window)
    window.resize(*size)  # what default_size gives on such a screen (1440x900 on 1920x1080 is smaller: 1920 wide is kept here)
    window.show()
    qtbot.waitExposed(window)
    graph = window.live_graph
    steps = [StepStats(drafted=4, accepted=2, emitted=3, draft_ms=0.1, verify_ms=9.0, step_ms=10.0, k=4, cache_len=40 + i,
                       n_ctx=512, elapsed_s=0.05 * (i + 1), generated=i + 1) for i in range(20)]  # fmt: skip
    for key in ("ar", "auto"):  # a Compare under Auto (the default): the plots are shown once a run is drawn
        graph.start_run(key, keep_previous=True, conversation_id=None)  # (no conversation on screen)
        graph.add_events(steps)
    graph.finish_run()
    try:
        qtbot.waitUntil(lambda: graph.canvas.size() == graph.canvas_frame.size() and graph.canvas.height() > 0, timeout=3000)
        heights = {}
        for key, (button_text, unit, _tip) in PLOTS.items():
            button = graph.plot_buttons[key]
            assert button.isVisible() and button.text() == button_text
            button.click()
            qtbot.wait(20)
            assert graph.shown_plot == key
            plot = graph.plots[key]
            assert plot.isVisible() and plot.scene() is graph.canvas.scene()
            canvas_rect = graph.canvas.rect()
            plot_area = graph.canvas.mapFromScene(plot.vb.sceneBoundingRect()).boundingRect()
            assert canvas_rect.contains(plot_area), (key, plot_area, canvas_rect)  # nothing of it cut off
            heights[key] = plot_area.height()
            left = plot.getAxis("left")
            assert left.labelText == unit and left.isVisible()
            labels = [text for _rect, text in drawn_axis_labels(left)]
            assert len(labels) >= 3 and labels[0] in ("0", "0.0"), (key, labels)  # from 0 to the top value
        assert all(height >= MIN_PLOT_HEIGHT[size] for height in heights.values()), heights
        times = [text for _rect, text in drawn_axis_labels(graph.plots["rate"].getAxis("bottom"))]
        assert any(t.endswith(" s") for t in times), times  # the time axis: seconds
        current = theme.current()
        assert current.series("ar") != current.series("spec")
        legend = graph.legend.text()
        assert "Plain" in legend and "Auto" in legend and "Speculative" not in legend  # (Auto, the default, drew in a colour called
        # "Speculative")
        assert current.series("ar") in legend and current.series("spec") in legend
        assert graph.legend.isVisible() and graph.legend.width() >= graph.legend.sizeHint().width()  # not cut
    finally:
        window.close()
        window.db.close()
