"""The stall probe names the thread that held the GIL through a stall: the failure message of a responsiveness
test on a slower CPU then says which call to move off the GIL, not only that the GUI thread was "blocked"."""

from __future__ import annotations

import threading
import time

import pytest

from app.gui.stall_probe import StallProbe, other_threads_now

pytestmark = pytest.mark.serial  # GUI stall limits: alone on the machine (make test's serial phase)


def hold_then_linger(lock: threading.Lock, held: threading.Event, done: list[bool]) -> None:
    """Hold ``lock`` 150 ms, then linger in a function of its own until ``done[0]`` (a list, not an Event: the
    linger loop calls no Python function, so its frame is the innermost)."""
    with lock:
        held.set()
        time.sleep(0.15)
    linger(done)


def linger(done: list[bool]) -> None:
    while not done[0]:
        time.sleep(0.01)


def test_a_stall_names_where_the_thread_that_blocked_it_went_on(qtbot):
    """The GUI thread waits 150 ms for what another thread holds (a lock here; the GIL in the stalls the responsiveness
    tests look for: a GIL held through a C call is let go as the call returns): the stall names the other thread at
    the place it went on to. (A test holding the GIL itself failed in the full session: other threads took the GIL
    between the holder's turns and the GUI thread waited out the whole holder.)"""
    probe = StallProbe()
    lock, held, done = threading.Lock(), threading.Event(), [False]
    holder = threading.Thread(target=hold_then_linger, args=(lock, held, done), name="holder")
    probe.start()
    qtbot.wait(100)
    holder.start()
    held.wait()
    try:
        with lock:  # the GUI thread blocks here until the holder lets go
            pass
        qtbot.wait(50)
    finally:
        done[0] = True
        holder.join()
        probe.stop()
    stall = max(probe.stalls, key=lambda s: s.stall_ms, default=None)
    assert stall is not None and stall.stall_ms >= 100 and stall.blocked_ms >= 0.5 * stall.stall_ms, probe.summary()
    assert any(other.startswith("holder: linger (test_stall_probe.py:") for other in stall.others), probe.summary()
    assert "other threads: holder: linger" in probe.summary()


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
