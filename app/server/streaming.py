"""The server-sent events of a streamed reply: a chat or text completion's chunks (:func:`completion_stream`), a
Responses reply's events (:func:`response_stream`), both written by one loop (:func:`_event_stream`), and the
streaming response that holds a request's turn (:func:`streamed`).

Rules:
- One write per batch of events; a decode step's statistics never travel alone in a chunk.
- A streamed reply that must wait starts at once with its queue position (``: queued, position 2``, a comment line
  clients skip); a refusal that comes with its turn is an error event.
- A reply cut by an engine error or by the server stopping ends with an error event in place of its ending (the
  finish chunk and ``[DONE]``, or ``response.completed``), so that no client takes it for whole; its log line says
  why (``cut=server_stopped``), its 200 having gone out.
- The turn is given back however the stream ends: finished, client gone, never started.
- A stored Responses reply is retrievable ``in_progress`` while it streams (``ResponseStore.streaming``), and
  dropped from there however its stream ends.
- A text completion of several prompts streams them one after another, each prompt's chunks with its choice index,
  then the usage chunk (their usage summed) and one ``[DONE]``; a client gone cancels the prompts left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from inference.events import Event, Finished, GenerationStats, StepStats, TextDelta, ToolCallDelta, ToolCalls

from .errors import APIError, server_stopped
from .generation import Generation, first_batch
from .replies import Reply, finish_reason, sse, step_object
from .response_store import ResponseStore
from .responses import ResponseBuilder, sse_event
from .transcript import Transcript


async def streamed(
    request: Request, run: Generation, rest: Callable[[list[Event]], AsyncIterator[bytes]],
    error_event: Callable[[APIError], bytes],
) -> Response:
    """The streamed response of ``run``: ``rest(first batch)`` once the first batch came (status 499, nobody reads
    it, when the client left first), or at once, when it must wait, a stream that says its queue position first
    (:func:`_after_queue`); its turn is given back however the stream ends.

    Raises:
        APIError: 429 (the queue is full), and as :meth:`Generation.start` when it did not wait.
    """
    position = run.queued()
    if position:  # it waits: the stream starts now and says where it waits
        chunks = _after_queue(position, run, rest, error_event)
    else:
        first = await first_batch(request, run)
        if first is None:
            return Response(status_code=499)
        chunks = rest(first)
    return _ClosingStream(chunks, run.close, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _after_queue(
    position: int, run: Generation, rest: Callable[[list[Event]], AsyncIterator[bytes]],
    error_event: Callable[[APIError], bytes],
) -> AsyncIterator[bytes]:
    """A streamed reply that must wait its turn: a comment line first (``: queued, position 2``, which clients
    skip), then, once the turn came, ``rest(first batch)``; a refusal that comes with the turn (the server stopping,
    a setting the engine refuses) is sent as ``error_event(error)`` and ends the stream."""
    yield f": queued, position {position}\n\n".encode()
    try:
        first = await run.start()
    except APIError as error:
        run.cut_by(error)
        yield error_event(error)
        return
    async for part in rest(first):
        yield part


def completion_stream(
    reply: Reply, run: Generation, first: list[Event], include_usage: bool, transcripts: list[Transcript]
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed chat or text completion (:func:`_event_stream`): a role chunk, one
    chunk per token (``specchat.from_draft``; the decode steps that ended with it in ``specchat.steps``), the finish
    chunk with the statistics, the usage chunk if asked, ``[DONE]``; an error as an ``{"error": ...}`` event.
    ``transcripts``: one per prompt of ``run`` (a text completion's several prompts: the chunks of each carry its
    index, and the usage chunk after the last sums theirs)."""
    steps: list[dict] = []
    finished: list[GenerationStats] = []

    def render(batch: list[Event]) -> bytes:
        chunks = _chunks(reply, batch, include_usage, steps, transcripts[run.index], run.index)
        ended = [event.stats for event in batch if isinstance(event, Finished)]
        finished.extend(ended)
        if include_usage and ended and not run.more:  # the last prompt's reply finished
            chunks.append(reply.usage_chunk(*finished))
        return b"".join(sse(data) for data in chunks)

    opening = sse(reply.chunk("", role=True, include_usage=include_usage)) if reply.chat else b""
    return _event_stream(run, first, opening, render, lambda error: sse(error.body()), lambda: sse("[DONE]"))


