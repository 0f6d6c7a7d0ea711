"""The ASGI application of ``specchat serve`` (and of the window's local server): OpenAI's chat and text
completions, models and health endpoints on one generation backend.

Each generation request is read (at most ``max_body_bytes``), parsed and validated (``chat_request``,
``completion_request``, ``responses``; a large body in a thread, ``bodies``, and its JSON schemas compiled in
another, ``grammars``), then waits its turn at the :class:`GenerationGate`; its first batch of events is awaited before the response starts, so that
whatever the engine refuses is still a 400 and not a broken stream, except for a streamed request that must wait:
its stream starts at once with its queue position (``: queued, position 2``), and a refusal that comes with its
turn is an error event. Every request gets a line in the request log (``request_log``). A client that disconnects, while waiting or
while its reply streams, cancels its generation at once (the ``cancel`` event the engine polls between tokens).

Error responses say what the client did wrong (a setting out of range, a conversation the model cannot roll); any
other failure is a 500 that says only that it happened, its details in the server's log.
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
from app.binding import host_of, is_loopback
from inference.events import Event, Finished, PromptScored, StepStats, TextDelta, ToolCallDelta, ToolCalls
from inference.rope import RopeUnsupportedError
from inference.settings import Decoding, GenerationSettings, SettingError

from .bodies import BodyReader
from .chat_request import ChatCompletionRequest, chat_request
from .completion_request import CompletionRequest, completion_request
from .errors import APIError, no_draft_model, setting_error
from .gate import GateClosed, GenerationGate, QueueFull
from .grammars import GrammarCompiler
from .replies import (
    Reply,
    arguments_fragment,
    arguments_text,
    call_opening,
    chat_logprobs,
    completion_logprobs,
    finish_reason,
    new_call_id,
    sse,
    stats_object,
    step_object,
)
from .request_common import SERVE_N_CTX_ADVICE, ServerLimits
from .request_log import RequestLogMiddleware, RequestRecord, keep_prompt, record_of
from .responses import (
    ResponseBuilder,
    ResponsesRequest,
    ResponseStore,
    chat_completion,
    input_messages,
    renamed_errors,
    sse_event,
)

logger = logging.getLogger(__name__)

#: Largest request body accepted (413 beyond): 4 MiB, about a million tokens of text.
MAX_BODY_BYTES = 4 * 1024 * 1024
#: The routes served, as an unknown route's 404 lists them.
ROUTES = ("POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, GET /v1/models, GET /v1/models/{model}, "
          "GET /health")
#: How to run ``specchat serve`` with a draft model, for a request that asks for one when it runs none.
SERVE_DRAFT_ADVICE = (
    "restart `specchat serve` with `--mode spec --draft NAME`, NAME an installed draft model or draft head with the "
    "model's tokenizer (`specchat models list`; requests that leave specchat.mode out then draft with it too)"
)


def create_app(
    backend: ReplySource,
    *,
    model_id: str,
    api_key: str | None = None,
    max_queue: int = 8,
    max_body_bytes: int = MAX_BODY_BYTES,
    defaults: GenerationSettings | None = None,
    max_context: int | None = None,
    max_tokens: int | None = None,
    gate: GenerationGate | None = None,
    draft_advice: str = SERVE_DRAFT_ADVICE,
    n_ctx_advice: str = SERVE_N_CTX_ADVICE,
    grammars: GrammarCompiler | None = None,
    log_prompts: bool = False,
) -> FastAPI:
    """The OpenAI-compatible server application.

    Args:
        backend: generates replies (an ``InferenceWorker`` with its model loaded, or an adapter with the same
            ``generate(request, cancel)`` method).
        model_id: the model's name in ``/v1/models`` and in responses. A request may name any model (clients often
            send a fixed name): this one answers, and the response's ``model`` says so, as llama-server does.
        api_key: when given, every endpoint but ``/health`` requires ``Authorization: Bearer <api_key>`` (compared
            in constant time; a key with spaces or line breaks around it is refused, as no client could send it).
            None = no key: then the server is this computer's only (it listens on loopback), and it answers only
            requests that name this computer in ``Host`` and come from no web page (no ``Origin``, or a loopback
            one); others get a 403. A web page on another origin could otherwise start
            generations with a form-like POST that needs no CORS preflight, and read the replies through DNS
            rebinding (a name of the attacker's that resolves to 127.0.0.1).
        max_queue: requests allowed to wait while one generates; beyond, 429 with ``Retry-After``.
        max_body_bytes: largest request body; beyond, 413.
        defaults: the settings a request's omitted fields take: decoding, context, K and sampling (``specchat
            serve``'s flags over the model's recommended sampling, ``generation_config.recommended_sampling``).
            None = the engine's defaults (autoregressive, greedy, n_ctx 4096). Its n_ctx is also the largest a
            request may ask.
        max_context: the model's largest n_ctx (``ModelInfo.max_position_embeddings``), checked before generating.
        max_tokens: the most new tokens one reply may generate (a request's larger ``max_tokens`` is lowered to it);
            None = the defaults' n_ctx (with the rolling context a reply has no natural end).
        gate: the queue, when it must outlive this app: an app that replaces another on the same engine (the
            window's server after a model switch) takes its gate, so that ``max_queue``, 429s and ``/health`` count
            the requests still running on the old one. None = a new queue of ``max_queue``.
        draft_advice: how to run this server with a draft model, told to a request for ``specchat.mode``
            ``spec_model`` when it runs none (default: ``specchat serve``'s flags).
        n_ctx_advice: how to give this server a larger n_ctx, told to a request whose ``specchat.n_ctx`` is above
            the defaults' (default: ``specchat serve``'s ``--n-ctx``).
        grammars: compiles requests' JSON schemas off the event loop, time-bounded and cached; None = a new
            :class:`GrammarCompiler` (its bound ``grammars.GRAMMAR_TIMEOUT_S``).
        log_prompts: the request log (``request_log``: one line per request, logger ``app.server.requests``) also
            holds each prompt's text (its last message); False = never (``specchat serve --log-prompts``).

    Returns:
        A FastAPI application without CORS, docs or OpenAPI schema; serve it with uvicorn.
    """
    if api_key is not None and not api_key:
        raise ValueError("the API key is empty: give a non-empty key, or none")
    if api_key is not None and api_key != api_key.strip():
        raise ValueError("the API key has spaces or line breaks around it, which no client can send: strip them")
    defaults = defaults or GenerationSettings()
    max_tokens = defaults.context.n_ctx if max_tokens is None else max_tokens
    gate = gate or GenerationGate(max_queue)
    grammars = grammars or GrammarCompiler()
    bodies = BodyReader()
    limits = ServerLimits(defaults, max_context, max_tokens, grammars.schema_grammar, n_ctx_advice)
    kept_responses = ResponseStore()
    created = int(time.time())
    app = FastAPI(title="SpecChat", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_WithoutTrailingSlash)

    if api_key is None:
        app.add_middleware(_ThisComputerOnly)
    app.add_middleware(RequestLogMiddleware, log_prompts=log_prompts)  # the outermost: every request is logged

    @app.exception_handler(APIError)
    async def api_error(_: Request, error: APIError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code in (404, 405):  # a route or method that is not served: say which are
            refusal = APIError(
                error.status_code, f"{request.method} {request.url.path} is not served here: SpecChat's server "
                f"answers {ROUTES}", type="not_found_error" if error.status_code == 404 else "invalid_request_error",
                code="unknown_route" if error.status_code == 404 else "method_not_allowed",
            )
            return JSONResponse(refusal.body(), status_code=error.status_code, headers=error.headers)
        refusal = APIError(error.status_code, str(error.detail))
        return JSONResponse(refusal.body(), status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        logger.error("unexpected error in the server", exc_info=error)
        return JSONResponse(internal_error("the server failed").body(), status_code=500)

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

    async def engine_request_of(mapped: Callable[[], GenerationRequest], parsed, schema_fields: tuple[str, ...],
                                size: int) -> GenerationRequest:
        """``mapped()``: in the compile thread, time-bounded, when the fields of ``parsed`` that hold JSON schemas
        (of ``schema_fields``) are given; else at once, a large body's (``size`` bytes) in the body thread."""
        fields = [name for name in schema_fields if getattr(parsed, name, None)]
        if fields:
            return await grammars.run(mapped, " and ".join(fields))
        return await bodies.call(mapped, size)

    async def generation(request: Request, chat: bool) -> Response:
        authorize(request)
        body = await _read_body(request, max_body_bytes)
        parsed = await bodies.parse(ChatCompletionRequest if chat else CompletionRequest, body)
        to_engine = chat_request if chat else completion_request

        def mapped() -> GenerationRequest:
            return to_engine(parsed, limits)

        engine_request = await engine_request_of(mapped, parsed, ("response_format", "tools"), len(body))
        keep_prompt(request.scope, engine_request.prompt if engine_request.prompt is not None
                    else engine_request.messages[-1]["content"])
        reply = Reply.new(model_id, chat)
        run = _Generation(backend, gate, engine_request, draft_advice, record_of(request.scope))
        if not parsed.stream:
            events = await _whole_reply(request, run)
            if events is None:
                return Response(status_code=499)  # the client left: nobody reads this
            stats = events[-1].stats
            transcript = _Transcript(reply, engine_request)
            parts = [transcript.take(event) for event in events]
            text = "".join(part for part, _ in parts)
            logprobs = transcript.merged([entries for _, entries in parts]) if transcript.logprobs else None
            calls = next((event.calls for event in events if isinstance(event, ToolCalls)), ())
            return JSONResponse(reply.response(stats, text, logprobs, calls))
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)

        def chunks_after(first: list[Event]) -> AsyncIterator[bytes]:
            return _stream(reply, run, first, include_usage, _Transcript(reply, engine_request))

        return await _streamed(request, run, chunks_after, lambda error: sse(error.body()))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generation(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generation(request, chat=False)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        authorize(request)
        body = await _read_body(request, max_body_bytes)
        parsed = await bodies.parse(ResponsesRequest, body)
        kept = kept_responses.get(parsed.previous_response_id) if parsed.previous_response_id else []
        conversation = kept + input_messages(parsed.input)

        def mapped() -> GenerationRequest:
            chat = chat_completion(parsed, conversation)
            return renamed_errors(lambda: chat_request(chat, limits))

        engine_request = await engine_request_of(mapped, parsed, ("text", "tools"), len(body))
        keep_prompt(request.scope, conversation[-1]["content"] or "")
        builder = ResponseBuilder(model_id, parsed, engine_request, conversation)
        run = _Generation(backend, gate, engine_request, draft_advice, record_of(request.scope))
        if not parsed.stream:
            events = await _whole_reply(request, run)
            if events is None:
                return Response(status_code=499)
            builder.take(events)
            if parsed.store:
                kept_responses.put(builder.id, builder.conversation())
            return JSONResponse(builder.response())

        def events_after(first: list[Event]) -> AsyncIterator[bytes]:
            return _response_stream(builder, run, first, kept_responses if parsed.store else None)

        return await _streamed(request, run, events_after, lambda error: sse_event(builder.error(error)))

    app.state.gate = gate
    app.state.grammars = grammars
    app.state.responses = kept_responses
    return app


class _WithoutTrailingSlash:
    """ASGI middleware: a path's trailing slashes are dropped before routing, for every endpoint and method
    (``GET /v1/models/`` is ``GET /v1/models``), as some clients add one to every path. Starlette's redirect would
    not do: ``/v1/models/`` matches the route of one model (named ""), and a redirected POST may lose its body."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] != "/" and scope["path"].endswith("/"):
            scope = {**scope, "path": scope["path"].rstrip("/") or "/"}
        await self.app(scope, receive, send)


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


async def _whole_reply(request: Request, run: "_Generation") -> list[Event] | None:
    """The events of ``run``'s whole reply (its turn given back after), or None when the client left first.

    Raises:
        APIError: as :meth:`_Generation.start`, and 503 when the server stopped the reply (:func:`server_stopped`).
    """
    try:
        events = await _unless_disconnected(request, run.cancel, run.to_end())
    finally:
        await run.close()
    if events is not None and events[-1].stats.stop_reason == "cancelled":
        raise server_stopped()
    return events


async def _first_batch(request: Request, run: "_Generation") -> list[Event] | None:
    """The first batch of ``run``'s events (a streamed reply starts only once it came), or None when the client
    left first; the turn is given back unless a batch came.

    Raises:
        APIError: as :meth:`_Generation.start`.
    """
    try:
        first = await _unless_disconnected(request, run.cancel, run.start())
    except BaseException:
        await run.close()
        raise
    if first is None:
        await run.close()
    return first


async def _streamed(
    request: Request, run: "_Generation", rest: Callable[[list[Event]], AsyncIterator[bytes]],
    error_event: Callable[[APIError], bytes],
) -> Response:
    """The streamed response of ``run``: ``rest(first batch)`` once the first batch came (status 499, nobody reads
    it, when the client left first), or at once, when it must wait, a stream that says its queue position first
    (:func:`_after_queue`); its turn is given back however the stream ends.

    Raises:
        APIError: 429 (the queue is full), and as :meth:`_Generation.start` when it did not wait.
    """
    position = run.queued()
    if position:  # it waits: the stream starts now and says where it waits
        chunks = _after_queue(position, run, rest, error_event)
    else:
        first = await _first_batch(request, run)
        if first is None:
            return Response(status_code=499)
        chunks = rest(first)
    return _ClosingStream(chunks, run.close, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _after_queue(
    position: int, run: "_Generation", rest: Callable[[list[Event]], AsyncIterator[bytes]],
    error_event: Callable[[APIError], bytes],
) -> AsyncIterator[bytes]:
    """A streamed reply that must wait its turn: a comment line first (``: queued, position 2``, which clients
    skip), then, once the turn came, ``rest(first batch)``; a refusal that comes with the turn (the server stopping,
    a setting the engine refuses) is sent as ``error_event(error)`` and ends the stream."""
    yield f": queued, position {position}\n\n".encode()
    try:
        first = await run.start()
    except APIError as error:
        yield error_event(error)
        return
    async for part in rest(first):
        yield part


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
    """One request's turn at the gate and its stream of event batches; engine errors become ``APIError``
    (``draft_advice``: see ``create_app``). ``record``: the request's log line, which gets its queue position,
    tokens and TTFT."""

    def __init__(self, backend: ReplySource, gate: GenerationGate, request: GenerationRequest, draft_advice: str,
                 record: RequestRecord | None = None):
        self.cancel = threading.Event()
        self._backend, self._gate, self._request = backend, gate, request
        self._draft_advice = draft_advice
        self._batches: AsyncIterator[list[Event]] | None = None
        self._holding = False
        self._record = record

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
                prompt the model cannot roll), 500 (anything else, logged).
        """
        if self._record is not None:
            self._record.queued_at = self._gate.position()
        try:
            await self._gate.acquire()
        except QueueFull as full:
            raise self._queue_full(full.retry_after_s) from None
        except GateClosed:
            raise server_stopped() from None
        self._holding = True
        if self._record is not None:
            self._record.turn()
        self._batches = self._backend.generate(self._request, self.cancel)
        return await self.next()

    async def next(self) -> list[Event]:
        """The next batch (``StopAsyncIteration`` after the last)."""
        try:
            batch = await self._batches.__anext__()
            finished = next((event for event in batch if isinstance(event, Finished)), None)
            if finished is not None and self._record is not None:
                self._record.generated(finished.stats)
            return batch
        except StopAsyncIteration:
            raise
        except SettingError as error:
            if error.field == "decoding" and self._request.settings.decoding is Decoding.DRAFT_MODEL:
                raise no_draft_model(self._draft_advice) from None  # the engine has no draft model
            raise setting_error(error) from None
        except RopeUnsupportedError as error:  # a conversation longer than n_ctx, for a model that cannot roll
            raise APIError(400, f"{error}; send a shorter conversation, or a larger specchat.n_ctx",
                           param="messages", code="context_length_exceeded") from None
        except Exception as error:
            logger.error("generation failed", exc_info=error)
            raise internal_error("the generation failed") from None

    async def to_end(self) -> list[Event]:
        """Generate the whole reply; its events, ``Finished`` last."""
        events = await self.start()
        while not isinstance(events[-1], Finished):
            events += await self.next()
        return events

    async def close(self) -> None:
        """Stop the generation if it still runs and give the turn back (idempotent)."""
        if self._batches is not None:
            batches, self._batches = self._batches, None
            self.cancel.set()
            await batches.aclose()
        if self._holding:
            self._holding = False
            self._gate.release()


def internal_error(what: str) -> APIError:
    """A 500 that says ``what`` failed and where to look, and nothing of the exception (which is logged)."""
    return APIError(500, f"{what} (an internal error; the server's log has the details): retry, or report it",
                    type="server_error", code="internal_error")


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


def _stream(
    reply: Reply, run: _Generation, first: list[Event], include_usage: bool, transcript: "_Transcript"
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed chat or text completion (:func:`_event_stream`): a role chunk, one
    chunk per token (``specchat.from_draft``; the decode steps that ended with it in ``specchat.steps``), the finish
    chunk with the statistics, the usage chunk if asked, ``[DONE]``; an error as an ``{"error": ...}`` event."""
    steps: list[dict] = []

    def render(batch: list[Event]) -> bytes:
        return b"".join(sse(data) for data in _chunks(reply, batch, include_usage, steps, transcript))

    opening = sse(reply.chunk("", role=True, include_usage=include_usage)) if reply.chat else b""
    return _event_stream(run, first, opening, render, lambda error: sse(error.body()), lambda: sse("[DONE]"))


async def _event_stream(
    run: _Generation, first: list[Event], opening: bytes, render: Callable[[list[Event]], bytes],
    error_event: Callable[[APIError], bytes], ending: Callable[[], bytes],
) -> AsyncIterator[bytes]:
    """A streamed reply's bytes, one write per batch of events: ``opening`` with the first batch, ``render(batch)``
    for each batch from ``first`` on (``run`` gives the rest), ``ending()`` once the reply finished. An engine error
    mid-stream, or the server stopping (:func:`server_stopped`: the batch's content is still sent), is sent as
    ``error_event(error)`` in place of the ending, so that no client takes the cut reply for whole."""
    batch = first
    try:
        while True:
            finished = next((event for event in batch if isinstance(event, Finished)), None)
            if finished is not None and finished.stats.stop_reason == "cancelled":  # the server is stopping
                yield opening + render([event for event in batch if not isinstance(event, Finished)])
                raise server_stopped()
            yield opening + render(batch)
            opening = b""
            if finished is not None:
                break
            try:
                batch = await run.next()
            except StopAsyncIteration:
                break
        ending_bytes = ending()
        if ending_bytes:
            yield ending_bytes
    except APIError as error:
        yield error_event(error)


def _chunks(
    reply: Reply, batch: list[Event], include_usage: bool, steps: list[dict], transcript: "_Transcript"
) -> list[dict]:
    """The chunks of one batch of events. A decode step's statistics join the batch's last chunk, or wait in
    ``steps`` for the next chunk when the batch made none (so that no chunk carries only statistics). A token's
    log-probability goes with the chunk that carries its text (or the next one, or the finish chunk)."""
    chunks: list[dict] = []
    for event in batch:
        text, entries = transcript.take(event)
        if isinstance(event, StepStats):
            steps.append(step_object(event))
        if text:
            extension = {"from_draft": event.from_draft} if isinstance(event, TextDelta) else None
            chunks.append(reply.chunk(text, extension=extension, include_usage=include_usage,
                                      logprobs=transcript.pending(entries)))
        else:
            transcript.hold(entries)
        if isinstance(event, (ToolCallDelta, ToolCalls)):
            chunks += [reply.chunk(None, calls=delta, include_usage=include_usage) for delta in transcript.calls(event)]
        if isinstance(event, Finished):
            chunks.append(reply.chunk(None, finish=finish_reason(event.stats, transcript.called),
                                      extension=stats_object(event.stats), include_usage=include_usage,
                                      logprobs=transcript.pending([])))
        if chunks and steps:
            extension = chunks[-1].setdefault("specchat", {})
            extension["steps"] = extension.get("steps", []) + steps
            steps.clear()
    if include_usage and any(isinstance(event, Finished) for event in batch):
        chunks.append(reply.usage_chunk(next(e for e in batch if isinstance(e, Finished)).stats))
    return chunks


def _response_stream(
    builder: ResponseBuilder, run: _Generation, first: list[Event], kept: ResponseStore | None
) -> AsyncIterator[bytes]:
    """The server-sent events of a streamed Responses reply (:class:`ResponseBuilder`, :func:`_event_stream`), its
    conversation kept in ``kept`` once complete (None: ``store`` false); an error as an ``error`` event (OpenAI's
    shape), without ``response.completed``."""

    def render(batch: list[Event]) -> bytes:
        return b"".join(sse_event(event) for event in builder.take(batch))

    def ending() -> bytes:
        if kept is not None:
            kept.put(builder.id, builder.conversation())
        return b""

    opening = b"".join(sse_event(event) for event in builder.opening())
    return _event_stream(run, first, opening, render, lambda error: sse_event(builder.error(error)), ending)


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


class _Transcript:
    """The text and log-probabilities a reply's events add up to, for its response or its stream.

    A text completion's ``echo`` puts the prompt first (with its tokens' log-probabilities from ``PromptScored``
    when asked). A token whose text is not out yet (part of a character, held back by a stop string) keeps its
    log-probability until a chunk carries text (:meth:`pending`).
    """

    def __init__(self, reply: Reply, request: GenerationRequest):
        self._chat = reply.chat
        self.logprobs = request.settings.output.logprobs is not None
        self._echo = request.prompt if request.echo and not reply.chat else None
        self._offset = 0  # characters of the completion's text so far (its text_offset)
        self._waiting: list = []
        self.called = False  # the reply called tools (its finish_reason is tool_calls)
        self._streamed: list[list[str]] = []  # per call streamed: its id and the arguments text sent

    def calls(self, event: ToolCallDelta | ToolCalls) -> list[list[dict]]:
        """The ``delta.tool_calls`` of the chunks that carry a call event, in OpenAI's streamed shape: a call opens
        with its index, id, type and name (:func:`call_opening`), then its arguments come in fragments as they are
        written. The reply's whole calls (``ToolCalls``) add what the stream did not send yet: the rest of a call's
        arguments, or a call not streamed at all."""
        if isinstance(event, ToolCallDelta):
            deltas = []
            if event.name is not None:
                self._streamed.append([new_call_id(), ""])
                deltas.append(call_opening(event.index, self._streamed[-1][0], event.name))
            if event.arguments:
                self._streamed[event.index][1] += event.arguments
                deltas.append(arguments_fragment(event.index, event.arguments))
            return deltas
        self.called = True
        deltas = []
        for index, call in enumerate(event.calls):
            whole = arguments_text(call)
            if index >= len(self._streamed):
                self._streamed.append([new_call_id(), ""])
                deltas.append(call_opening(index, self._streamed[index][0], call.name))
            sent = self._streamed[index][1]
            if whole.startswith(sent) and len(whole) > len(sent):
                deltas.append(arguments_fragment(index, whole[len(sent):]))
                self._streamed[index][1] = whole
            elif not whole.startswith(sent):  # not expected: deltas and calls are read from one text
                logger.warning("tool call %d streamed arguments %r, read as %r", index, sent, whole)
        return deltas

    def take(self, event: Event) -> tuple[str, list]:
        """The text an event adds (the echoed prompt before the first one) and its tokens' log-probability entries:
        ``(TokenLogprob, alternatives)`` for a chat, ``(bytes, logprob, alternatives)`` for a completion."""
        text, entries = "", []
        if self._echo is not None:
            text, self._echo = self._echo, None
        if isinstance(event, PromptScored) and not self._chat:
            entries = [(event.first, None, None)] + [(t.piece, t.logprob, top) for t, top in event.tokens]
        elif isinstance(event, TextDelta):
            text += event.text
            if event.logprob is not None:
                token = event.logprob
                entries = [(token, event.top_logprobs) if self._chat else (token.piece, token.logprob, event.top_logprobs)]
        return text, entries

    def hold(self, entries: list) -> None:
        """Keep the entries of tokens without text for the next chunk."""
        self._waiting += entries

    def pending(self, entries: list) -> dict | None:
        """The log-probabilities of a chunk: those waiting and ``entries`` (None when not asked for)."""
        if not self.logprobs:
            return None
        entries, self._waiting = self._waiting + entries, []
        return self._format(entries)

    def merged(self, parts: list[list]) -> dict:
        """The log-probabilities of a whole response, from the entries of each event in order."""
        return self._format([entry for part in parts for entry in part])

    def _format(self, entries: list) -> dict:
        if self._chat:
            return chat_logprobs(entries)
        formatted = completion_logprobs(entries, self._offset)
        self._offset += sum(len(token) for token in formatted["tokens"])
        return formatted
