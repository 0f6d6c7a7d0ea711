"""One request's generation (:class:`Generation`): its turn at the :class:`~app.server.gate.GenerationGate`, its
stream of event batches from the backend, and the engine's errors as ``APIError``; and the waits on it that end when
the client disconnects (:func:`whole_reply`, :func:`first_batch`).

Rules:
- The turn is held from :meth:`Generation.start` until :meth:`Generation.close`, which every path calls (idempotent).
- A completion of several prompts has the backend check them all first (a prompt it refuses is a 400 before any is
  generated), then generates them one after another, each in a turn of its own (:meth:`Generation.next_prompt`):
  the requests that came meanwhile get theirs between two prompts.
- A client that disconnects, while waiting or generating, sets the ``cancel`` event the engine polls between tokens.
- What the engine refuses is a 400 that says what to change; any other failure is a 500 that says only that it
  happened (:func:`~app.server.errors.internal_error`), its details in the server's log.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

from fastapi import Request

from app.backends.protocol import GenerationRequest, ReplySource
from inference.events import Event, Finished, PromptProgress, StepStats, TextDelta
from inference.rope import RopeUnsupportedError
from inference.settings import Decoding, SettingError

from .errors import APIError, internal_error, no_draft_model, server_stopped, setting_error
from .gate import GateClosed, GenerationGate, QueueFull
from .request_log import RequestRecord

logger = logging.getLogger(__name__)


class Generation:
    """One request's turn at the gate and its stream of event batches; engine errors become ``APIError``
    (``draft_advice``: see ``create_app``). ``request``: its engine request, or a completion's, one per prompt,
    generated one after another (``index``: the prompt generating). ``record``: the request's log line, which gets
    its queue position, tokens and TTFT."""

    def __init__(self, backend: ReplySource, gate: GenerationGate, request: GenerationRequest | list[GenerationRequest],
                 draft_advice: str, record: RequestRecord | None = None):
        self.cancel = threading.Event()
        self._backend, self._gate = backend, gate
        self._requests = request if isinstance(request, list) else [request]
        self.index = 0
        self._draft_advice = draft_advice
        self._batches: AsyncIterator[list[Event]] | None = None
        self._holding = False
        self._record = record
        self._ended = False  # the reply's Finished came, or an error ended it
        self._generated = 0  # reply tokens so far (its last decode step's count)

    def queued(self) -> int:
        """The queue position this request would wait at now (1 = next; 0: it would not wait).

        Raises:
            APIError: 429, the queue is full.
        """
        position = self._gate.position()
        if self._record is not None:
            self._record.queued_at = position
        if self._gate.full():
            raise self._queue_full(self._gate.retry_after_s())
        return position

    def _queue_full(self, retry_after_s: int) -> APIError:
        return APIError(
            429, f"the server is busy: one reply generating and {self._gate.waiting} waiting, so this request would "
            f"wait at queue position {self._gate.position()}, past the {self._gate.max_waiting} allowed: retry in "
            f"{retry_after_s} s", type="rate_limit_error", code="queue_full",
            headers={"Retry-After": str(retry_after_s)},
        )  # fmt: skip

    async def start(self) -> list[Event]:
        """Wait for the turn, start generating and return the first batch.

        Raises:
            APIError: 429 (the queue is full), 503 (the server is stopping), 400 (the engine refused a setting, or a
                prompt the model cannot roll; of a completion of several prompts, any of them, before the first is
                generated), 500 (anything else, logged).
        """
        if self._record is not None and not self.index:
            self._record.queued_at = self._gate.position()
        try:
            await self._gate.acquire(again=self.index > 0)
        except QueueFull as full:
            self._ended = True
            raise self._queue_full(full.retry_after_s) from None
        except GateClosed:
            self._ended = True
            raise server_stopped(began=self.index > 0) from None  # a later prompt's: the earlier ones were generated
        self._holding = True
        if self._record is not None:
            self._record.turn()
        if not self.index and self.more:
            await self._check_prompts()
        self._batches = self._backend.generate(self._requests[self.index], self.cancel)
        return await self.next()

    async def _check_prompts(self) -> None:
        """Have the backend check every prompt of a completion of several before the first is generated, so that one
        it refuses (``prompt[2]`` too long to score, a token id past the vocabulary) is a 400 before any work, not
        after the prompts before it were generated (and, unstreamed, thrown away).

        Raises:
            APIError: 400 naming the prompt (``prompt[2]``), 500 (anything else, logged).
        """
        for index, request in enumerate(self._requests):
            try:
                await self._backend.check_prompt(request)
            except Exception as error:
                self._ended = True
                raise self._refusal(error, index) from None

    @property
    def more(self) -> bool:
        """Prompts are left after the one generating (:meth:`next_prompt`)."""
        return self.index + 1 < len(self._requests)

    async def next_prompt(self) -> list[Event]:
        """Once a prompt's reply finished, with :attr:`more` prompts left: give the turn back and start the next
        prompt's in a turn of its own, waiting behind the requests that came meanwhile (a full queue does not refuse
        it); its first batch.

        Raises:
            APIError: as :meth:`start`.
        """
        batches, self._batches = self._batches, None
        async for _ in batches:  # its end: closing it sooner would cancel the request (the backend's cancel is set)
            pass
        self._holding = False
        self._gate.release()
        self.index += 1
        self._ended, self._generated = False, 0
        return await self.start()

    async def next(self) -> list[Event]:
        """The next batch (``StopAsyncIteration`` after the last)."""
        try:
            return await self._next()
        except StopAsyncIteration:
            raise
        except Exception:
            self._ended = True  # an error ended the reply (as an APIError); a client gone cancels, which is not one
            raise

    async def _next(self) -> list[Event]:
        """:meth:`next`'s batch, the engine's errors made ``APIError`` (400, 500) and its tokens counted."""
        try:
            batch = await self._batches.__anext__()
            self._generated = next((e.generated for e in reversed(batch) if isinstance(e, StepStats)), self._generated)
            finished = next((event for event in batch if isinstance(event, Finished)), None)
            if finished is not None:
                self._ended = True
            if self._record is not None:
                self._log(batch, finished)
            return batch
        except StopAsyncIteration:
            raise
        except Exception as error:
            raise self._refusal(error, self.index) from None

    def _refusal(self, error: Exception, index: int) -> APIError:
        """What the backend raised for the prompt at ``index`` as an ``APIError``: what the engine refuses a 400
        that says what to change, anything else a 500 that says only that it happened (logged)."""
        if isinstance(error, SettingError):
            if error.field == "decoding" and self._requests[index].settings.decoding is Decoding.DRAFT_MODEL:
                return no_draft_model(self._draft_advice)  # the engine has no draft model
            prompt = f"prompt[{index}]" if len(self._requests) > 1 else "prompt"
            return setting_error(error, prompt_param=prompt)
        if isinstance(error, RopeUnsupportedError):  # a conversation longer than n_ctx, for a model that cannot roll
            return APIError(400, f"{error}; send a shorter conversation, or a larger specchat.n_ctx",
                            param="messages", code="context_length_exceeded")
        logger.error("generation failed", exc_info=error)
        return internal_error("the generation failed")

    def _log(self, batch: list[Event], finished: Finished | None) -> None:
        """Put what ``batch`` says in the request's log line as soon as it is known (a reply its client leaves
        never finishes): the prompt's tokens, the first token's arrival, a finished reply's statistics."""
        progress = next((event for event in batch if isinstance(event, PromptProgress)), None)
        if progress is not None:
            self._record.reading(progress.prompt_tokens)
        if self._record.ttft_ms is None and any(isinstance(event, TextDelta) for event in batch):
            self._record.first_token()
        if finished is not None:
            self._record.generated(finished.stats)

    def cut_by(self, error: APIError) -> None:
        """``error`` ended the reply's stream in place of its ending (its 200 already sent): the log line says why,
        ``cut=<its code>``."""
        if self._record is not None:
            self._record.cut = error.code or error.type

    async def to_end(self) -> list[Event]:
        """Generate the whole reply, each prompt's of a completion of several; their events, each reply's ending
        with its ``Finished`` (a reply the server cut, stopping, is the last)."""
        events = await self.start()
        while True:
            while not isinstance(events[-1], Finished):
                events += await self.next()
            if not self.more or events[-1].stats.stop_reason == "cancelled":
                return events
            events += await self.next_prompt()

    async def close(self) -> None:
        """Stop the generation if it still runs and give the turn back (idempotent). A reply stopped before its end
        without an error (its client gone while it waited or streamed) is logged as 499, with the tokens it had
        sent (a newcomer's read 200 with none)."""
        if not self._ended and self._record is not None:
            self._record.status = 499
            if self._batches is not None:
                self._record.stopped_at(self._generated)
        if self._batches is not None:
            batches, self._batches = self._batches, None
            self.cancel.set()
            await batches.aclose()
        if self._holding:
            self._holding = False
            self._gate.release()


