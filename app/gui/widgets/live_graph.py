"""Live plots of a streaming reply: decode tokens/s, acceptance rate and context fill, with rolls marked.

Points are collected from the engine's ``StepStats`` / ``ContextRolled`` events as they arrive and drawn by a
timer five times a second. One plot is shown at a time, chosen with the buttons above it (Speed, Acceptance,
Context), so that it has the height to be read in a 1366x768 window (three stacked plots had a few pixels each).
Its y-axis has values and units; plain and speculative runs are drawn in their own colours, named by the legend.

The graph follows the conversation on screen: it draws the last reply generated in that conversation during this
session (its points are kept in memory, for the last ``KEPT_CONVERSATIONS`` conversations), and for a reply of an
earlier session, whose points were not stored, only its summary. Where it draws nothing, the plot area says why
(:data:`NO_PLOT`, :data:`NO_PLOT_YET`) in place of axes and a legend (a newcomer trial read empty axes of made-up
ranges, 0-10 tokens/s over 0.1-0.4 s, under a restarted chat's numbers). The time axis fits the reply: it grows in
small steps while the reply streams and ends fitted to its length.

Why one module of ~610 lines: it is one widget, :class:`LiveGraph` (about 440 of them), whose runs, plot selector,
legend, axes and summary line all read and write the same per-conversation points; the small classes after it are
its time axis and its plot frame, and the functions the summary's words.
"""

from __future__ import annotations

import statistics
import time
from collections import OrderedDict

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QFontMetricsF, QPalette
from PySide6.QtWidgets import QButtonGroup, QGraphicsItem, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from ...backends.remote_stream import REMOTE_MODE
from ...counts import tokens_text
from .. import theme
from ..reply_format import (
    MODE_NAMES,
    accepted_text,
    auto_drafters,
    compare_headline,
    compare_summary,
    dropped_text,
    has_speed,
    metrics_text,
)
from .graph_summary import SummaryLabel, whole_groups
from .live_series import Series, nice_ceiling

REFRESH_MS = 200  # 5 updates a second
MIN_X_RANGE_S = 0.5  # the shortest time axis, in seconds
X_MARGIN = 0.03  # a finished reply's axis ends this fraction past its last point
KEPT_CONVERSATIONS = 16  # conversations whose last reply's points are kept to redraw
#: The legend's name of the plain colour. Auto, the default, and a fixed speculative decoding share the other,
#: named after the run drawn in it (``LiveGraph.legend_names``).
PLAIN_LEGEND = "Plain"
#: The summary's mark before its words on the context being full: the dashed lines drawn where that happened (the
#: legend's row had no room for words: "┆ full" read as jargon).
CONTEXT_FULL_MARK = "┆"
#: What the summary and the legend call the run of a remote server that does not say how it decoded
#: (``REMOTE_MODE``; drawn in the speculative colour): not a decoding mode of this computer's.
REMOTE_RUN = "Remote server"
PLACEHOLDER = "Send a message to see decode speed, acceptance rate and context fill live."
#: The summary when the last reply was stopped before its first token: it measured nothing, and an earlier reply's
#: numbers would read as this one's.
STOPPED_EARLY = "Last reply: stopped before its first token (nothing to measure)."
#: The summary when the last reply failed before its first token (a server not reached, a setting refused): nothing
#: was stopped, and nothing measured.
FAILED_EARLY = "Last reply: failed before its first token (nothing to measure)."
#: The summary when the last reply was interrupted (SpecChat closed or crashed while it streamed): it measured nothing
#: to show, and an earlier reply's numbers must not stand for it.
INTERRUPTED = "Last reply: interrupted when SpecChat closed (nothing measured)."
#: The plot area while the reply shown has no points to draw: one of an earlier session (its points are not stored),
#: another version of the reply drawn, one stopped before its first token.
NO_PLOT = "No plot for this reply: plots are drawn while a reply is generated."
#: The plot area after a reply of one token (of each run, in a Compare): it took no decode step, so no point was drawn.
ONE_TOKEN = "One token: no speed to plot (a speed needs two tokens or more)."
#: The plot area while the conversation shown has no reply.
NO_PLOT_YET = "Plots are drawn here while a reply is generated."
#: ``show_conversation``'s ``reply_id`` for a conversation shown without a reply (message ids start at 1).
NO_REPLY = 0
AXIS_STEPS = (1, 1.5, 2, 3, 4, 5, 6, 8)  # a streaming reply's axis grows through these x 10^n
RESIZE_SETTLE_MS = 150  # the plots are laid out again this long after the graph's last change of size
CANVAS_MIN_HEIGHT = 140  # pixels: a plot area of about 100 px above the time axis (the settings still fit 1366x768)
Y_PADDING = 0.08  # the y-axis reaches this fraction past 0 and its top value, so that both values are drawn
LEFT_AXIS_WIDTH = 52  # pixels: values up to "1000" and the unit written along the axis
#: The plots, in the selector's order: key -> (button, unit on the y-axis, what it shows).
PLOTS = {
    "rate": ("Speed", "tokens/s", "Decode speed: tokens generated per second, over the last half second"),
    "acceptance": (
        "Acceptance", "% accepted",
        "Acceptance rate: the share of the drafted tokens that the model accepted so far (speculative decoding only)",
    ),
    "fill": (
        "Context", "% of context",
        "Context fill: how much of the context length (n_ctx) the chat takes up. A dashed line marks each time the "
        "context was full and its oldest tokens (after the system prompt: Always kept, under Advanced) were dropped",
    ),
}  # fmt: skip


