"""The window never freezes: a timer probe measures the Qt event loop's longest stall while a real reply streams
(and the user types, scrolls, resizes and switches conversations), while a long conversation opens, and while the
model loads. Each scenario runs the real application in a fresh process (tests/gui/stall_driver.py), so earlier
tests' windows and objects are not measured; the probe splits every stall into the GUI thread's own CPU time,
time waiting for a CPU and time blocked (see app/stall_probe.py).

The numbers assume an otherwise idle machine, like any timing measurement: other processes keeping every core
busy show up as "waiting for a CPU" in the failure message. On the 2-core CI virtual machines the same scenario's
longest stall varies from run to run (streaming: 35-49 ms over ten runs of one commit on a quiet machine; 50-74 ms
before opening another conversation stopped re-parenting the old one's bubbles and the live graph stopped laying
out its plots on every step of a resize), so a scenario that stalls runs again, up to ``ATTEMPTS``
times in all, and the best run must stay under ``MAX_STALL_MS``: noise rarely strikes every run, a freeze the
window causes shows in each of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import FAST

from app.gui.settings_store import SettingsStore

DRIVER = Path(__file__).with_name("stall_driver.py")
MAX_STALL_MS = 50.0
ATTEMPTS = 5


def run_scenario(name: str, tmp_path: Path, data_dir: Path, settings=FAST, env_extra=None) -> dict:
    SettingsStore(tmp_path / "settings.json").save(settings)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECCHAT_DATA_DIR": str(data_dir), **(env_extra or {})}
    result = subprocess.run(
        [sys.executable, str(DRIVER), name, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, f"driver failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def least_stalled_run(tmp_path: Path, scenario, check) -> dict:
    """Run ``scenario(folder)`` (each run in a fresh folder) until its longest stall is under MAX_STALL_MS, at most
    ATTEMPTS times; ``check(result)`` asserts what every run must do. Returns the run with the shortest longest
    stall, with every run's summary under ``all_summaries``."""
    runs = []
    while len(runs) < ATTEMPTS and not (runs and runs[-1]["max_stall_ms"] < MAX_STALL_MS):
        folder = tmp_path / f"run-{len(runs) + 1}"
        folder.mkdir()
        result = scenario(folder)
        check(result)
        runs.append(result)
    best = min(runs, key=lambda run: run["max_stall_ms"])
    best["all_summaries"] = "\n".join(f"run {i + 1}: {run['summary']}" for i, run in enumerate(runs))
    return best


def test_no_stall_while_a_reply_streams_and_the_user_works(tmp_path, data_dir, int4_dir):
    def check(result):
        # the user really did all that while the reply streamed, and it all took effect
        assert result["steps"] == ["type"] * 23 + ["scroll"] * 4 + ["resize"] * 3 + [
            "switch", "scroll", "earlier", "scroll", "switch", "stop"
        ], result["timeline"]  # fmt: skip
        assert result["typed"] == "typing while it streams"
        assert result["state"] == "stopped" and result["content"]
        assert result["shown_conversation"] and result["shown_content"] == result["content"]  # switched back, whole
        assert result["ticks"] > 100

    settings = FAST.with_values(max_new_tokens=1000)
    result = least_stalled_run(tmp_path, lambda folder: run_scenario("streaming", folder, data_dir, settings), check)
    assert result["max_stall_ms"] < MAX_STALL_MS, result["all_summaries"] + "\nactions: " + ", ".join(result["timeline"])


def test_opening_and_paging_a_long_conversation_never_stalls(tmp_path, data_dir, int4_dir):
    def check(result):
        page = 8
        assert result["first_page"] == list(range(120 - page, 120))  # opens on its newest messages
        assert result["earlier_text"] == f"Show {120 - page} earlier messages"
        assert result["after_scroll"][:2] == [120 - 2 * page, 120 - 2 * page + 1]  # scrolling up brought a page
        assert result["scroll_value"] > 0 and abs(result["moved_on_screen"]) <= 2  # without moving what was on screen
        assert result["all"] == list(range(120)) and not result["earlier_visible"]

    result = least_stalled_run(tmp_path, lambda folder: run_scenario("long_conversation", folder, data_dir), check)
    assert result["max_stall_ms"] < MAX_STALL_MS, result["all_summaries"]


def test_model_loads_off_the_gui_thread_with_a_busy_indicator(tmp_path, data_dir, int4_dir):
    def check(result):
        assert result["state"] == "ready", result["error"]
        assert result["busy_seen"] and not result["busy_after"]
        assert result["seconds"] > 0.2 and result["ticks"] > 20  # the event loop kept running during the load
        # the engine calls that hold the GIL (openvino-genai's Tokenizer constructor) ran before the event loop
        # started, none while the model loaded (times are seconds from the start of the load)
        calls = result["engine_calls"]
        assert len(calls.get("Tokenizer", [])) == 1, calls
        assert all(end < 0 for spans in calls.values() for _, end in spans), calls

    result = least_stalled_run(tmp_path, lambda folder: run_scenario("model_load", folder, data_dir), check)
    assert result["max_stall_ms"] < MAX_STALL_MS, result["all_summaries"]


def test_typing_keys_reach_the_composer_while_streaming(qtbot, make_window):
    from PySide6.QtCore import Qt

    window = make_window(FAST.with_values(max_new_tokens=48))
    window.composer.set_text("List ten animals.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.composer.submit()
        qtbot.keyClicks(window.composer.edit, "hello")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.composer.text() == "hello\n"
