"""The live graph's time axis keeps its unit in sight: after a Compare of about 16 s (plain run, then Auto) the last
value, "16", sat at the axis's right end, and its " s" was drawn past it and cut off (newcomer trial, 1366x768)."""

from __future__ import annotations

import pytest
from gui_helpers import drawn_axis_labels
from PySide6.QtGui import QColor

from app.gui import theme
from app.gui.widgets.live_graph import LiveGraph
from inference.events import StepStats

#: Width of the graph in a 1366x768 window's side panel (pixels), as the trial's screenshot measured it.
PANEL_WIDTH = 400


@pytest.mark.parametrize("seconds", [0.5, 1.9, 9.7, 16.4, 33.0])
def test_the_unit_is_drawn_inside_the_axis(qtbot, seconds):
    graph = LiveGraph()
    qtbot.addWidget(graph)
    graph.start_run("auto")  # a run drawn with a point (its plot is shown only then), its axis set below
    graph.add_events([StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=9.0, step_ms=10.0, k=0,
                                cache_len=40, n_ctx=512, elapsed_s=0.1, generated=2)])  # fmt: skip
    graph.finish_run()
    graph.resize(PANEL_WIDTH, 300)
    graph.show()
    qtbot.waitExposed(graph)
    qtbot.waitUntil(lambda: graph.canvas.size() == graph.canvas_frame.size() and graph.canvas.width() > 0, timeout=3000)
    graph._set_x_max(seconds)
    axis = graph.plots["rate"].getAxis("bottom")
    labels = drawn_axis_labels(axis)
    with_unit = [(rect, text) for rect, text in labels if text.endswith(" s")]
    assert len(with_unit) == 1, labels
    unit_rect, text = with_unit[0]
    ends = axis.mapRectFromParent(axis.geometry())
    assert ends.left() <= unit_rect.left() and unit_rect.right() <= ends.right(), (text, unit_rect, ends)
    others = [rect for rect, other in labels if other != text]
    assert not any(rect.intersects(unit_rect) for rect in others), labels  # no label drawn over another

    # measured on the picture: the unit's "s" (the last few pixels of its label) is drawn in the axis's text colour
    qtbot.wait(50)
    picture = graph.canvas.grab().toImage()
    box = axis.mapRectToScene(unit_rect)
    box = graph.canvas.mapFromScene(box).boundingRect()
    background = QColor(theme.current().base)
    inked = sum(
        1
        for x in range(box.right() - 6, box.right() + 1)
        for y in range(box.top(), box.bottom() + 1)
        if 0 <= x < picture.width() and 0 <= y < picture.height() and picture.pixelColor(x, y) != background
    )
    assert inked >= 5, (text, box, picture.size().toTuple())
