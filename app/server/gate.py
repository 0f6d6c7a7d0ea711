"""The server's queue: one generation at a time on the one engine, a bounded number of requests waiting."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque


class QueueFull(Exception):
    """The queue holds its maximum: answer 429.

    Attributes:
        retry_after_s: whole seconds after which a retry may find room (``Retry-After``).
    """

    def __init__(self, retry_after_s: int):
        super().__init__(f"the server is busy: {retry_after_s} s")
        self.retry_after_s = retry_after_s


class GateClosed(Exception):
    """The server is stopping: no request gets a turn any more (answer 503)."""


class GenerationGate:
    """Lets one generation run at a time; up to ``max_waiting`` more wait their turn, first come first served
    (``asyncio.Lock`` wakes its waiters in order).

    Args:
        max_waiting: requests allowed to wait while one runs (>= 0); one more is refused with :class:`QueueFull`.
    """

    def __init__(self, max_waiting: int):
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0, got {max_waiting}")
        self.max_waiting = max_waiting
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._started = 0.0
        self._durations: deque[float] = deque(maxlen=8)
        self._closed = False

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn now."""
        return self._waiting

    @property
    def busy(self) -> bool:
        """True while a generation holds the gate."""
        return self._lock.locked()

    def position(self) -> int:
        """The queue position a request arriving now would wait at (1 = next), 0 when it would get its turn at once."""
        return self._waiting + 1 if self._lock.locked() else 0

    def full(self) -> bool:
        """True when a request arriving now would be refused (:class:`QueueFull`)."""
        return self._lock.locked() and self._waiting >= self.max_waiting

    async def acquire(self, again: bool = False) -> None:
        """Wait for this request's turn (cancelling the wait leaves the queue). ``again``: a request that had a turn
        asks for its next one (a completion's next prompt), at the back of the queue like a newcomer, but never
        refused for a full queue: it was let in, and leaving it unanswered half-way would waste its first turns.

        Raises:
            QueueFull: ``max_waiting`` requests already wait (not ``again``).
            GateClosed: the gate was closed (before this call, or while it waited).
        """
        if self._closed:
            raise GateClosed()
        if self.full() and not again:
            raise QueueFull(self.retry_after_s())
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        if self._closed:  # the turn came after the server began stopping: pass it on to the next waiter
            self._lock.release()
            raise GateClosed()
        self._started = time.monotonic()

    def close(self) -> None:
        """The server is stopping: the requests waiting, and any that come later, get :class:`GateClosed` instead
        of a turn (each as the turn before it ends), so that none starts a reply nobody will wait for."""
        self._closed = True

    def release(self) -> None:
        """End this request's turn (call once per successful :meth:`acquire`)."""
        self._durations.append(time.monotonic() - self._started)
        self._lock.release()

    def retry_after_s(self) -> int:
        """Seconds until the queue has likely moved by one: the mean of the last generations' durations times the
        requests ahead, at least 1."""
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(mean * (self._waiting + 1)))
