"""Bounded grammar work for the server: a request's JSON schemas (``response_format``, tools' ``parameters``) are
compiled to llguidance grammars in worker threads, never on the event loop, within a time bound, and kept in a
bounded cache by schema.

llguidance releases the GIL while it compiles (measured: a 280 KB schema took 0.4 s and a Python thread ticking
every 5 ms meanwhile saw no gap over 16 ms), so a thread keeps the other clients' streams flowing; it runs at a lower
priority than generation. A compile past the
time bound cannot be stopped midway; its request gets a 400 at once, the thread finishes the compile (bounded by the
request's size caps, ``request_common.MAX_SCHEMA_BYTES`` and ``request_common.MAX_TOOLS``) and caches it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from app.backends.worker import lower_thread_priority
from inference.constraints import GrammarError, json_schema_grammar

from .errors import APIError

#: Longest a request's schemas may take to compile, in seconds (waiting for a compile thread included): 10 s, about
#: 20 times what the largest schema allowed (``request_common.MAX_SCHEMA_BYTES``) takes on 2 cores.
GRAMMAR_TIMEOUT_S = 10.0
#: Compiled schemas kept (grammar texts, or the error of a schema that does not compile), least recently used out.
GRAMMAR_CACHE_SIZE = 64
#: Threads that compile (a request's schemas compile in one): one, so compiles take at most a core from generation.
GRAMMAR_THREADS = 1
#: Nice value of the compile thread, above the inference thread's (``worker.INFERENCE_NICE``): a stream that is
#: generating wins the CPU over a compile (measured: at nice 0 on 2 cores, compiles beside a stream stretched its
#: longest gap between chunks from 0.14 s to 0.41 s).
GRAMMAR_NICE = 10

T = TypeVar("T")


class GrammarCompiler:
    """Compiles JSON schemas off the event loop, within ``timeout_s``, remembering the last ``cache_size``.

    Args:
        timeout_s: the time bound of one request's compile, in seconds.
        cache_size: schemas kept compiled (>= 1).
    """

    def __init__(self, timeout_s: float = GRAMMAR_TIMEOUT_S, cache_size: int = GRAMMAR_CACHE_SIZE):
        self.timeout_s = timeout_s
        self._cache_size = cache_size
        self._cache: OrderedDict[str, str | GrammarError] = OrderedDict()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(GRAMMAR_THREADS, thread_name_prefix="specchat-grammar",
                                            initializer=lower_thread_priority, initargs=(GRAMMAR_NICE,))
        self.hits = 0  # schemas answered from the cache
        self.misses = 0  # schemas compiled

    def schema_grammar(self, schema: Any) -> str:
        """``inference.constraints.json_schema_grammar(schema)``, from the cache when the same schema (the same JSON,
        keys in the same order) was compiled before; thread-safe.

        Raises:
            GrammarError: the schema does not compile (remembered too: the same schema fails again at once).
        """
        key = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.hits += 1
        if cached is None:
            try:
                cached = json_schema_grammar(schema)
            except GrammarError as error:
                cached = error
            with self._lock:
                self.misses += 1
                self._cache[key] = cached
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        if isinstance(cached, GrammarError):
            raise GrammarError(str(cached))
        return cached

    async def run(self, work: Callable[[], T], fields: str) -> T:
        """``work()`` (which compiles with :meth:`schema_grammar`) in a compile thread, awaited within the time bound.

        Args:
            work: the request's mapping to an engine request; fields: what holds the request's schemas, for the
                error (``"response_format and tools"``).

        Raises:
            APIError: 400 ``grammar_timeout`` past ``timeout_s`` (saying what to send instead); whatever ``work``
                raises.
        """
        future = asyncio.wrap_future(self._executor.submit(work))
        try:
            return await asyncio.wait_for(future, self.timeout_s)  # a compile still queued is dropped
        except asyncio.TimeoutError:
            raise APIError(
                400, f"the JSON schemas of {fields} took longer than {self.timeout_s:g} s to compile: send smaller "
                "schemas (fewer properties, alternatives and enum values) or fewer tools",
                param=fields.split(" and ")[0], code="grammar_timeout",
            ) from None
