"""Reading a remote server's answers as a server that is not trusted: every wait can be cancelled (:func:`or_cancel`
polls the cancel event every :data:`CANCEL_POLL_S`, also while the server sends nothing), and every read is bounded
(an event stream's lines by :data:`MAX_LINE_BYTES`, a whole body by its caller's limit, an error body by
:data:`MAX_ERROR_BYTES`, the rest of which is never read).

Rules:
- An event stream is split into lines at CR and LF only (the WHATWG event-stream rule; JSON may carry U+2028
  unescaped), and decoded as UTF-8 with U+FFFD for an invalid byte.
- A read past its bound is a :class:`~app.backends.remote_errors.RemoteError`; a cancelled wait is :class:`Cancelled`,
  its awaitable cancelled so that no read is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import httpx

from .remote_errors import RemoteError

#: How often a wait on the server checks the cancel event, seconds.
CANCEL_POLL_S = 0.05
#: Longest line of an event stream, bytes: a line without an end is refused past it.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: How much of an error answer is read for its message, bytes (the rest is not read).
MAX_ERROR_BYTES = 64 * 1024
#: Line breaks of server-sent events: CRLF, LF or CR, nothing else (the WHATWG event-stream rule).
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")

T = TypeVar("T")


class Cancelled(Exception):
    """The cancel event was set while waiting for the server."""


async def or_cancel(awaitable: Awaitable[T], cancel: threading.Event) -> T:
    """Await ``awaitable``, checking ``cancel`` every CANCEL_POLL_S.

    Raises:
        Cancelled: ``cancel`` was set first (the awaitable is cancelled, as it is when the caller's task is).
    """
    task = asyncio.ensure_future(awaitable)
    try:
        while not task.done():
            if cancel.is_set():
                raise Cancelled
            await asyncio.wait({task}, timeout=CANCEL_POLL_S)
    except BaseException:  # Cancelled, or the caller was cancelled (the window closes): no read is left behind
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    return task.result()


async def event_lines(chunks: AsyncIterator[bytes], url: str) -> AsyncIterator[str]:
    """The lines of an event stream's bytes, split at CRLF, LF or CR only and decoded as UTF-8 (an invalid byte
    becomes U+FFFD), as the WHATWG event-stream rules say; the last line may lack its line break.

    Raises:
        RemoteError: a line grows past :data:`MAX_LINE_BYTES`.
    """
    partial: list[bytes] = []
    size = 0
    async for chunk in chunks:
        start = 0
        for match in _LINE_BREAK.finditer(chunk):
            piece = chunk[start : match.start()]
            if size + len(piece) > MAX_LINE_BYTES:
                break
            yield (b"".join(partial) + piece).decode("utf-8", "replace")
            partial, size, start = [], 0, match.end()
        rest = chunk[start:]
        size += len(rest)
        if size > MAX_LINE_BYTES:
            raise RemoteError(
                f"{url} sent a line longer than {MAX_LINE_BYTES // 2**20} MiB: not an OpenAI stream "
                "(the partial reply was kept); check the base URL and the server"
            )
        if rest:
            partial.append(rest)
    if partial:
        yield b"".join(partial).decode("utf-8", "replace")


async def read_body(response: httpx.Response, limit: int, cancel: threading.Event, what: str) -> bytes:
    """The whole body of ``response``, refused past ``limit`` bytes (``what`` starts the message: "URL sent ...").

    Raises:
        RemoteError: the body is larger. Cancelled: ``cancel`` was set.
    """
    parts, size = [], 0
    chunks = response.aiter_bytes()
    while True:
        try:
            chunk = await or_cancel(anext(chunks), cancel)
        except StopAsyncIteration:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise RemoteError(f"{what} larger than {limit // 2**20} MiB: check the base URL and the server")
        parts.append(chunk)


async def error_body(response: httpx.Response, cancel: threading.Event) -> str:
    """The first :data:`MAX_ERROR_BYTES` of an error answer as text (the rest is never read)."""
    parts, size = [], 0
    chunks = response.aiter_bytes()
    while size < MAX_ERROR_BYTES:
        try:
            chunk = await or_cancel(anext(chunks), cancel)
        except StopAsyncIteration:
            break
        parts.append(chunk[: MAX_ERROR_BYTES - size])
        size += len(chunk)
    return b"".join(parts).decode("utf-8", "replace")
