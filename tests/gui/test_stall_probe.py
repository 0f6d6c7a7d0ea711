"""The stall probe names the thread that held the GIL through a stall: the failure message of a responsiveness
test on a slower CPU then says which call to move off the GIL, not only that the GUI thread was "blocked"."""

from __future__ import annotations

import sys
import threading
import time

from app.gui.stall_probe import StallProbe, other_threads_now


def hold_the_gil(stop: threading.Event, started: threading.Event, seconds: float = 3.0) -> None:
    """Pure Python work until ``stop`` (or ``seconds``): with a long switch interval it keeps the GIL from every
    other thread, ~SWITCH_S at a time."""
    started.set()
    end = time.perf_counter() + seconds
    while not stop.is_set() and time.perf_counter() < end:
        pass


SWITCH_S = 0.12


def _named(probe: StallProbe) -> list:
    return [stall for stall in probe.stalls if any(other.startswith("holder: hold_the_gil (test_stall_probe.py:")
                                                   for other in stall.others)]


def test_a_stall_names_the_thread_that_held_the_gil(qtbot):
    """The holder runs until a stall has named it (other threads of a long test session may take the GIL between
    its turns, so the GUI thread may wait more than one of them)."""
    probe = StallProbe()
    started, stop = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_the_gil, args=(stop, started), name="holder")
    previous = sys.getswitchinterval()
    probe.start()
    qtbot.wait(100)
    sys.setswitchinterval(SWITCH_S)  # the holder keeps the GIL 120 ms at a time, as a C call holding it would
    try:
        holder.start()
        started.wait()
        qtbot.waitUntil(lambda: bool(_named(probe)) or not holder.is_alive(), timeout=5000)
    finally:
        stop.set()
        sys.setswitchinterval(previous)
        holder.join()
        probe.stop()
    named = _named(probe)
    assert named, probe.summary()
    assert all(stall.stall_ms >= 0.8 * SWITCH_S * 1e3 and stall.blocked_ms >= 0.5 * stall.stall_ms for stall in named), \
        probe.summary()
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