class LiveGraph(QWidget):
    """One plot at a time (:data:`PLOTS`, chosen with the buttons above it) against the time since the reply
    started, in seconds, under a summary of the numbers of the last reply.

    While a reply streams, axis ranges grow in steps instead of following every point, so most redraws only repaint
    the curves (re-laying out the axes costs far more than drawing a few hundred points); when it ends, the time
    axis is fitted to it. Every plot keeps its curves while another is shown.

    Attributes:
        series: the runs drawn (those of the conversation on screen), in order; refresh_times:
        ``time.perf_counter()`` of each redraw while running; plots: key of :data:`PLOTS` -> its plot;
        plot_buttons: key -> the button that shows it; legend: the colour of each kind of run.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("liveGraph")
        # No least width of its own (its button row would ask ~230 px): a window narrowed below NARROW_WINDOW_PX
        # must reach its new width before the side panel folds away (app/gui/side_panel_fold.py).
        self.setMinimumWidth(1)
        self.series: list[Series] = []
        self.refresh_times: list[float] = []
        self._runs: OrderedDict[int | None, list[Series]] = OrderedDict()  # conversation -> its last reply's runs
        self._shown: int | None = None  # the conversation on screen
        self._live: Series | None = None  # the run receiving events
        self._live_conversation: int | None = None
        self._running = False
        self._dirty = False
        self._roll_lines: list[tuple[pg.PlotItem, pg.InfiniteLine]] = []
        self._x_max = 0.0
        self._rate_max = 0.0

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        self.summary = SummaryLabel(PLACEHOLDER)
        self.summary.setObjectName("graphSummary")
        layout.addWidget(self.summary)

        selector = QHBoxLayout()
        selector.setSpacing(4)
        self._selector = QButtonGroup(self)
        self.plot_buttons: dict[str, QToolButton] = {}
        for key, (text, _unit, tip) in PLOTS.items():
            button = QToolButton()  # (as wide as its word: the row holds the legend too in a 1366 px window)
            button.setText(text)
            button.setObjectName(f"graphPlot_{key}")
            button.setProperty("plotChoice", True)  # (the theme draws the chosen plot's button in the accent colour)
            button.setCheckable(True)
            button.setToolTip(tip)
            button.setAccessibleName(f"Live graph: {tip.split(':')[0].lower()}")
            self._selector.addButton(button)
            self.plot_buttons[key] = button
            button.clicked.connect(lambda _checked, key=key: self.show_plot(key))
            selector.addWidget(button)
        selector.addStretch(1)
        self.legend = QLabel()
        self.legend.setObjectName("graphLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setToolTip(
            "Colours of the curves drawn: plain decoding; Auto, or a fixed speculative decoding (Speculative, "
            "shortened to Spec. where the row is narrow)"
        )
        selector.addWidget(self.legend)
        layout.addLayout(selector)
        self._selector_row = selector
        self._legend_row = QHBoxLayout()  # (the legend's, right-aligned, where it would be cut beside the buttons)
        self._legend_row.addStretch(1)
        layout.addLayout(self._legend_row)

        pg.setConfigOptions(antialias=False)
        self.canvas_frame = _SettlingFrame()
        self.canvas_frame.setMinimumHeight(CANVAS_MIN_HEIGHT)
        self.canvas = pg.GraphicsLayoutWidget(self.canvas_frame)
        self.canvas.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # nothing to do with the keyboard: the summary says it
        self.no_plot = QLabel(NO_PLOT_YET, self.canvas_frame)  # (given the frame's area with the canvas)
        self.no_plot.setObjectName("graphNoPlot")
        self.no_plot.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_plot.setWordWrap(True)
        layout.addWidget(self.canvas_frame, 1)
        self.plots = {key: self._plot(unit, tip) for key, (_text, unit, tip) in PLOTS.items()}
        self.rate_plot, self.acceptance_plot, self.fill_plot = self.plots["rate"], self.plots["acceptance"], self.plots["fill"]
        for plot in (self.acceptance_plot, self.fill_plot):
            plot.setYRange(0, 100, padding=Y_PADDING)
            plot.getAxis("left").setTickSpacing(50, 25)
        self._shown_plot = ""
        self._set_x_max(MIN_X_RANGE_S)
        self._set_rate_max(10.0)
        self._curves = {key: tuple(plot.plot([], []) for plot in self._plots) for key in MODE_NAMES}
        self.show_plot("rate")
        self._show_drawn()
        self.restyle()

        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)

    @property
    def _plots(self):
        return (self.rate_plot, self.acceptance_plot, self.fill_plot)

    @property
    def shown_plot(self) -> str:
        """The key (of :data:`PLOTS`) of the plot shown."""
        return self._shown_plot

    def show_plot(self, key: str) -> None:
        """Show the plot ``key`` of :data:`PLOTS` (``rate``, ``acceptance`` or ``fill``) in place of the other."""
        if key == self._shown_plot:
            return
        if self._shown_plot:
            self.canvas.ci.removeItem(self.plots[self._shown_plot])
        self._shown_plot = key
        self.canvas.addItem(self.plots[key], row=0, col=0)
        self.plot_buttons[key].setChecked(True)
        self.canvas.setAccessibleName(f"Live graph: {PLOTS[key][2]}")

    def _plot(self, unit: str, tip: str) -> pg.PlotItem:
        plot = pg.PlotItem(axisItems={"bottom": SecondsAxis("bottom")})
        plot.setToolTip(tip)
        plot.showGrid(x=True, y=True, alpha=0.25)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.disableAutoRange()
        plot.setLabel("left", unit)
        plot.getAxis("left").setWidth(LEFT_AXIS_WIDTH)
        for axis in ("left", "bottom"):
            plot.getAxis(axis).enableAutoSIPrefix(False)  # "tokens/s" and seconds, never "x0.001"
            # axes change rarely (ranges grow in steps): keep them as pixmaps, so the 5-a-second redraws, and
            # moves of the window, only draw the curves
            plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        return plot

    def restyle(self) -> None:
        """Draw in the theme applied now (``app.gui.theme``): background, axes, curves and legend."""
        current = theme.current()
        self.canvas.setBackground(current.base)
        palette = self.canvas_frame.palette()
        palette.setColor(QPalette.ColorRole.Window, QColor(current.base))
        self.canvas_frame.setPalette(palette)
        label_style = {"color": current.graph_text, "font-size": "8pt"}
        for plot in self._plots:
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(current.graph_axis)
                plot.getAxis(axis).setTextPen(current.graph_text)
                plot.getAxis(axis).setLabel(plot.getAxis(axis).labelText, **label_style)
        for key, curves in self._curves.items():
            for curve in curves:
                curve.setPen(pg.mkPen(current.series(key), width=2))
        self._show_legend()
        for plot, line in self._roll_lines:  # drawn again in the new colours
            plot.removeItem(line)
        self._roll_lines = []
        self._dirty = True
        self.refresh()

    def _set_x_max(self, value: float) -> None:
        self._x_max = value
        for plot in self._plots:
            plot.setXRange(0, value, padding=0.0)

    def _set_rate_max(self, value: float) -> None:
        self._rate_max = value
        self.rate_plot.getAxis("left").setTickSpacing(value / 2, value / 10)  # value is 1, 2 or 5 x 10^n
        self.rate_plot.setYRange(0, value, padding=Y_PADDING)

    # --- runs -------------------------------------------------------------------------------------

    def clear(self) -> None:
        """Draw nothing (the runs kept for each conversation stay): the plot area says :data:`NO_PLOT_YET`."""
        self.series = []
        self.no_plot.setText(NO_PLOT_YET)
        self._show_drawn()
        for curves in self._curves.values():
            for curve in curves:
                curve.setData([], [])
        for plot, line in self._roll_lines:
            plot.removeItem(line)
        self._roll_lines = []
        self._set_x_max(MIN_X_RANGE_S)
        self._set_rate_max(10.0)
        self.summary.setText("")

    def show_conversation(
        self,
        conversation_id: int | None,
        replies: list[dict] | None = None,
        last_state: str = "complete",
        reply_id: int | None = None,
    ) -> None:
        """Follow the conversation now on screen: draw its last reply of this session, or, for a reply of an
        earlier session, say what it measured, and how fast the chat's replies were (``replies``: the stored
        statistics of its replies, oldest first; ``last_state``: the last one's ``Message.state``, where
        ``stopped`` with no speed measured says :data:`STOPPED_EARLY` instead of an earlier reply's numbers, and
        ``streaming`` while no reply runs, :data:`INTERRUPTED`).

        ``reply_id``: the message of the last reply shown (:data:`NO_REPLY`: none). The runs of this session are
        drawn only when they belong to it: after a version switch shows another reply, the graph says that reply's
        stored numbers (a newcomer trial read 14.6 tokens/s in the graph beside a reply that said 15.5, the runs
        being those of the version switched away from). None: the conversation's runs, whichever reply they drew."""
        self._shown = conversation_id
        self.clear()
        runs = self._runs.get(conversation_id)
        if runs and reply_id is not None and runs[-1].reply_id not in (None, reply_id):
            runs = None  # (another version's: kept, drawn again once that version is shown)
        measured = [stats for stats in replies or [] if _measured(stats)]
        if replies:
            self.no_plot.setText(NO_PLOT)
        if runs:
            self.series = list(runs)
            self._show_drawn()
            self._dirty = True
            self.refresh()
        elif replies and last_state == "stopped" and not _measured(replies[-1]):
            self.summary.set_texts([STOPPED_EARLY + chat_summary(measured), STOPPED_EARLY])
        elif replies and last_state == "streaming" and not self._running and not _measured(replies[-1]):
            self.summary.set_texts([INTERRUPTED + chat_summary(measured), INTERRUPTED])
        elif measured:
            last = measured[-1]
            compare = last.get("compare")
            text = f"Last reply: {compare_summary(compare) if compare else metrics_text(last)}."
            chat = chat_summary(measured)
            texts = [text + chat, text]
            if compare:  # (the speedup alone: the reply's footer says the rest)
                texts.append(f"Last reply: {compare_headline(compare)}.")
            self.summary.set_texts(texts)
        else:
            self.summary.setText(PLACEHOLDER)

    def start_run(
        self,
        key: str,
        label: str | None = None,
        keep_previous: bool = False,
        conversation_id: int | None = None,
        reply_id: int | None = None,
    ) -> Series:
        """Start recording a run of a reply (the message ``reply_id``, if known) in ``conversation_id`` (``key``
        ``ar`` or ``spec`` picks the colour and, without ``label``, the run's name; ``REMOTE_MODE`` names it
        :data:`REMOTE_RUN`); it replaces that conversation's earlier runs unless kept, and is drawn
        while that conversation, and that reply in it, is shown."""
        series = Series(key, label or {**MODE_NAMES, REMOTE_MODE: REMOTE_RUN}.get(key, key), reply_id=reply_id)
        previous = self._runs.pop(conversation_id, [])  # re-inserted last: the most recent conversation
        runs = [s for s in previous if keep_previous and s.key != key] + [series]
        self._runs[conversation_id] = runs
        while len(self._runs) > KEPT_CONVERSATIONS:
            self._runs.popitem(last=False)
        self._live, self._live_conversation = series, conversation_id
        self._running = True  # (before the plot is shown: a run being drawn shows the plot, points or not yet)
        if conversation_id == self._shown:
            if not keep_previous:
                self.clear()
            self.series = list(runs)
            self._show_drawn()
            self._dirty = True
        if not self._timer.isActive():
            self._timer.start()
        return series

    def add_events(self, events) -> None:
        """Feed engine events of the current run (drawn at the next refresh if its conversation is shown)."""
        if self._live is None:
            self.start_run("ar", conversation_id=self._shown)
        for event in events:
            self._live.add(event)
        self._dirty = self._dirty or self._live_conversation == self._shown

    def finish_run(self) -> None:
        """The current run ended: draw it one last time, its time axis fitted, and stop the timer."""
        self._running = False
        self._dirty = True
        self.refresh()
        self._show_drawn()
        self._timer.stop()

    def stopped_early(self, conversation_id: int | None, summary: str = STOPPED_EARLY) -> None:
        """A reply of ``conversation_id`` was stopped (or failed: ``summary`` :data:`FAILED_EARLY`) before its first
        token: its runs are forgotten (they hold nothing, or, when it ended before its first run began, the previous
        reply's points) and, when that conversation is shown, the summary says ``summary`` in place of the numbers
        of an earlier reply."""
        self._runs.pop(conversation_id, None)
        if self._live_conversation == conversation_id:
            self._live = None
        if conversation_id == self._shown:
            self.clear()
            self.no_plot.setText(NO_PLOT)
            self.summary.setText(summary)

    @property
    def running(self) -> bool:
        """True while a run is being drawn live."""
        return self._running

    # --- drawing ----------------------------------------------------------------------------------

    def legend_names(self) -> dict[str, str]:
        """The name of each colour drawn in: Plain, and the speculative colour named after the run drawn in it
        ("Auto", or "Speculative" for a fixed speculative decoding); only :data:`REMOTE_RUN` while a remote
        server's run is drawn; none while nothing is (the legend is hidden: a newcomer trial read "Plain —
        Speculative" over empty axes under Auto)."""
        if any(s.key == REMOTE_MODE for s in self.series):
            return {REMOTE_MODE: REMOTE_RUN}
        names = {"ar": PLAIN_LEGEND} if any(s.key == "ar" for s in self.series) else {}
        drafting = next((MODE_NAMES.get(s.key, s.label) for s in self.series if s.key != "ar"), None)
        return names | ({"spec": drafting} if drafting else {})

    def _show_drawn(self) -> None:
        """The plots and their legend while runs are drawn; else, in the plot area, the note set in ``no_plot``, or
        :data:`ONE_TOKEN` where the runs drawn ended with no point to draw (they read as empty axes, 0-10 tokens/s
        over 0.1-0.4 s, after a reply of Longest reply 1)."""
        live = self._running and any(s is self._live for s in self.series)
        drawn = bool(self.series) and (live or any(s.rate or s.acceptance or s.fill for s in self.series))
        if self.series and not drawn:
            self.no_plot.setText(ONE_TOKEN if all(s.reply_tokens <= 1 for s in self.series) else NO_PLOT)
        self.canvas.setVisible(drawn)
        self.legend.setVisible(drawn)
        self.no_plot.setVisible(not drawn)
        self._show_legend()

    def _show_legend(self) -> None:
        """The legend, in the room the plot buttons leave it: "Speculative" shortened to "Spec." where the whole
        word would be cut (its tooltip says the names whole); on a line of its own under the buttons where even so
        it would be cut (fonts at 144 dpi: "━ Plain ━ Aut"), the whole word again where that line has room for it.
        Where it goes is left as it is while the graph is hidden (its width is not known)."""
        current = theme.current()
        names = self.legend_names()
        buttons = sum(button.sizeHint().width() + 4 for button in self.plot_buttons.values())
        room = self.width() - 12  # (the layout's margins, and below, the spacing after each button)
        for below, short in ((False, False), (False, True), (True, False), (True, True)):
            shown = {key: "Spec." if short and name == "Speculative" else name for key, name in names.items()}
            self.legend.setText(
                " ".join(f'<span style="color:{current.series(key)}; font-weight:700">━━</span>&nbsp;{name}'
                         for key, name in shown.items())
            )  # fmt: skip
            if not self.isVisible() or self.legend.sizeHint().width() <= (room if below else room - buttons):
                break
        if self.isVisible():
            row, other = (self._legend_row, self._selector_row) if below else (self._selector_row, self._legend_row)
            if row.indexOf(self.legend) < 0:
                other.removeWidget(self.legend)
                row.addWidget(self.legend)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._show_legend()

    def refresh(self) -> None:
        """Redraw the curves from the collected points (called by the timer)."""
        if self._running:
            self.refresh_times.append(time.perf_counter())
        if not self._dirty:
            return
        self._dirty = False
        x_max = max((s.rate[-1][0] for s in self.series if s.rate), default=0.0)
        x_max = max(x_max, max((s.fill[-1][0] for s in self.series if s.fill), default=0.0))
        streaming = self._running and any(s is self._live for s in self.series)
        if streaming:
            if x_max > self._x_max:
                self._set_x_max(nice_ceiling(x_max * 1.05, AXIS_STEPS))
        else:
            fitted = max(MIN_X_RANGE_S, x_max * (1 + X_MARGIN))
            if fitted != self._x_max:
                self._set_x_max(fitted)
        rate_max = max((max(r for _, r in s.rate) for s in self.series if s.rate), default=0.0)
        if rate_max > self._rate_max:
            self._set_rate_max(nice_ceiling(rate_max * 1.1))
        for series in self.series:
            rate, acceptance, fill = self._curves.get(series.key, self._curves["spec"])
            rate.setData(*_xy(series.rate))
            acceptance.setData(*_xy(series.acceptance))
            fill.setData(*_xy(series.fill))
        drawn = len(self._roll_lines) // len(self._plots)
        all_rolls = [(s.key, t) for s in self.series for t in s.rolls]
        for key, t in all_rolls[drawn:]:
            pen = pg.mkPen(theme.current().series(key), width=1, style=Qt.PenStyle.DashLine)
            for plot in self._plots:  # a roll changes the speed and the acceptance too: marked on each plot
                line = pg.InfiniteLine(pos=t, angle=90, pen=pen)
                plot.addItem(line)
                self._roll_lines.append((plot, line))
        if self.series:  # else the summary says why nothing is drawn
            self.summary.set_texts([self.summary_html(), self.summary_html(with_fill=False)])

    @property
    def x_range(self) -> tuple[float, float]:
        """The time axis shown, in seconds (start, end)."""
        start, end = self.rate_plot.viewRange()[0]
        return float(start), float(end)

    def summary_text(self) -> str:
        """One line: latest tokens/s per run, its drafts accepted, context fill and rolls (plain text)."""
        return self._summary(lambda series, text: text, space="\u00a0")

    def summary_html(self, with_fill: bool = True) -> str:
        """The summary line with each run's name in its curve's colour (the legend), and its words on the context
        being full after :data:`CONTEXT_FULL_MARK`, the dashed lines' legend; ``with_fill`` False leaves out the
        context's fill (its plot shows it), for a summary that would not fit two lines."""
        current = theme.current()
        return whole_groups(self._summary(
            lambda series, text: f'<span style="color:{current.series(series.key)}; font-weight:600">{text}</span>',
            f'<span style="color:{current.graph_text}; font-weight:700">{CONTEXT_FULL_MARK}</span>&nbsp;',
            with_fill,
            "&nbsp;",
        ))  # (a rate and its unit, the drafts accepted... on one line: the README's screenshot broke "65.6 tokens/")

    def _summary(self, name, full_mark: str = "", with_fill: bool = True, space: str = " ") -> str:
        """The summary's words, each run's name through ``name``; ``space`` joins the words of a group of numbers
        that must wrap whole (a newcomer read "context 73 / 4,096 (2%)" broken across the two lines): a
        non-breaking space, ``&nbsp;`` in rich text."""
        if not self.series:
            return ""
        parts = []
        for series in self.series:
            rate = series.latest_rate
            streaming = self._running and series is self._live
            if streaming:
                waiting = ": …"
            elif series.reply_tokens:  # a run that ended with no step and its token: one has no speed
                waiting = f": {tokens_text(series.reply_tokens)}"
            else:
                waiting = ": stopped before its first token"
            label = series.label
            if label == MODE_NAMES["auto"] and (drafters := auto_drafters(series.drafter_steps, series.drafter_accepted)):
                label += f" ({drafters})"  # what Auto drafted with, so far
            text = name(series, f"■ {label}") + (f": {rate:.1f} tokens/s" if rate is not None else waiting)
            if series.drafted:  # (the footer's words: "all drafts" where several drafters drafted)
                several = len([drafter for drafter in series.drafter_steps if drafter != "plain"]) > 1
                text += f", {accepted_text(series.accepted / series.drafted, several)}"
            parts.append(text)
        last = self.series[-1]
        if last.n_ctx and with_fill:
            fill = f"context {last.cache_len:,} / {last.n_ctx:,} ({100.0 * last.cache_len / last.n_ctx:.0f}%)"
            parts.append(fill.replace(" ", space))
        if dropped := _dropped_words(self.series):
            parts.append(f"{full_mark}{dropped}")
        return " · ".join(parts)


