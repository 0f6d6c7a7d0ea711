"""Holding back streamed text that could be the start of a stop string."""

from __future__ import annotations


class StopStringFilter:
    """Streams text, cutting it before the first stop string and never emitting part of one.

    Args:
        stop_strings: strings that end generation (may be empty: then text passes through unchanged).
    """

    def __init__(self, stop_strings: tuple[str, ...]):
        self._stops = stop_strings
        self._hold = max((len(s) for s in stop_strings), default=1) - 1
        self._pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        """Add streamed text; return what is now safe to show. Sets ``stopped`` when a stop string appears."""
        if self.stopped:
            return ""
        self._pending += text
        hits = [i for i in (self._pending.find(s) for s in self._stops) if i >= 0]
        if hits:
            self.stopped = True
            out, self._pending = self._pending[: min(hits)], ""
            return out
        cut = len(self._pending) - self._hold
        if cut <= 0:
            return ""
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out

    def flush(self) -> str:
        """The held-back tail, once generation has ended without a stop string."""
        out, self._pending = self._pending, ""
        return "" if self.stopped else out
