"""The stall probe names the thread that held the GIL through a stall: the failure message of a responsiveness
test on a slower CPU then says which call to move off the GIL, not only that the GUI thread was "blocked"."""

from __future__ import annotations

import sys
import threading
import time

from app.gui.stall_probe import StallProbe, other_threads_now


def hold_the_gil(seconds: float, started: threading.Event) -> None:
    """Pure Python work: with a long switch interval it keeps the GIL from every other thread."""
    started.set()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_stall_names_the_thread_that_held_the_gil(qtbot):
    probe = StallProbe()
    started = threading.Event()
    holder = threading.Thread(target=hold_the_gil, args=(0.3, started), name="holder")
    previous = sys.getswitchinterval()
    probe.start()
    qtbot.wait(100)
    sys.setswitchinterval(0.12)  # the holder keeps the GIL 120 ms at a time, as a C call holding it would
    try:
        holder.start()
        started.wait()
        qtbot.waitUntil(lambda: not holder.is_alive(), timeout=5000)
        qtbot.wait(50)
    finally:
        sys.setswitchinterval(previous)
        probe.stop()
    held = [stall for stall in probe.stalls if stall.stall_ms >= 80]
    assert held, probe.summary()
    assert all(stall.blocked_ms >= 0.5 * stall.stall_ms for stall in held), probe.summary()
    assert any(any(other.startswith("holder: hold_the_gil (test_stall_probe.py:") for other in stall.others)
               for stall in held), probe.summary()
    assert "other threads: holder: hold_the_gil" in probe.summary()


def test_threads_that_only_wait_are_left_out():
    ready, release = threading.Event(), threading.Event()

    def waits():
        ready.set()
        release.wait()

    waiter = threading.Thread(target=waits, name="waiter")
    waiter.start()
    ready.wait()
    try:
        time.sleep(0.05)  # inside release.wait() by now
        assert not any(other.startswith("waiter:") for other in other_threads_now())
    finally:
        release.set()
        waiter.join()
