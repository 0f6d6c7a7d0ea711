"""The window never freezes: a timer probe measures the Qt event loop's longest stall while a real reply streams
(and the user types, scrolls, resizes and switches conversations), while a long conversation opens, and while the
model loads. Each scenario runs the real application in a fresh process (tests/gui/stall_driver.py), so earlier
tests' windows and objects are not measured; the probe splits every stall into the GUI thread's own CPU time,
time waiting for a CPU and time blocked, and names where the other threads were when the GUI thread ran again
(app/gui/stall_probe.py).

Timing varies from run to run on the 2-core CI machines (another process keeping every core busy shows as "waiting
for a CPU" in the failure message), so each scenario runs ``RUNS`` times and at least ``MUST_PASS`` of them must stay
under ``MAX_STALL_MS``: a freeze in half the runs fails ``1 - P(X >= 4 | X ~ Binomial(5, 0.5))`` = 81% of the time
(it passed 97% of the time when one run in five sufficed), and noise that strikes one run in five passes. A control
scenario puts a known 100 ms block on the GUI thread while a reply streams: the probe must catch it, so a probe that
sees nothing cannot pass for a window that never freezes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAST

from app.gui.settings_store import SettingsStore

pytestmark = pytest.mark.serial  # GUI stall limits: alone on the machine (make test's serial phase)

DRIVER = Path(__file__).with_name("stall_driver.py")
MAX_STALL_MS = 50.0
RUNS = 5
MUST_PASS = 4


def run_scenario(name: str, tmp_path: Path, data_dir: Path, settings=FAST, env_extra=None) -> dict:
    SettingsStore(tmp_path / "settings.json").save(settings)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECCHAT_DATA_DIR": str(data_dir), **(env_extra or {})}
    result = subprocess.run(
        [sys.executable, str(DRIVER), name, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, f"driver failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def runs_under_the_limit(tmp_path: Path, scenario, check) -> dict:
    """Run ``scenario(folder)`` up to RUNS times (each in a fresh folder; ``check(result)`` asserts what every run
    must do) and assert that at least MUST_PASS of them stayed under MAX_STALL_MS. It stops as soon as the verdict is
    known: after MUST_PASS runs under the limit (the rest could not fail it: the verdict is the one all RUNS would give,
    a fifth of the runs sooner where the first MUST_PASS pass) or after more than RUNS - MUST_PASS over it (the rest
    could not pass it). Returns the median run, with every run's summary under ``all_summaries``."""
    runs = []
    for index in range(RUNS):
        folder = tmp_path / f"run-{index + 1}"
        folder.mkdir()
        result = scenario(folder)
        check(result)
        runs.append(result)
        if sum(run["max_stall_ms"] >= MAX_STALL_MS for run in runs) > RUNS - MUST_PASS:
            break  # it cannot pass any more
        if sum(run["max_stall_ms"] < MAX_STALL_MS for run in runs) >= MUST_PASS:
            break  # it has passed, whatever the other runs give
    ordered = sorted(runs, key=lambda run: run["max_stall_ms"])
    median = ordered[len(ordered) // 2]
    summaries = "\n".join(
        f"run {i + 1} (GUI CPU at most {run['max_gui_cpu_ms']:.0f} ms in one stall): {run['summary']}" for i, run in enumerate(runs)
    )
    passed = sum(run["max_stall_ms"] < MAX_STALL_MS for run in runs)
    assert passed >= MUST_PASS, f"{passed} of {len(runs)} runs under {MAX_STALL_MS:.0f} ms (need {MUST_PASS})\n{summaries}"
    median["all_summaries"] = summaries
    return median


def test_no_stall_while_a_reply_streams_and_the_user_works(tmp_path, data_dir, int4_dir):
    def check(result):
        # the user really did all that while the reply streamed, and it all took effect
        assert result["steps"] == ["type"] * 23 + ["scroll"] * 4 + ["resize"] * 3 + [
            "switch", "scroll", "earlier", "scroll", "switch", "stop"
        ], result["timeline"]  # fmt: skip
        assert result["typed"] == "typing while it streams"
        streamed = result["streamed_at_keys"]  # the reply's length when each key was typed: it streamed meanwhile
        assert min(streamed) >= 0 and streamed[-1] > streamed[0], streamed
        assert result["state"] == "stopped" and result["content"]
        assert result["shown_conversation"] and result["shown_content"] == result["content"]  # switched back, whole
        assert result["ticks"] > 100

    settings = FAST.with_values(max_new_tokens=1000)
    runs_under_the_limit(tmp_path, lambda folder: run_scenario("streaming", folder, data_dir, settings), check)


def test_the_probe_catches_a_known_block_of_the_gui_thread(tmp_path, data_dir, int4_dir):
    result = run_scenario("blocked", tmp_path, data_dir, FAST.with_values(max_new_tokens=1000))
    block = result["block_ms"]
    assert result["max_stall_ms"] >= 0.95 * block, result["summary"]  # caught, at its length...
    assert any(stall >= 0.95 * block and blocked >= 0.5 * block for stall, blocked in result["stalls"]), result["summary"]
    # ...and told apart: most of it the GUI thread could not run (it slept); it neither computed nor waited for a CPU
    # (a loaded machine's scheduler books part of the wake-up as waiting for a CPU: 71 of 134 ms were "blocked" at
    # load 10 on 2 cores)


def test_opening_and_paging_a_long_conversation_never_stalls(tmp_path, data_dir, int4_dir):
    def check(result):
        page = 8
        assert result["first_page"] == list(range(120 - page, 120))  # opens on its newest messages
        assert result["earlier_text"] == f"Show {120 - page} earlier messages"
        assert result["after_scroll"][:2] == [120 - 2 * page, 120 - 2 * page + 1]  # scrolling up brought a page
        assert result["scroll_value"] > 0 and abs(result["moved_on_screen"]) <= 2  # without moving what was on screen
        assert result["all"] == list(range(120)) and not result["earlier_visible"]

    runs_under_the_limit(tmp_path, lambda folder: run_scenario("long_conversation", folder, data_dir), check)


def test_model_loads_off_the_gui_thread_with_a_busy_indicator(tmp_path, data_dir, int4_dir):
    def check(result):
        assert result["state"] == "ready", result["error"]
        assert result["busy_seen"] and not result["busy_after"]
        assert result["seconds"] > 0.2 and result["ticks"] > 20  # the event loop kept running during the load
        # the engine calls that hold the GIL (openvino-genai's Tokenizer constructor, decoding the vocabulary for the
        # fingerprint a draft head's check compares) ran before the event loop started, none while the model loaded
        # (times are seconds from the start of the load)
        calls = result["engine_calls"]
        assert len(calls.get("Tokenizer", [])) == 1, calls
        assert len(calls.get("vocabulary_fingerprint", [])) == 1, calls
        assert all(end < 0 for spans in calls.values() for _, end in spans), calls

    runs_under_the_limit(tmp_path, lambda folder: run_scenario("model_load", folder, data_dir), check)


def test_typing_keys_reach_the_composer_while_streaming(qtbot, make_window):
    from PySide6.QtCore import Qt

    window = make_window(FAST.with_values(max_new_tokens=48))
    window.composer.set_text("List ten animals.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        window.composer.submit()
        qtbot.keyClicks(window.composer.edit, "hello")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert window.composer.text() == "hello\n"
