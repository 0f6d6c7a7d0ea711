"""Large request bodies read off the event loop: a body over :data:`INLINE_BODY_BYTES` is parsed and validated
(``request_common.parse``) and mapped to an engine request in a worker thread, so that one client's 4 MiB of JSON does
not stall the other clients' streams.

What a body costs is bounded by its size (``app.MAX_BODY_BYTES``, a 413 past it), not by a timer: a parse cannot be
stopped midway, and the largest body takes about 1.5 s of CPU at worst (measured on 2 loaded cores: 4 MiB of
two-element lists, 0.36 s in ``json.loads``, 1 s in the nesting check; a 1.9 MB request of 10,000 tools 0.14 s).
Most of that is Python bytecode, which gives the interpreter's lock to the event loop every 5 ms; ``json.loads``
holds it throughout (a tenth of the worst body's time), and is the stall left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic import BaseModel

from app.backends.worker import lower_thread_priority

from .grammars import GRAMMAR_NICE
from .request_common import parse

#: Bodies up to this size are read on the event loop (a 64 KiB chat request parses in under 2 ms), larger ones in
#: the thread.
INLINE_BODY_BYTES = 64 * 1024

T = TypeVar("T")


class BodyReader:
    """Parses and maps request bodies, in one worker thread (niced as the grammar compiles) when they are large."""

    def __init__(self, inline_bytes: int = INLINE_BODY_BYTES):
        self.inline_bytes = inline_bytes
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="specchat-body", initializer=lower_thread_priority,
                                            initargs=(GRAMMAR_NICE,))

    async def parse(self, model: type[BaseModel], body: bytes) -> Any:
        """``request_common.parse(model, body)``, in the thread when ``body`` is over ``inline_bytes``.

        Raises:
            APIError: as ``request_common.parse``.
        """
        return await self.call(lambda: parse(model, body), len(body))

    async def call(self, work: Callable[[], T], size: int) -> T:
        """``work()`` (a request's mapping), in the thread when its body (``size`` bytes) is over ``inline_bytes``.

        Raises:
            whatever ``work`` raises.
        """
        if size <= self.inline_bytes:
            return work()
        return await asyncio.wrap_future(self._executor.submit(work))