class SecondsAxis(pg.AxisItem):
    """The time axis: seconds since the reply started, its rightmost drawn value written with the unit ("0.4 s"),
    which takes no height of the plot's (an axis title would).

    The unit goes on the label as drawn, not on the last string of a tick level (``tickStrings``): pyqtgraph leaves
    out the labels of a level that would not fit, and at some widths the level that carried the unit was the one
    left out (the 1920x1080 window drew 0.1 ... 0.4 with no unit). A label that the unit would push past the axis's
    right end (where the axis's picture is cut: a Compare's "16" at the end of a 0-16 s axis lost its " s") moves
    left to end there, and a label it would then cover is left out."""

    def generateDrawSpecs(self, p):  # noqa: N802 - pyqtgraph's name
        specs = super().generateDrawSpecs(p)
        if specs is None or not specs[2]:
            return specs
        axis, ticks, texts = specs
        last = max(range(len(texts)), key=lambda index: texts[index][0].center().x())
        rect, flags, text = texts[last]
        font = self.style.get("tickFont") or p.font()
        wider = QFontMetricsF(font).horizontalAdvance(" s")
        rect = rect.adjusted(0, 0, wider, 0)
        overflow = rect.right() - self.mapRectFromParent(self.geometry()).right()
        if overflow > 0:
            rect.translate(-overflow, 0)
        texts = [spec for index, spec in enumerate(texts) if index != last and not spec[0].intersects(rect)]
        return axis, ticks, [*texts, (rect, flags, text + " s")]


