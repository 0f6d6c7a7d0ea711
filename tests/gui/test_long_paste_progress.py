"""A ~51 KB paste in the window (issue 35, a newcomer's trial whose window was paused by other work): the reading
progress says how long it has been reading as the seconds pass (it said "0 ms so far" until the first pass ended,
6.7 s after Send on a busy machine), its time left does not climb pass after pass, and Stop ends the reading within
seconds."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from conftest import FAST
from gui_helpers import click

from app.gui.widgets.prompt_progress import PromptProgressView

GENESIS = Path(__file__).resolve().parents[2] / "bench" / "data" / "kjv_genesis.txt"
STOP_WITHIN_S = 15.0  # (as tests/gui/test_long_prompt.py: a pass takes several seconds on a busy machine)


def _seconds(words: str, what: str) -> float | None:
    """The duration before ``what`` ("so far", "left") in the progress's words, in seconds (None if not said)."""
    match = re.search(r"(\d+(?:\.\d+)?) (ms|s) " + what, words)
    if match is None:
        return None
    return float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)


@pytest.mark.serial  # wall times
def test_a_long_paste_says_its_reading_time_as_it_passes_and_stops_promptly(qtbot, make_window):
    from PySide6.QtCore import QTimer

    window = make_window(FAST.with_values(n_ctx=4096))
    events, samples = [], []  # (seconds after Send, stats["prefill"]); (seconds after Send, the words shown)
    sent = [0.0]
    window.replies.updated.connect(
        lambda reply, text: events.append((time.perf_counter() - sent[0], dict(reply.stats.get("prefill") or {})))
    )

    def look():
        views = [view for view in window.chat_view.findChildren(PromptProgressView) if view.isVisible()]
        if views:
            samples.append((time.perf_counter() - sent[0], views[0].words.text()))

    watch = QTimer()
    watch.timeout.connect(look)
    window.composer.set_text(GENESIS.read_text(encoding="utf-8")[:51_000])
    with qtbot.waitSignal(window.generation_finished, timeout=300_000) as finished:
        sent[0] = time.perf_counter()
        window.composer.submit()
        watch.start(200)
        qtbot.waitUntil(lambda: sum(1 for _, p in events if p.get("done")) >= 4, timeout=240_000)
        click(qtbot, window.composer.stop_button)
        stopped_at = time.perf_counter()
    stop_took = time.perf_counter() - stopped_at
    watch.stop()
    final = finished.args[0]

    # the time so far moves on between passes: never "0 ms so far" a second after Send, and within 1 s of the clock
    shown = [(t, _seconds(words, "so far")) for t, words in samples if t >= 1.0]
    assert shown and all(so_far is not None and so_far >= t - 1.0 for t, so_far in shown), shown[:20]
    # the time left (said from the first pass on) does not climb pass after pass
    estimates = [p["remaining_s"] for _, p in events if p.get("remaining_s") is not None]
    assert len(estimates) >= 4
    assert not all(b > a for a, b in zip(estimates, estimates[1:])), estimates
    # Stop ends the reading: the reply ends within seconds, with no text
    assert stop_took < STOP_WITHIN_S, f"the reply ended {stop_took:.1f} s after Stop"
    assert final.state == "stopped" and final.content == "" and final.stats["stop_reason"] == "cancelled"
