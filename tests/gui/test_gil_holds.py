"""No call holds Python's GIL long enough to stall the window on a slower CPU (tools/gil_watch.py: a GIL watchdog
and every thread's C calls timed), while a reply streams and while the model loads.

The stall tests (test_responsiveness.py) bound the window's longest stall at 50 ms. They failed on an AVX2-only AMD
EPYC about 3x slower per token than the AMD EPYC Zen 5 they pass on, with the GUI thread "blocked". A C call that
keeps the GIL holds the GUI thread for its whole length, and on a CPU 3x slower that length is 3x: so here no hold
may last ``MAX_HOLD_MS`` = 15 ms (50 / 3 = 16.7, less a margin), whichever thread holds it (the inference thread's
C calls, types' constructors and ufuncs the profiler does not time, the GUI thread's own painting). Measured on the
Zen 5, quiet, 2 runs each: the longest hold 3.5-7.1 ms while a reply streams (the inference thread's own at most
2.9 ms, at an ``infer`` return; the rest while it was inside ``infer``, without the GIL), 4.4-4.5 ms while the model
loads (Python lines of fusion and of the vocabulary's bytes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FAST

from app.gui.settings_store import SettingsStore

TOOL = Path(__file__).resolve().parents[2] / "tools" / "gil_watch.py"
#: The longest any thread may hold the GIL here (milliseconds): see the module docstring.
MAX_HOLD_MS = 15.0


def held_gil(ms: float) -> None:
    """Hold the GIL for ``ms`` milliseconds or more in one C call (``sum`` over a range never lets it go), after
    shorter ones: each call sums twice the numbers of the one before until one lasts ``ms``."""
    count = 1_000_000
    while True:
        start = time.perf_counter()
        sum(range(count))
        if time.perf_counter() - start >= ms / 1e3:
            return
        count *= 2


def test_the_watch_names_the_call_that_held_the_gil():
    from tools.gil_watch import GilWatch

    watch = GilWatch()
    watch.start()
    start = time.perf_counter()
    holder = threading.Thread(target=held_gil, args=(80.0,), name="holder")
    time.sleep(0.05)
    holder.start()
    holder.join()
    time.sleep(0.05)
    watch.stop()
    report = watch.report(start, time.perf_counter())
    top = report.holders[0]
    assert top.key.startswith("holder: builtins.sum < held_gil (test_gil_holds.py:"), report.table()
    # the call took at least the 80 ms asked, and the watchdog waited for the GIL through much of it (on a loaded
    # machine part of the wait is its own wait for a CPU, not counted as blocked: 106 of 230 ms at load 5 on 2 cores)
    assert top.max_call_ms >= 80 and top.max_blocked_ms >= 20, report.table()
    assert report.most_blocked_window[0] >= top.max_blocked_ms, report.table()
    assert report.wakes >= 20  # the watchdog ran in the 100 ms around the hold


def gil_report(scenario: str, tmp_path: Path, data_dir: Path) -> dict:
    """Run ``scenario`` of stall_driver.py under tools/gil_watch.py (as test_responsiveness runs it) and return the
    report's ``GIL`` line."""
    SettingsStore(tmp_path / "settings.json").save(FAST.with_values(max_new_tokens=1000))
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECCHAT_DATA_DIR": str(data_dir)}
    result = subprocess.run(
        [sys.executable, str(TOOL), scenario, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("GIL ")]
    assert result.returncode == 0 and lines, f"failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(lines[-1][len("GIL "):])


@pytest.mark.serial  # late wake-ups are timed: alone on the machine (make test's serial phase)
@pytest.mark.parametrize("scenario", ["streaming", "model_load"])
def test_no_call_holds_the_gil_long_enough_to_stall_a_slower_cpu(scenario, tmp_path, data_dir, int4_dir):
    report = gil_report(scenario, tmp_path, data_dir)
    assert report["wakes"] > 0.3 * report["seconds"] / 0.001, report  # the watchdog ran all along
    assert report["max_blocked_ms"] < MAX_HOLD_MS, json.dumps(report, indent=1)  # holders named, longest first
