"""Work-around for a reference-counting bug of PySide6 6.12.0.

PySide6 6.12.0 returns ``None`` (from every void method and slot call) and ``True`` (from
``SignalInstance.emit()``) without taking a new reference, so each such call removes one reference from the
singleton. On Python < 3.12, where ``None``/``True`` are ordinary objects, CPython frees one of them after a
few thousand calls and aborts with "Fatal Python error: none_dealloc" (or ``bool_dealloc``): mid-session in a
long chat, or at exit. PySide6 6.11.3 and earlier are not affected; on Python 3.12+ the singletons are immortal.

:func:`protect_singletons` detects the leak and gives each leaking singleton 2^40 extra references: they are
never freed anyway, so this only keeps the stolen references from reaching zero.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

_PROBE_CALLS = 64
_EXTRA_REFERENCES = 1 << 40


class _Probe(QObject):
    fired = Signal()


def leaking_singletons() -> list[str]:
    """Names of the singletons (``None``, ``True``, ``False``) that Qt calls from Python lose references of."""
    probe = _Probe()
    singletons = {"None": None, "True": True, "False": False}
    before = {name: sys.getrefcount(value) for name, value in singletons.items()}
    for _ in range(_PROBE_CALLS):
        probe.fired.emit()  # returns True
        probe.setObjectName("probe")  # returns None
        probe.signalsBlocked()  # returns False
    after = {name: sys.getrefcount(value) for name, value in singletons.items()}
    return [name for name in singletons if before[name] - after[name] >= _PROBE_CALLS // 2]


def protect_singletons() -> list[str]:
    """Apply the work-around where needed; returns the names of the singletons it protected."""
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return []
    leaking = leaking_singletons()
    for name in leaking:
        value = {"None": None, "True": True, "False": False}[name]
        ctypes.c_ssize_t.from_address(id(value)).value += _EXTRA_REFERENCES
    return leaking
