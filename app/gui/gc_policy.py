"""Python's cyclic garbage collector in the Qt app: it runs on the GUI thread only, and skips long-lived objects.

CPython runs a cyclic collection in whichever thread happens to cross the allocation threshold. In SpecChat
that is often a worker thread (the inference thread decoding, a Models-dialog download importing
huggingface_hub), and a collection there finalizes every garbage cycle of the process from that thread, Qt
objects and their Python wrappers included, although Qt objects may only be destroyed by the thread that owns
them (Qt docs, "Threads and QObjects"). The test suite once crashed that way: a segmentation fault inside
"Garbage-collecting" on a Models-dialog download thread (PySide6 6.12.0, CI).

:func:`collect_on_gui_thread` turns automatic collection off and collects from a timer on the GUI thread
instead (pyqtgraph's ``GarbageCollector``; the pattern of calibre and pyqtgraph). Reference counting still frees
everything that is not in a cycle at once, in any thread; only cycles wait for a collection on the GUI thread.
"""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector

#: How often the GUI thread checks the collector's counters (seconds). Each tick collects the generations whose
#: counters are above their thresholds (``gc.get_threshold()``) at that moment; a threshold crossed only briefly
#: between two ticks (objects allocated and freed again) collects nothing, where CPython would have collected.
COLLECT_INTERVAL_S = 0.5


def collect_on_gui_thread(interval_s: float = COLLECT_INTERVAL_S) -> GarbageCollector:
    """Disable automatic cyclic collection; collect from a QTimer on the calling (GUI) thread instead.

    Call it on the GUI thread once a QApplication exists, and keep the returned object alive (it owns the timer).
    The timer only fires while the Qt event loop runs.

    Args:
        interval_s: seconds between checks of the generation counters.

    Returns:
        the collector; :func:`restore_automatic_collection` undoes this.
    """
    return GarbageCollector(interval=interval_s)


def restore_automatic_collection(collector: GarbageCollector) -> None:
    """Stop ``collector``'s timer and turn CPython's automatic collection back on."""
    collector.timer.stop()
    gc.enable()


def freeze_startup_objects() -> None:
    """Exclude every object alive now from Python's cyclic garbage collector (``gc.freeze``).

    Modules, widgets and loaded models live as long as the app; rescanning them (about 100,000 objects) made
    each full collection pause the GUI thread for ~70 ms (measured), and young collections for 6-8 ms. Objects
    created later are collected as usual. The youngest generation is collected first, so that garbage waiting for
    the collector's next tick is freed rather than frozen for good. The middle one holds what survived earlier
    ticks: collecting it too, after a model load, took 0.8-5.3 ms of the GUI thread (1,100-11,000 objects; 12.9 ms
    once on a busy machine) and found no garbage in 7 loads (default model, this Xeon, quiet), so it is frozen as is.
    """
    gc.collect(0)
    gc.freeze()
