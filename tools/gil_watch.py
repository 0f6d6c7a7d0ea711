"""Which call holds Python's GIL, and for how long: one responsiveness scenario of tests/gui/stall_driver.py run with
a GIL watchdog and every thread's C calls timed.

    .venv/bin/python tools/gil_watch.py SCENARIO WORKDIR [--max-new-tokens N] [--top N]

SCENARIO is one of stall_driver's (``streaming``, ``model_load``, ...); WORKDIR an empty folder (the history and a
settings.json with the tests' greedy settings are written there unless one is present; SPECCHAT_DATA_DIR says where
the models are, as for the tests). Prints stall_driver's ``RESULT <json>`` line, then a table of the GIL holders over
the interval the scenario's stall probe measured, and one line ``GIL <json>`` (``GilReport.as_dict``).

Why: the window's stall tests failed on an AVX2-only CPU about 3x slower per token than this machine, with the GUI
thread "blocked" (neither computing nor waiting for a CPU). A C call that does not release the GIL holds every other
Python thread for its whole length, so a call holding it 15 ms here holds it about 45 ms there.

How (a GIL watchdog, as gilknocker measures GIL contention: a thread that keeps asking for the GIL and times its
waits; here in pure Python):

- a watchdog thread sleeps ``interval_s`` (1 ms) in a loop; a wake-up later than ``late_s`` (3 ms, past the two
  1 ms switch intervals its loop may wait for the GIL behind Python code) means it could not take the GIL back, or
  could not get a CPU: its run-queue time (Linux schedstat) over the sleep tells the two apart, and the rest is the
  time it was blocked;
- ``sys.setprofile`` (``threading.setprofile`` for threads started later) times every C call of every other thread
  (``c_call`` to ``c_return``/``c_exception``; types' constructors and ufuncs are called without these events);
- each late wake-up is put down to the timed C call of another thread that returned during it and overlaps it
  most, or, where no such call overlaps half of it, to the Python line each busy thread stood at when the watchdog
  ran again (the holder has just let the GIL go: app/gui/stall_probe.py's ``other_threads_now``).

The profiler slows the threads' Python code (a callback per C call); the C calls' own durations are unchanged.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DRIVER_DIR = REPO / "tests" / "gui"
_SCHEDSTAT = Path("/proc/thread-self/schedstat")
#: How long after the watchdog's wake-up a holder's return may be timed (seconds): the holder gets the GIL back once
#: the watchdog sleeps again or has held it for the 1 ms switch interval (see ``GilWatch._overlapping_call``).
RETURN_SLACK_S = 0.005


def _run_queue_s(schedstat: int | None) -> float | None:
    """Seconds the thread whose ``/proc/thread-self/schedstat`` is open as ``schedstat`` (a file descriptor) has
    waited for a CPU while runnable, or None (no such file). One ``os.pread``: the GIL is let go and taken back once."""
    if schedstat is None:
        return None
    try:
        return int(os.pread(schedstat, 128, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def call_name(function) -> str:
    """What the profiler hands over as a C call, named: ``module.function`` (``builtins.sum``), or
    ``module.Type.method`` for a bound method (``numpy.ndarray.copy``), ``module.method`` for pybind11's
    (``openvino._pyopenvino.infer``)."""
    owner = getattr(function, "__self__", None)
    name = getattr(function, "__name__", "?")
    if owner is None or isinstance(owner, types.ModuleType) or type(owner).__module__ == "pybind11_builtins":
        # (a pybind11 function's __self__ is its record, not the object: its module names it best)
        return f"{getattr(function, '__module__', None) or getattr(owner, '__name__', '?')}.{name}"
    kind = owner if isinstance(owner, type) else type(owner)
    return f"{kind.__module__}.{kind.__qualname__}.{name}"


@dataclass(frozen=True)
class CCall:
    """One timed C call: ``thread`` (its name), ``name`` (``call_name``), ``caller`` (the Python function and line
    that made it: ``"function (file:line)"``), ``start_s``/``end_s`` (``time.perf_counter()`` seconds), ``leaf``
    (no Python code ran inside it, e.g. a Qt signal's slots: it held the GIL throughout, or let it go to wait or
    compute)."""

    thread: str
    name: str
    caller: str
    start_s: float
    end_s: float
    leaf: bool

    @property
    def ms(self) -> float:
        """Its duration (milliseconds)."""
        return (self.end_s - self.start_s) * 1e3


@dataclass(frozen=True)
class LateWake:
    """One late wake-up of the watchdog: due at ``due_s``, woke at ``woke_s`` (perf_counter seconds); ``wait_cpu_ms``
    of the lateness it was runnable but had no CPU (None where the platform does not say); ``others``: where the
    other busy Python threads stood when it ran again (``other_threads_now``)."""

    due_s: float
    woke_s: float
    wait_cpu_ms: float | None
    others: tuple[str, ...]

    @property
    def late_ms(self) -> float:
        """How late it woke (milliseconds)."""
        return (self.woke_s - self.due_s) * 1e3

    @property
    def blocked_ms(self) -> float:
        """Lateness neither spent waiting for a CPU: waiting for the GIL (milliseconds)."""
        return max(0.0, self.late_ms - (self.wait_cpu_ms or 0.0))


@dataclass
class Holder:
    """Everything put down to one call site: ``key`` (``"thread: name < caller"``, or ``"at: <frames>"`` for a
    Python line), ``wakes`` (late wake-ups attributed), ``max_blocked_ms`` (the longest of them, blocked part),
    ``total_blocked_ms``, ``max_call_ms`` (the longest timed call of it among those, 0 for a Python line)."""

    key: str
    wakes: int = 0
    max_blocked_ms: float = 0.0
    total_blocked_ms: float = 0.0
    max_call_ms: float = 0.0

    def add(self, wake: LateWake, call: CCall | None) -> None:
        """Count ``wake`` (and the ``call`` it was put down to) here."""
        self.wakes += 1
        self.max_blocked_ms = max(self.max_blocked_ms, wake.blocked_ms)
        self.total_blocked_ms += wake.blocked_ms
        if call is not None:
            self.max_call_ms = max(self.max_call_ms, call.ms)


@dataclass
class GilReport:
    """The GIL holders over one interval, longest hold first (``holders``), with the watchdog's ``wakes`` (count of
    wake-ups), ``late`` (late ones), the interval's ``seconds`` and ``most_blocked_window`` (the most time blocked in
    one window of ``GilWatch.window_s``, milliseconds, and when it ended, seconds from the interval's start) with its
    ``window_holders`` (the holders of its late wake-ups)."""

    seconds: float
    wakes: int
    late: list[LateWake]
    holders: list[Holder]
    most_blocked_window: tuple[float, float]
    window_holders: list[Holder]

    def as_dict(self, top: int = 15) -> dict:
        """JSON-ready: the ``top`` holders (``key``, ``wakes``, ``max_blocked_ms``, ``total_blocked_ms``,
        ``max_call_ms``), ``late_wakes``, ``max_blocked_ms`` (the longest blocked wake-up, any cause),
        ``window_blocked_ms`` (``most_blocked_window``'s time), ``window_holders`` (its ``top``), ``seconds``."""
        return {
            "seconds": self.seconds,
            "wakes": self.wakes,
            "late_wakes": len(self.late),
            "max_blocked_ms": max((wake.blocked_ms for wake in self.late), default=0.0),
            "window_blocked_ms": self.most_blocked_window[0],
            "holders": [vars(holder) for holder in self.holders[:top]],
            "window_holders": [vars(holder) for holder in self.window_holders[:top]],
        }

    def table(self, top: int = 15) -> str:
        """The ``top`` holders as text, one a line."""
        blocked, ended = self.most_blocked_window
        lines = [f"{self.seconds:.2f} s watched, {self.wakes} wake-ups, {len(self.late)} late; holders, longest hold first:"]
        lines += _rows(self.holders[:top])
        lines.append(f"the most blocked window: {blocked:.1f} ms blocked in the one ending at {ended:.2f} s; its holders:")
        return "\n".join(lines + _rows(self.window_holders[:top]))


def _rows(holders: list[Holder]) -> list[str]:
    """``holders`` as table rows under a heading."""
    rows = [f"{'max blocked ms':>14} {'total ms':>9} {'wakes':>5} {'call ms':>8}  holder"]
    for holder in holders:
        rows.append(
            f"{holder.max_blocked_ms:14.1f} {holder.total_blocked_ms:9.1f} {holder.wakes:5d} {holder.max_call_ms:8.1f}  "
            f"{holder.key}"
        )
    return rows


class GilWatch:
    """The watchdog and the C-call profiler (see the module docstring).

    Args:
        interval_s: the watchdog's sleep (seconds); late_s: lateness past which a wake-up is recorded (seconds);
        min_call_s: C calls shorter than this are not kept (seconds); window_s: the span over which blocked time is
        summed (seconds; 50 ms, the stall tests' bound); profile_this_thread: also time the C calls of the thread
        that calls :meth:`start` (the GUI thread in a scenario: its timing then counts the profiler's work).
    """

    def __init__(self, interval_s: float = 0.001, late_s: float = 0.003, min_call_s: float = 0.001,
                 window_s: float = 0.05, profile_this_thread: bool = False):
        self.interval_s, self.late_s, self.min_call_s, self.window_s = interval_s, late_s, min_call_s, window_s
        self.profile_this_thread = profile_this_thread
        self.calls: list[CCall] = []
        self.late: list[LateWake] = []
        self.woke_s: list[float] = []  # every wake-up (perf_counter seconds)
        self.blocked_ms: list[float] = []  # each wake-up's lateness less its run-queue time (milliseconds)
        self._local = threading.local()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Time C calls of this thread (if asked) and of every thread started from now on; start the watchdog."""
        from app.gui.stall_probe import other_threads_now  # (here: imported in the watchdog, it kept it from watching)

        threading.setprofile(self._profile)
        if self.profile_this_thread:
            sys.setprofile(self._profile)
        self._thread = threading.Thread(target=self._watch, args=(other_threads_now,), name="gil-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the watchdog and the profiling of this thread and of threads started later (threads already
        started keep their profiler until they end)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        threading.setprofile(None)
        sys.setprofile(None)

    def report(self, start_s: float, end_s: float) -> GilReport:
        """The late wake-ups due in [start_s, end_s] (perf_counter seconds), each put down to a holder."""
        late = [wake for wake in self.late if start_s <= wake.due_s <= end_s]
        first, last = bisect.bisect_left(self.woke_s, start_s), bisect.bisect_right(self.woke_s, end_s)
        blocked, ended = self._most_blocked_window(first, last)
        in_window = [wake for wake in late if ended - self.window_s <= wake.woke_s <= ended]
        return GilReport(
            end_s - start_s, last - first, late, self._holders(late), (blocked, ended - start_s), self._holders(in_window)
        )

    def longest_calls(self, start_s: float, end_s: float, thread: str, count: int) -> list[CCall]:
        """The ``count`` longest timed leaf C calls of ``thread`` (by name) that overlapped [start_s, end_s], longest
        first: a thread's own waits (a file synced, a lock) as well as its holds and its computing."""
        calls = [c for c in self.calls if c.leaf and c.thread == thread and c.end_s >= start_s and c.start_s <= end_s]
        return sorted(calls, key=lambda call: -call.ms)[:count]

    def _holders(self, late: list[LateWake]) -> list[Holder]:
        """``late`` put down to their holders, longest hold first."""
        holders: dict[str, Holder] = {}
        for wake in late:
            call = self._overlapping_call(wake)
            if call is not None:
                key = f"{call.thread}: {call.name} < {call.caller}"
            else:
                key = "at: " + (" | ".join(wake.others) or "no other busy thread")
            holders.setdefault(key, Holder(key)).add(wake, call)
        return sorted(holders.values(), key=lambda holder: -holder.max_blocked_ms)

    def _most_blocked_window(self, first: int, last: int) -> tuple[float, float]:
        """The most blocked time (milliseconds) of wake-ups ``first:last`` within any ``window_s``, and when that
        window ended (perf_counter seconds): what a thread needing the GIL every ``interval_s``, as the GUI thread
        does for each Qt call, would have waited in one event of that length."""
        best, best_end, total, tail = 0.0, 0.0, 0.0, first
        for index in range(first, last):
            total += self.blocked_ms[index]
            while self.woke_s[index] - self.woke_s[tail] > self.window_s:
                total -= self.blocked_ms[tail]
                tail += 1
            if total > best:
                best, best_end = total, self.woke_s[index]
        return best, best_end

    def _overlapping_call(self, wake: LateWake) -> CCall | None:
        """The timed call that ended as the watchdog woke (a holder lets the GIL go when it returns; a call that was
        waiting itself, a ``select`` or a lock, rarely ends just then) and overlaps ``wake`` most, if it overlaps at
        least half of it. "As": up to ``RETURN_SLACK_S`` after, as the holder's profiler callback, which reads the
        end time, may itself give the GIL to the watchdog first."""
        best, best_overlap = None, 0.5 * (wake.woke_s - wake.due_s)
        for call in self.calls:
            overlap = min(call.end_s, wake.woke_s) - max(call.start_s, wake.due_s)
            if wake.due_s < call.end_s <= wake.woke_s + RETURN_SLACK_S and overlap >= best_overlap:
                best, best_overlap = call, overlap
        return best

    def _profile(self, frame, event: str, arg) -> None:
        # c_call pushes [start, leaf]; a Python call inside marks the innermost open one not a leaf; c_return or
        # c_exception pops it and keeps the call if it lasted min_call_s
        if event == "c_call":
            try:
                self._local.open.append([time.perf_counter(), True])
            except AttributeError:
                self._local.open = [[time.perf_counter(), True]]
        elif event == "call":
            calls = getattr(self._local, "open", None)
            if calls:
                calls[-1][1] = False
        elif event == "c_return" or event == "c_exception":
            end = time.perf_counter()
            calls = getattr(self._local, "open", None)
            if not calls:
                return  # its c_call came before the profiler was installed
            start, leaf = calls.pop()
            if end - start >= self.min_call_s:
                code = frame.f_code
                caller = f"{code.co_name} ({Path(code.co_filename).name}:{frame.f_lineno})"
                self.calls.append(CCall(threading.current_thread().name, call_name(arg), caller, start, end, leaf))

    def _watch(self, other_threads_now: Callable[[], tuple[str, ...]]) -> None:
        sys.setprofile(None)  # the watchdog's own calls are not timed
        # each wake-up is due one interval after the one before: a wait for the GIL anywhere in the loop counts. The
        # loop takes the GIL twice (after the sleep and after the read), so Python code holding it elsewhere, which
        # lets it go at each switch interval, makes a wake-up late by about two intervals at most
        try:
            schedstat = os.open(_SCHEDSTAT, os.O_RDONLY)
        except OSError:
            schedstat = None
        wait, woke = _run_queue_s(schedstat), time.perf_counter()
        while not self._stop.is_set():
            due = woke + self.interval_s
            time.sleep(self.interval_s)
            woke = time.perf_counter()
            waited = _run_queue_s(schedstat)
            wait_ms = None if wait is None or waited is None else (waited - wait) * 1e3
            self.woke_s.append(woke)
            self.blocked_ms.append(max(0.0, (woke - due) * 1e3 - (wait_ms or 0.0)))
            if woke - due > self.late_s:
                self.late.append(LateWake(due, woke, wait_ms, other_threads_now()))
            wait = waited
        if schedstat is not None:
            os.close(schedstat)


def watch_scenario(
    scenario: str, workdir: Path, watch: GilWatch, run_driver: Callable[[], int]
) -> tuple[GilReport, tuple[float, float]]:
    """Run ``run_driver()`` (stall_driver's ``main`` for ``scenario`` in ``workdir``) under ``watch``; the report
    covers the interval between the scenario's StallProbe ``start`` and ``stop`` (the interval its test measures),
    returned with it (perf_counter seconds)."""
    from app.gui.stall_probe import StallProbe

    measured: list[float] = []
    original_start, original_stop = StallProbe.start, StallProbe.stop

    def start(probe) -> None:
        original_start(probe)
        measured[:] = [probe.started_at]

    def stop(probe) -> None:
        original_stop(probe)
        measured.append(time.perf_counter())

    StallProbe.start, StallProbe.stop = start, stop
    sys.argv = ["stall_driver.py", scenario, str(workdir)]
    watch.start()
    try:
        status = run_driver()
    finally:
        watch.stop()
        StallProbe.start, StallProbe.stop = original_start, original_stop
    if status != 0 or len(measured) < 2:
        raise RuntimeError(f"the {scenario} scenario ended with status {status} (probe interval {measured})")
    return watch.report(measured[0], measured[-1]), (measured[0], measured[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--max-new-tokens", type=int, default=1000, help="the reply's length (as the stall tests)")
    parser.add_argument("--top", type=int, default=15, help="holders shown")
    parser.add_argument(
        "--gui-calls", type=int, default=0, metavar="N",
        help="also time the GUI thread's C calls (its own timing then counts the profiler's work) and list its N longest",
    )
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO), str(DRIVER_DIR)]
    import stall_driver

    from app.gui.sampling_presets import BUILTIN_PRESETS
    from app.gui.settings_store import AppSettings, SettingsStore

    settings_file = args.workdir / "settings.json"
    if not settings_file.exists():  # the stall tests' settings: greedy (tests/gui/conftest.py's FAST)
        preset = BUILTIN_PRESETS["Precise"]
        settings = AppSettings().with_values(max_new_tokens=args.max_new_tokens, sampling_preset="Precise", **preset)
        SettingsStore(settings_file).save(settings)
    watch = GilWatch(profile_this_thread=args.gui_calls > 0)
    report, (start, end) = watch_scenario(args.scenario, args.workdir, watch, stall_driver.main)
    print(report.table(args.top), flush=True)
    if args.gui_calls:
        print(f"the GUI thread's {args.gui_calls} longest C calls (ms, seconds from the start, caller):")
        for call in watch.longest_calls(start, end, threading.main_thread().name, args.gui_calls):
            print(f"{call.ms:8.1f} {call.start_s - start:6.2f} s  {call.name} < {call.caller}")
    print("GIL " + json.dumps(report.as_dict(args.top)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
