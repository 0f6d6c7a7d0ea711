"""The ASGI application of ``specchat serve`` (and of the window's local server): OpenAI's chat and text
completions, models and health endpoints on one generation backend.

Each generation request is read (at most ``max_body_bytes``), parsed and validated (``protocol``), then waits its
turn at the :class:`GenerationGate`; its first batch of events is awaited before the response starts, so that
whatever the engine refuses is still a 400 and not a broken stream. A client that disconnects, while waiting or
while its reply streams, cancels its generation at once (the ``cancel`` event the engine polls between tokens).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.backends.protocol import GenerationRequest, ReplySource
from inference.events import Event, Finished, GenerationStats, StepStats, TextDelta
from inference.settings import GenerationSettings, SettingError

from .binding import host_of, is_loopback
from .gate import GenerationGate, QueueFull
from .protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    Reply,
    chat_request,
    completion_request,
    finish_reason,
    parse,
    setting_error,
    sse,
    stats_object,
    step_object,
)

logger = logging.getLogger(__name__)

#: Largest request body accepted (413 beyond): 4 MiB, about a million tokens of text.
MAX_BODY_BYTES = 4 * 1024 * 1024


def create_app(
    backend: ReplySource,
    *,
    model_id: str,
    api_key: str | None = None,
    max_queue: int = 8,
    max_body_bytes: int = MAX_BODY_BYTES,
    defaults: GenerationSettings | None = None,
    max_context: int | None = None,
) -> FastAPI:
    """The OpenAI-compatible server application.

    Args:
        backend: generates replies (an ``InferenceWorker`` with its model loaded, or an adapter with the same
            ``generate(request, cancel)`` method).
        model_id: the model's name in ``/v1/models`` and in responses. A request may name any model (clients often
            send a fixed name): this one answers, and the response's ``model`` says so, as llama-server does.
        api_key: when given, every endpoint but ``/health`` requires ``Authorization: Bearer <api_key>`` (compared
            in constant time). None = no key: then the server is this computer's only (it listens on loopback),
            and it answers only requests that name this computer in ``Host`` and come from no web page (no
            ``Origin``, or a loopback one); others get a 403. A web page on another origin could otherwise start
            generations with a form-like POST that needs no CORS preflight, and read the replies through DNS
            rebinding (a name of the attacker's that resolves to 127.0.0.1).
        max_queue: requests allowed to wait while one generates; beyond, 429 with ``Retry-After``.
        max_body_bytes: largest request body; beyond, 413.
        defaults: the settings a request's omitted fields take: decoding, context, K (``specchat serve``'s flags);
            a request's sampling fields left out take OpenAI's defaults (temperature 1, top_p 1). None = the
            engine's defaults (autoregressive, n_ctx 4096).
        max_context: the model's largest n_ctx (``ModelInfo.max_position_embeddings``), checked before generating.

    Returns:
        A FastAPI application without CORS, docs or OpenAPI schema; serve it with uvicorn.
    """
    if api_key is not None and not api_key:
        raise ValueError("the API key is empty: give a non-empty key, or none")
    defaults = defaults or GenerationSettings()
    gate = GenerationGate(max_queue)
    created = int(time.time())
    app = FastAPI(title="SpecChat", docs_url=None, redoc_url=None, openapi_url=None)

    if api_key is None:
        app.add_middleware(_ThisComputerOnly)

    @app.exception_handler(APIError)
    async def api_error(_: Request, error: APIError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return JSONResponse(APIError(error.status_code, str(error.detail), type=kind).body(), status_code=error.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        logger.error("unexpected error in the server", exc_info=error)
        body = APIError(500, f"internal error: {error}", type="server_error").body()
        return JSONResponse(body, status_code=500)

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(
                401,
                "missing or wrong API key: send the server's key as 'Authorization: Bearer KEY'",
                type="authentication_error",
                code="invalid_api_key",
            )

    def model_object() -> dict:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "specchat"}

    @app.get("/health")
    async def health() -> dict:
        """No key needed: ``status`` ok, ``busy`` (a reply is generating), ``waiting`` (requests queued)."""
        return {"status": "ok", "busy": gate.busy, "waiting": gate.waiting}

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        authorize(request)
        return {"object": "list", "data": [model_object()]}

    @app.get("/v1/models/{name:path}")
    async def model(request: Request, name: str) -> dict:
        authorize(request)
        if name != model_id:
            raise APIError(404, f"model {name!r} is not served here; GET /v1/models lists {model_id!r}",
                           type="not_found_error", param="model", code="model_not_found")
        return model_object()

    async def generation(request: Request, chat: bool) -> Response:
        authorize(request)
        body = await _read_body(request, max_body_bytes)
        if chat:
            parsed = parse(ChatCompletionRequest, body)
            engine_request = chat_request(parsed, defaults, max_context)
        else:
            parsed = parse(CompletionRequest, body)
            engine_request = completion_request(parsed, defaults, max_context)
        reply = Reply.new(model_id, chat)
        run = _Generation(backend, gate, engine_request)
        if not parsed.stream:
            try:
                stats = await _unless_disconnected(request, run.cancel, run.to_end())
            finally:
                await run.close()
            if stats is None:
                return Response(status_code=499)  # the client left: nobody reads this
            if stats.stop_reason == "cancelled":
                raise server_stopped()
            return JSONResponse(reply.response(stats))
        try:
            first = await _unless_disconnected(request, run.cancel, run.start())
        except BaseException:
            await run.close()
            raise
        if first is None:
            await run.close()
            return Response(status_code=499)
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        chunks = _stream(reply, run, first, include_usage)
        return _ClosingStream(chunks, run.close, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generation(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generation(request, chat=False)

    app.state.gate = gate
    return app


class _ThisComputerOnly:
    """ASGI middleware of a keyless server: a request that :func:`_not_from_this_computer` refuses gets a 403 in
    OpenAI's error JSON (pure ASGI, so streaming and disconnects pass through untouched)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
            refusal = _not_from_this_computer(headers.get(b"host", ""), headers.get(b"origin"))
            if refusal is not None:
                body = APIError(403, refusal, type="permission_error", code="forbidden").body()
                await JSONResponse(body, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _not_from_this_computer(host: str, origin: str | None) -> str | None:
    """Why a keyless server refuses a request (None: it does not): its ``Host`` header names another machine
    (DNS rebinding), or its ``Origin`` says a web page elsewhere sent it."""
    if not is_loopback(host_of(host)):
        return (f"this server answers requests to this computer only (Host {host!r}): use http://127.0.0.1 or "
                "http://localhost, or start it with an API key")
    if origin is not None:
        scheme, _, authority = origin.partition("://")
        if scheme not in ("http", "https") or not is_loopback(host_of(authority)):
            return (f"requests from web pages are refused (Origin {origin!r}): call the API from a program, not a "
                    "browser page")
    return None


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused past ``limit`` bytes (by its Content-Length, or while it arrives).

    Raises:
        APIError: 413.
    """
    too_large = APIError(413, f"the request body is larger than {limit} bytes: send a shorter conversation",
                         code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise too_large
        parts.append(part)
    return b"".join(parts)


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


class _Generation:
    """One request's turn at the gate and its stream of event batches; engine errors become ``APIError``."""

    def __init__(self, backend: ReplySource, gate: GenerationGate, request: GenerationRequest):
        self.cancel = threading.Event()
        self._backend, self._gate, self._request = backend, gate, request
        self._batches: AsyncIterator[list[Event]] | None = None
        self._holding = False

    async def start(self) -> list[Event]:
        """Wait for the turn, start generating and return the first batch.

        Raises:
            APIError: 429 (the queue is full), 400 (the engine refused a setting or the prompt), 500.
        """
        try:
            await self._gate.acquire()
        except QueueFull as full:
            raise APIError(
                429, f"the server is busy (one reply at a time, {self._gate.max_waiting} waiting): retry in "
                f"{full.retry_after_s} s", type="rate_limit_error", code="queue_full",
                headers={"Retry-After": str(full.retry_after_s)},
            ) from None
        self._holding = True
        self._batches = self._backend.generate(self._request, self.cancel)
        return await self.next()

    async def next(self) -> list[Event]:
        """The next batch (``StopAsyncIteration`` after the last)."""
        try:
            return await self._batches.__anext__()
        except StopAsyncIteration:
            raise
        except SettingError as error:
            raise setting_error(error) from None
        except ValueError as error:
            raise APIError(400, str(error)) from None
        except Exception as error:
            logger.error("generation failed", exc_info=error)
            raise APIError(500, f"generation failed: {error}", type="server_error") from None

    async def to_end(self) -> GenerationStats:
        """Generate the whole reply; its statistics (text included)."""
        batch = await self.start()
        while True:
            for event in batch:
                if isinstance(event, Finished):
                    return event.stats
            batch = await self.next()

    async def close(self) -> None:
        """Stop the generation if it still runs and give the turn back (idempotent)."""
        if self._batches is not None:
            batches, self._batches = self._batches, None
            self.cancel.set()
            await batches.aclose()
        if self._holding:
            self._holding = False
            self._gate.release()


def server_stopped() -> APIError:
    """A reply the server cut because it is stopping (Ctrl+C, SIGTERM, the window closing): a 503, or in a stream
    an ``{"error": ...}`` event in place of the finish chunk and ``[DONE]``, so that no client takes it for whole."""
    return APIError(
        503,
        "the server stopped before the reply ended (it is shutting down): the reply is incomplete; send the request "
        "again once the server runs",
        type="server_error",
        code="server_stopped",
    )


async def _stream(reply: Reply, run: _Generation, first: list[Event], include_usage: bool) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed reply: a role chunk, one chunk per token (``specchat.from_draft``; the
    decode steps that ended with it in ``specchat.steps``), the finish chunk with the statistics, the usage chunk if
    asked, ``[DONE]``. An engine error mid-stream, or the server stopping (:func:`server_stopped`), is sent as an
    ``{"error": ...}`` event and ends the stream."""
    opening = sse(reply.chunk("", role=True, include_usage=include_usage)) if reply.chat else b""
    batch, steps = first, []
    try:
        while True:
            finished = next((event for event in batch if isinstance(event, Finished)), None)
            if finished is not None and finished.stats.stop_reason == "cancelled":  # the server is stopping
                content = [event for event in batch if not isinstance(event, Finished)]
                yield opening + b"".join(sse(data) for data in _chunks(reply, content, include_usage, steps))
                yield sse(server_stopped().body())  # no finish chunk and no [DONE]: the reply is cut, say so
                return
            yield opening + b"".join(sse(data) for data in _chunks(reply, batch, include_usage, steps))  # one write
            opening = b""
            if finished is not None:
                break
            try:
                batch = await run.next()
            except StopAsyncIteration:
                break
        yield sse("[DONE]")
    except APIError as error:
        yield sse(error.body())


def _chunks(reply: Reply, batch: list[Event], include_usage: bool, steps: list[dict]) -> list[dict]:
    """The chunks of one batch of events. A decode step's statistics join the batch's last chunk, or wait in
    ``steps`` for the next chunk when the batch made none (so that no chunk carries only statistics)."""
    chunks: list[dict] = []
    for event in batch:
        if isinstance(event, TextDelta) and event.text:
            chunks.append(reply.chunk(event.text, extension={"from_draft": event.from_draft}, include_usage=include_usage))
        elif isinstance(event, StepStats):
            steps.append(step_object(event))
        elif isinstance(event, Finished):
            chunks.append(reply.chunk(None, finish=finish_reason(event.stats), extension=stats_object(event.stats),
                                      include_usage=include_usage))
        if chunks and steps:
            chunks[-1]["specchat"]["steps"] = chunks[-1]["specchat"].get("steps", []) + steps
            steps.clear()
    if include_usage and any(isinstance(event, Finished) for event in batch):
        chunks.append(reply.usage_chunk(next(e for e in batch if isinstance(e, Finished)).stats))
    return chunks


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
