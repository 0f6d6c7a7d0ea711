"""Cyclic garbage is finalized on the GUI thread, never on a worker thread that happens to allocate (app.gc_policy).

A worker thread that allocates enough container objects crosses CPython's generation-0 threshold and would run
the collection itself, finalizing every garbage cycle of the process there, Qt objects included.
"""

from __future__ import annotations

import gc
import threading

from app.gui.gc_policy import collect_on_gui_thread, freeze_startup_objects, restore_automatic_collection

WORKER_ALLOCATIONS = 100_000  # containers: far above the generation-0 threshold (700)
#: 20,000 garbage containers: generation 0 stays far above its threshold even if an earlier test's objects (whose
#: frees lower the count) are released meanwhile, so the GUI thread's next check collects it.
GUI_CYCLES = 10_000


class _Finalized:
    """Half of a reference cycle that records which thread finalized it."""

    def __init__(self, finalized_on: list[int]) -> None:
        self.finalized_on = finalized_on
        self.partner = {"back": self}

    def __del__(self) -> None:
        self.finalized_on.append(threading.get_ident())


def _allocate_in_a_worker_thread() -> int:
    """Allocate WORKER_ALLOCATIONS short-lived lists in a new thread; returns that thread's ident."""
    idents: list[int] = []

    def allocate() -> None:
        idents.append(threading.get_ident())
        kept = [[index] for index in range(WORKER_ALLOCATIONS)]
        del kept

    thread = threading.Thread(target=allocate)
    thread.start()
    thread.join()
    return idents[0]


def _garbage_cycle(finalized_on: list[int], cycles: int = 1) -> None:
    """Make ``cycles`` unreachable reference cycles, freed only by a cyclic collection."""
    gc.collect()  # generation counters at zero: one cycle (2 objects) cannot trigger a collection on this thread
    for _ in range(cycles):
        _Finalized(finalized_on)


def test_without_the_policy_a_worker_thread_finalizes_the_gui_threads_garbage():
    """The hazard itself (why the policy exists): CPython collects in the thread that crosses the threshold."""
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        finalized_on: list[int] = []
        _garbage_cycle(finalized_on)
        worker = _allocate_in_a_worker_thread()
        assert finalized_on == [worker]
    finally:
        if not was_enabled:
            gc.disable()


def test_with_the_policy_cycles_are_finalized_on_the_gui_thread(qtbot):
    collector = collect_on_gui_thread(interval_s=0.05)
    try:
        assert not gc.isenabled()
        finalized_on: list[int] = []
        _garbage_cycle(finalized_on, cycles=GUI_CYCLES)
        _allocate_in_a_worker_thread()
        assert finalized_on == []  # the worker's allocations collected nothing
        # The next tick of the collector's timer sees generation 0 above its threshold and collects it.
        qtbot.waitUntil(lambda: len(finalized_on) == GUI_CYCLES, timeout=5_000)
        assert set(finalized_on) == {threading.get_ident()} == {threading.main_thread().ident}
    finally:
        restore_automatic_collection(collector)
    assert gc.isenabled()


def test_freezing_frees_the_youngest_garbage_and_freezes_the_middle_generation_unscanned():
    """``freeze_startup_objects`` (after each model load, on the GUI thread) frees the garbage made since the
    collector's last tick, and freezes what survived earlier ticks without scanning it: that scan took up to 5.3 ms
    of the GUI thread after a load (12.9 ms once) and found no garbage (gc_policy)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        older: list[int] = []
        survivor = _Finalized(older)  # a cycle still reachable: a young collection moves it to the middle generation
        gc.collect(0)
        del survivor  # garbage now, in the middle generation
        young: list[int] = []
        _Finalized(young)  # garbage in the youngest generation
        freeze_startup_objects()
        assert young == [threading.get_ident()] and older == []
        assert gc.get_objects(1) == [] and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.collect()
        if was_enabled:
            gc.enable()
    assert len(older) == 1  # frozen, not lost: collected once unfrozen