async def _event_stream(
    run: Generation, first: list[Event], opening: bytes, render: Callable[[list[Event]], bytes],
    error_event: Callable[[APIError], bytes], ending: Callable[[], bytes],
) -> AsyncIterator[bytes]:
    """A streamed reply's bytes, one write per batch of events: ``opening`` with the first batch, ``render(batch)``
    for each batch from ``first`` on (``run`` gives the rest, each of its prompts' in turn), ``ending()`` once the
    reply (the last prompt's) finished. An engine error
    mid-stream, or the server stopping (:func:`server_stopped`: the batch's content is still sent), is sent as
    ``error_event(error)`` in place of the ending, so that no client takes the cut reply for whole."""
    batch = first
    try:
        while True:
            finished = next((event for event in batch if isinstance(event, Finished)), None)
            if finished is not None and finished.stats.stop_reason == "cancelled":  # the server is stopping
                yield opening + render([event for event in batch if not isinstance(event, Finished)])
                raise server_stopped(began=finished.stats.new_tokens > 0 or run.index > 0)
            yield opening + render(batch)
            opening = b""
            if finished is not None and not run.more:
                break
            if finished is not None:
                batch = await run.next_prompt()
                continue
            try:
                batch = await run.next()
            except StopAsyncIteration:
                break
        ending_bytes = ending()
        if ending_bytes:
            yield ending_bytes
    except APIError as error:
        run.cut_by(error)
        yield error_event(error)


def _chunks(
    reply: Reply, batch: list[Event], include_usage: bool, steps: list[dict], transcript: Transcript, index: int
) -> list[dict]:
    """The chunks of one batch of events, of choice ``index``. A decode step's statistics join the batch's last
    chunk, or wait in ``steps`` for the next chunk when the batch made none (so that no chunk carries only
    statistics). A token's log-probability goes with the chunk that carries its text (or the next one, or the finish
    chunk)."""
    chunks: list[dict] = []
    for event in batch:
        text, entries = transcript.take(event)
        if isinstance(event, StepStats):
            steps.append(step_object(event))
        if text:
            extension = {"from_draft": event.from_draft} if isinstance(event, TextDelta) else None
            chunks.append(reply.chunk(text, extension=extension, include_usage=include_usage,
                                      logprobs=transcript.pending(entries), index=index))
        else:
            transcript.hold(entries)
        if isinstance(event, (ToolCallDelta, ToolCalls)):
            chunks += [reply.chunk(None, calls=delta, include_usage=include_usage) for delta in transcript.calls(event)]
        if isinstance(event, Finished):
            chunks.append(reply.chunk(None, finish=finish_reason(event.stats, transcript.called),
                                      extension=reply.stats(event.stats), include_usage=include_usage,
                                      logprobs=transcript.pending([]), index=index))
        if chunks and steps:
            extension = chunks[-1].setdefault("specchat", {})
            extension["steps"] = extension.get("steps", []) + steps
            steps.clear()
    return chunks


def response_stream(
    builder: ResponseBuilder, run: Generation, first: list[Event], kept: ResponseStore | None
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed Responses reply (:class:`ResponseBuilder`, :func:`_event_stream`), its
    conversation kept in ``kept`` once complete (None: ``store`` false); an error as an ``error`` event (OpenAI's
    shape), without ``response.completed``."""

    def render(batch: list[Event]) -> bytes:
        return b"".join(sse_event(event) for event in builder.take(batch))

    def ending() -> bytes:
        if kept is not None:
            kept.put(builder.id, builder.conversation(), builder.response(), builder.inputs)
        return b""

    opening = b"".join(sse_event(event) for event in builder.opening())
    events = _event_stream(run, first, opening, render, lambda error: sse_event(builder.error(error)), ending)
    return events if kept is None else _held_while_streaming(builder, kept, events)


async def _held_while_streaming(builder: ResponseBuilder, kept: ResponseStore, events: AsyncIterator[bytes]
                                ) -> AsyncIterator[bytes]:
    """``events``, the response held in ``kept`` as streaming (retrievable ``in_progress``) from its first event
    until the stream ends however it ends (whole: kept by then; cut, or its client gone: dropped)."""
    kept.streaming(builder.id, builder)
    try:
        async for part in events:
            yield part
    finally:
        kept.streaming(builder.id, None)


class _ClosingStream(StreamingResponse):
    """A streaming response that runs ``on_close`` however it ends (finished, client gone, never started)."""

    def __init__(self, content, on_close: Callable, **kwargs):
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()