async def whole_reply(request: Request, run: Generation) -> list[Event] | None:
    """The events of ``run``'s whole reply (its turn given back after), or None when the client left first.

    Raises:
        APIError: as :meth:`Generation.start`, and 503 when the server stopped the reply (:func:`server_stopped`).
    """
    try:
        events = await _unless_disconnected(request, run.cancel, run.to_end())
    finally:
        await run.close()
    if events is not None and events[-1].stats.stop_reason == "cancelled":
        raise server_stopped(began=events[-1].stats.new_tokens > 0 or run.index > 0)
    return events


async def first_batch(request: Request, run: Generation) -> list[Event] | None:
    """The first batch of ``run``'s events (a streamed reply starts only once it came), or None when the client
    left first; the turn is given back unless a batch came.

    Raises:
        APIError: as :meth:`Generation.start`.
    """
    try:
        first = await _unless_disconnected(request, run.cancel, run.start())
    except BaseException:
        await run.close()
        raise
    if first is None:
        await run.close()
    return first


async def _unless_disconnected(request: Request, cancel: threading.Event, work):
    """``await work``, unless the client disconnects first: then ``cancel`` is set, ``work`` is cancelled and
    None returned."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        cancel.set()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return None
    return task.result()


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body is read: the next ASGI message says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
