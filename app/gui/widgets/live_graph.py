"""Live plots of a streaming reply: decode tokens/s, acceptance rate and context fill, with rolls marked.

Points are collected from the engine's ``StepStats`` / ``ContextRolled`` events as they arrive and drawn by a
timer five times a second. A comparison draws its autoregressive and speculative runs in different colours.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QGraphicsItem, QLabel, QVBoxLayout, QWidget

from inference.events import ContextRolled, StepStats

REFRESH_MS = 200  # 5 updates a second
RATE_WINDOW_S = 0.5  # tokens/s is measured over the last half second
COLOURS = {"ar": "#1f6feb", "spec": "#e8590c"}
LABELS = {"ar": "Autoregressive", "spec": "Speculative"}


@dataclass
class Series:
    """The points of one run (one reply, or one side of a comparison)."""

    key: str
    label: str
    colour: str
    steps: list[tuple[float, int]] = field(default_factory=list)  # (elapsed_s, generated)
    rate: list[tuple[float, float]] = field(default_factory=list)  # (elapsed_s, tokens/s)
    acceptance: list[tuple[float, float]] = field(default_factory=list)  # (elapsed_s, cumulative %)
    fill: list[tuple[float, float]] = field(default_factory=list)  # (elapsed_s, cache_len / n_ctx %)
    rolls: list[float] = field(default_factory=list)  # elapsed_s of each roll
    drafted: int = 0
    accepted: int = 0
    cache_len: int = 0
    n_ctx: int = 0
    _window_start: int = 0

    def add(self, event) -> None:
        """Add one engine event."""
        if isinstance(event, StepStats):
            t = event.elapsed_s
            self.steps.append((t, event.generated))
            while (
                self._window_start + 1 < len(self.steps) - 1 and t - self.steps[self._window_start + 1][0] >= RATE_WINDOW_S
            ):
                self._window_start += 1
            t0, g0 = self.steps[self._window_start]
            if len(self.steps) > 1 and t > t0:
                self.rate.append((t, (event.generated - g0) / (t - t0)))
            self.drafted += event.drafted
            self.accepted += event.accepted
            if self.drafted:
                self.acceptance.append((t, 100.0 * self.accepted / self.drafted))
            self.cache_len, self.n_ctx = event.cache_len, event.n_ctx
            self.fill.append((t, 100.0 * event.cache_len / event.n_ctx))
        elif isinstance(event, ContextRolled):
            t = self.steps[-1][0] if self.steps else 0.0
            self.rolls.append(t)
            self.cache_len = event.cache_len
            if self.n_ctx:
                self.fill.append((t, 100.0 * event.cache_len / self.n_ctx))

    @property
    def latest_rate(self) -> float | None:
        """The last tokens/s point."""
        return self.rate[-1][1] if self.rate else None


def nice_ceiling(value: float, steps: tuple[float, ...] = (1, 2, 5)) -> float:
    """The smallest 1/2/5 x 10^n at or above ``value`` (axis limits that change rarely)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in steps:
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