class _SettlingFrame(QWidget):
    """Holds the plots' canvas and gives it its own size once a resize has settled.

    Laying out and repainting a plot for a new size costs ~10-20 ms on a 2-core machine; while the user drags
    the window's edge (a resize every few milliseconds) that work would repeat on every step and freeze the
    window. In between, the canvas keeps its size: cut off, or with a white margin, for a moment.
    """

    def __init__(self):
        super().__init__()
        self.setAutoFillBackground(True)  # the theme's background (LiveGraph.restyle)
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(RESIZE_SETTLE_MS)
        self._settle.timeout.connect(self.fit_canvas)

    def fit_canvas(self) -> None:
        """Give the canvas the frame's whole area now."""
        for child in self.children():
            if isinstance(child, QWidget):
                child.setGeometry(self.rect())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.oldSize().isValid() and not event.oldSize().isEmpty():
            self._settle.start()
        else:
            self.fit_canvas()  # first shown: no earlier size to keep


def _dropped_words(runs: list[Series]) -> str:
    """What the runs' rolls after their first token dropped, in the footer's words (:func:`dropped_text`: "context
    full 3 times: 1,536 earlier tokens dropped"; a newcomer read the graph's "earlier tokens dropped", no count, as
    another fact): once where the runs agree (a comparison's runs roll at the same lengths), else each run's, named;
    "" where none rolled. Rolls while a prompt was read are its cut, which the footer says apart (a run stopped then
    never decoded: nothing said of it)."""
    rolled = [run for run in runs if run.reply_rolls]
    words = {dropped_text(run.reply_dropped, run.reply_rolls) for run in rolled}
    if len(words) <= 1:
        return next(iter(words), "")
    return "; ".join(f"{run.label}: {dropped_text(run.reply_dropped, run.reply_rolls)}" for run in rolled)


def chat_summary(replies: list[dict]) -> str:
    """`` This chat: 5 replies, 41-63 tokens/s (median 58).`` for the stored statistics of a chat's replies (a
    comparison counts with its speculative run; a reply of one token has no speed, :func:`has_speed`), "" for fewer
    than two."""
    rates = sorted(
        float(run["tokens_per_s"])
        for stats in replies
        if _measured(stats)
        for run in [(stats.get("compare") or {}).get("spec") or {} if "compare" in stats else stats]
        if has_speed(run) and isinstance(run.get("tokens_per_s"), (int, float))
    )
    if len(rates) < 2:
        return ""
    return (f" This chat: {len(rates)} replies, {rates[0]:.0f}-{rates[-1]:.0f} tokens/s "
            f"(median {statistics.median(rates):.0f}).")  # fmt: skip


def _measured(stats: dict) -> bool:
    """Whether a stored reply measured a speed: a comparison, or a reply with tokens (one stopped before its first
    token stores 0 tokens/s and a TTFT of 0 ms, which say nothing of the model's speed)."""
    return "compare" in stats or ("tokens_per_s" in stats and stats.get("new_tokens") != 0)


def _xy(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]
