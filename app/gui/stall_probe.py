"""A timer probe that measures how long the Qt event loop fails to respond (its "stall"), and why."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _run_queue_ns() -> int | None:
    """Nanoseconds the calling thread has spent runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        return int(_SCHEDSTAT.read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Stall:
    """One late tick.

    Attributes:
        at_s: seconds since the probe started; stall_ms: how late the tick was.
        cpu_ms: CPU time the GUI thread used meanwhile (its own work: layout, painting, Python code).
        wait_cpu_ms: time it was ready to run but waited for a CPU (other threads or processes had them all);
            None where the platform does not say.
        blocked_ms: the rest: time it could not run at all, e.g. waiting for the GIL held by another thread.
        others: where every other Python thread was when the GUI thread ran again, innermost frame first
            (``"function (file:line) < caller (file:line)"``). A thread that held the GIL through the stall has
            just let it go, so its line names the call that held it (measured: ``read_model`` in the model
            loader's thread).
    """

    at_s: float
    stall_ms: float
    cpu_ms: float
    wait_cpu_ms: float | None
    others: tuple[str, ...] = ()

    @property
    def blocked_ms(self) -> float:
        """Stall time neither spent computing nor waiting for a CPU."""
        return max(0.0, self.stall_ms - self.cpu_ms - (self.wait_cpu_ms or 0.0))

    def __str__(self) -> str:
        wait = "?" if self.wait_cpu_ms is None else f"{self.wait_cpu_ms:.0f}"
        where = f"; other threads: {' | '.join(self.others)}" if self.others else ""
        return (
            f"{self.stall_ms:.0f} ms at {self.at_s:.2f} s (GUI CPU {self.cpu_ms:.0f}, waiting for a CPU {wait}, "
            f"blocked {self.blocked_ms:.0f}{where})"
        )


def other_threads_now(depth: int = 2) -> tuple[str, ...]:
    """Where each Python thread other than the caller is, ``depth`` frames each, innermost first.

    Threads waiting on a queue or a lock are left out: they cannot have held the GIL. Returns () where the
    interpreter gives no frames.
    """
    caller = threading.get_ident()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = []
    for ident, frame in sys._current_frames().items():
        if ident == caller:
            continue
        calls = []
        while frame is not None and len(calls) < depth:
            code = frame.f_code
            calls.append(f"{code.co_name} ({Path(code.co_filename).name}:{frame.f_lineno})")
            frame = frame.f_back
        if calls and not calls[0].startswith(_IDLE):
            found.append(f"{names.get(ident, ident)}: " + " < ".join(calls))
    return tuple(found)


# Innermost calls of a thread that is only waiting (a worker on its queue, a lock, a selector).
_IDLE = ("wait (threading.py", "get (queue.py", "_worker (thread.py", "select (selectors.py")


class StallProbe(QObject):
    """Runs a precise ``interval_ms`` timer and records how late each tick comes.

    A tick due every 5 ms that arrives 80 ms after the previous one means the event loop could not run for
    about 75 ms: nothing was repainted and no input was handled in that time. Each stall is split into the GUI
    thread's own CPU time, time spent waiting for a CPU, and time blocked (see :class:`Stall`).

    Attributes:
        max_stall_ms: the longest stall seen since :meth:`start` (or :meth:`reset`).
        stalls: every :class:`Stall` above ``record_above_ms``, in order.
        ticks: number of ticks seen.
    """

    def __init__(self, interval_ms: int = 5, record_above_ms: float = 20.0, parent: QObject | None = None):
        super().__init__(parent)
        self.interval_ms = interval_ms
        self.record_above_ms = record_above_ms
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self.reset()

    def reset(self) -> None:
        """Forget what was measured so far."""
        self.max_stall_ms = 0.0
        self.stalls: list[Stall] = []
        self.ticks = 0
        self._start = self._last = time.perf_counter()
        self._last_cpu = time.thread_time()
        self._last_wait = _run_queue_ns()

    def start(self) -> None:
        """Start measuring (resets)."""
        self.reset()
        self._timer.start()

    def stop(self) -> None:
        """Stop measuring (the numbers stay)."""
        self._timer.stop()

    @property
    def running(self) -> bool:
        """True while measuring."""
        return self._timer.isActive()

    @property
    def started_at(self) -> float:
        """``time.perf_counter()`` when measuring started (``Stall.at_s`` counts from it)."""
        return self._start

    def summary(self) -> str:
        """The longest stall and every recorded one, for messages."""
        return f"longest stall {self.max_stall_ms:.0f} ms; stalls over {self.record_above_ms:.0f} ms: " + "; ".join(
            map(str, self.stalls)
        )

    def _tick(self) -> None:
        now = time.perf_counter()
        cpu = time.thread_time()
        wait = _run_queue_ns()
        stall = (now - self._last) * 1e3 - self.interval_ms
        if stall > self.record_above_ms:
            waited = None if wait is None or self._last_wait is None else (wait - self._last_wait) / 1e6
            self.stalls.append(Stall(now - self._start, stall, (cpu - self._last_cpu) * 1e3, waited, other_threads_now()))
        self.max_stall_ms = max(self.max_stall_ms, stall)
        self._last, self._last_cpu, self._last_wait = now, cpu, wait
        self.ticks += 1