class LiveGraph(QWidget):
    """Three stacked plots sharing the time axis (seconds since the reply started).

    Axis ranges grow in 1/2/5 steps instead of following every point, so most redraws only repaint the curves
    (re-laying out the axes costs far more than drawing a few hundred points).

    Attributes:
        series: the runs drawn, in order; refresh_times: ``time.perf_counter()`` of each redraw while running.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("liveGraph")
        self.series: list[Series] = []
        self.refresh_times: list[float] = []
        self._running = False
        self._dirty = False
        self._roll_lines: list = []
        self._x_max = 0.0
        self._rate_max = 0.0

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        self.summary = QLabel("Send a message to see decode speed, acceptance rate and context fill live.")
        self.summary.setObjectName("graphSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        # two lines, always: a summary that grew to a third line (or shrank) would resize the plots below, and
        # re-laying out three plots costs ~20 ms
        self.summary.setFixedHeight(2 * self.summary.fontMetrics().lineSpacing() + 4)
        self.summary.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.summary)

        pg.setConfigOptions(antialias=False)
        self.canvas = pg.GraphicsLayoutWidget()
        self.canvas.setBackground("w")
        self.canvas.setMinimumHeight(260)
        layout.addWidget(self.canvas, 1)
        self.rate_plot = self._plot(0, "Decode tokens/s")
        self.acceptance_plot = self._plot(1, "Acceptance rate (%)")
        self.fill_plot = self._plot(2, "Context fill: cached tokens / n_ctx (%); rolls dashed")
        for plot in (self.acceptance_plot, self.fill_plot):
            plot.setYRange(0, 100, padding=0.02)
        self.acceptance_plot.setXLink(self.rate_plot)
        self.fill_plot.setXLink(self.rate_plot)
        for plot in (self.rate_plot, self.acceptance_plot):
            plot.getAxis("bottom").setStyle(showValues=False)  # one time axis, at the bottom
        self.fill_plot.setLabel("bottom", "seconds since the reply started", color="#555")
        self._set_x_max(5.0)
        self._set_rate_max(10.0)
        self._curves = {
            key: tuple(plot.plot([], [], pen=pg.mkPen(colour, width=2)) for plot in self._plots)
            for key, colour in COLOURS.items()
        }

        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)

    @property
    def _plots(self):
        return (self.rate_plot, self.acceptance_plot, self.fill_plot)

    def _plot(self, row: int, title: str):
        plot = self.canvas.addPlot(row=row, col=0)
        plot.setTitle(title, color="#333", size="9pt")
        plot.showGrid(x=True, y=True, alpha=0.25)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.disableAutoRange()
        plot.getAxis("left").setWidth(38)
        for axis in ("left", "bottom"):
            plot.getAxis(axis).setPen("#999")
            plot.getAxis(axis).setTextPen("#555")
            # axes and titles change rarely (ranges grow in steps): keep them as pixmaps, so the 5-a-second
            # redraws, and moves of the window, only draw the curves
            plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        plot.titleLabel.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        return plot

    def _set_x_max(self, value: float) -> None:
        self._x_max = value
        self.rate_plot.setXRange(0, value, padding=0.0)

    def _set_rate_max(self, value: float) -> None:
        self._rate_max = value
        self.rate_plot.setYRange(0, value, padding=0.02)

    # --- runs -------------------------------------------------------------------------------------

    def clear(self) -> None:
        """Remove every series."""
        self.series = []
        for curves in self._curves.values():
            for curve in curves:
                curve.setData([], [])
        for line in self._roll_lines:
            self.fill_plot.removeItem(line)
        self._roll_lines = []
        self._set_x_max(5.0)
        self._set_rate_max(10.0)
        self.summary.setText("")

    def start_run(self, key: str, label: str | None = None, keep_previous: bool = False) -> Series:
        """Start drawing a run (``key`` ``ar`` or ``spec`` picks the colour); clears earlier runs unless kept."""
        if not keep_previous:
            self.clear()
        series = Series(key, label or LABELS.get(key, key), COLOURS.get(key, "#2b8a3e"))
        self.series = [s for s in self.series if s.key != key] + [series]
        self._running = True
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()
        return series

    def add_events(self, events) -> None:
        """Feed engine events of the current run (drawn at the next refresh)."""
        if not self.series:
            self.start_run("ar")
        series = self.series[-1]
        for event in events:
            series.add(event)
        self._dirty = True

    def finish_run(self) -> None:
        """The current run ended: draw it one last time and stop the timer."""
        self._running = False
        self.refresh()
        self._timer.stop()

    @property
    def running(self) -> bool:
        """True while a run is being drawn live."""
        return self._running

    # --- drawing ----------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw the curves from the collected points (called by the timer)."""
        if self._running:
            self.refresh_times.append(time.perf_counter())
        if not self._dirty:
            return
        self._dirty = False
        x_max = max((s.rate[-1][0] for s in self.series if s.rate), default=0.0)
        x_max = max(x_max, max((s.fill[-1][0] for s in self.series if s.fill), default=0.0))
        if x_max > self._x_max:
            self._set_x_max(nice_ceiling(x_max * 1.05))
        rate_max = max((max(r for _, r in s.rate) for s in self.series if s.rate), default=0.0)
        if rate_max > self._rate_max:
            self._set_rate_max(nice_ceiling(rate_max * 1.1))
        for series in self.series:
            rate, acceptance, fill = self._curves.get(series.key, self._curves["spec"])
            rate.setData(*_xy(series.rate))
            acceptance.setData(*_xy(series.acceptance))
            fill.setData(*_xy(series.fill))
        drawn = len(self._roll_lines)
        all_rolls = [(s.colour, t) for s in self.series for t in s.rolls]
        for colour, t in all_rolls[drawn:]:
            line = pg.InfiniteLine(pos=t, angle=90, pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DashLine))
            self.fill_plot.addItem(line)
            self._roll_lines.append(line)
        self.summary.setText(self.summary_html())

    def summary_text(self) -> str:
        """One line: latest tokens/s per run, acceptance rate, context fill and rolls (plain text)."""
        return self._summary(lambda series, text: text)

    def summary_html(self) -> str:
        """The summary line with each run's name in its curve's colour (the legend)."""
        return self._summary(lambda series, text: f'<span style="color:{series.colour}; font-weight:600">{text}</span>')

    def _summary(self, name) -> str:
        if not self.series:
            return ""
        parts = []
        for series in self.series:
            rate = series.latest_rate
            text = name(series, f"■ {series.label}") + (f": {rate:.1f} tokens/s" if rate is not None else ": …")
            if series.drafted:
                text += f", acceptance {100.0 * series.accepted / series.drafted:.0f}%"
            parts.append(text)
        last = self.series[-1]
        if last.n_ctx:
            parts.append(f"context {last.cache_len} / {last.n_ctx} ({100.0 * last.cache_len / last.n_ctx:.0f}%)")
        rolls = sum(len(s.rolls) for s in self.series)
        if rolls:
            parts.append(f"{rolls} roll{'s' if rolls != 1 else ''}")
        return " · ".join(parts)


def _xy(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]
