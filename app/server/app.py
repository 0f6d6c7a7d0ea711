"""The ASGI application of ``specchat serve`` (and of the window's local server): OpenAI's chat and text
completions, Responses, models and health endpoints on one generation backend. This module holds the routes; what
they share lies beside it.

Each generation request is read (at most ``max_body_bytes``), parsed and validated (``chat_request``,
``completion_request``, ``responses``; a large body in a thread, ``bodies``, and its JSON schemas compiled in
another, ``grammars``), then waits its turn at the :class:`GenerationGate` (``generation``); its first batch of
events is awaited before the response starts, so that whatever the engine refuses is still a 400 and not a broken
stream, except for a streamed request that must wait: its stream starts at once with its queue position
(``: queued, position 2``), and a refusal that comes with its turn is an error event (``streaming``). Every request
gets a line in the request log (``request_log``). A client that disconnects, while waiting or while its reply
streams, cancels its generation at once (the ``cancel`` event the engine polls between tokens). A keyless server
answers this computer only (``middleware``).

Error responses say what the client did wrong (a setting out of range, a conversation the model cannot roll); any
other failure is a 500 that says only that it happened, its details in the server's log.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.backends.protocol import GenerationRequest, ReplySource
from inference.events import Event, Finished, ToolCalls
from inference.settings import GenerationSettings

from .bodies import BodyReader
from .chat_request import ChatCompletionRequest, chat_request
from .completion_request import CompletionRequest, completion_requests
from .errors import APIError, framework_error, internal_error
from .gate import GenerationGate
from .generation import Generation, whole_reply
from .grammars import GrammarCompiler
from .input_items import DEFAULT_LIMIT, item_page
from .middleware import ThisComputerOnly, WithoutTrailingSlash
from .replies import Reply, sse
from .request_common import SERVE_N_CTX_ADVICE, TOOL_CHOICE_DEFAULTS, ServerLimits, unused_options
from .request_log import RequestLogMiddleware, keep_prompt, record_of
from .response_replay import replayed_events, wants_stream
from .response_store import ResponseStore
from .responses import ResponseBuilder, ResponsesRequest, chat_completion, input_messages, renamed_errors, sse_event
from .streaming import completion_stream, response_stream, streamed
from .transcript import Transcript

logger = logging.getLogger(__name__)
#: What a route's body maps to: its engine request, or a completion's (one per prompt).
Mapped = TypeVar("Mapped", GenerationRequest, list[GenerationRequest])

#: Largest request body accepted (413 beyond): 4 MiB, about a million tokens of text.
MAX_BODY_BYTES = 4 * 1024 * 1024
#: The routes served, as an unknown route's 404 lists them.
ROUTES = ("POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, GET /v1/responses/{id}, "
          "GET /v1/responses/{id}/input_items, DELETE /v1/responses/{id}, GET /v1/models, GET /v1/models/{model}, "
          "GET /health, GET /v1/health")
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
    tool_choice_default: str = "auto",
) -> FastAPI:
    """The OpenAI-compatible server application.

    Args:
        backend: generates replies (an ``InferenceWorker`` with its model loaded, or an adapter with the same
            ``generate(request, cancel)`` method).
        model_id: the model's name in ``/v1/models`` and in responses. A request may name any model (clients often
            send a fixed name): this one answers, and the response's ``model`` says so, as llama-server does.
        api_key: when given, every endpoint but ``/health`` requires ``Authorization: Bearer <api_key>`` or
            ``X-Api-Key: <api_key>`` (llama-server takes both; both right, when both are sent; compared in constant
            time; a key with spaces or line breaks around it is refused, as no client could send it).
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
        tool_choice_default: what a request with tools that sends no ``tool_choice`` gets: ``auto`` (OpenAI's), or
            ``call-then-answer`` (``chat_request.omitted_tool_choice``; ``specchat serve --tool-choice-default``).

    Returns:
        A FastAPI application without CORS, docs or OpenAPI schema; serve it with uvicorn.

    Raises:
        ValueError: an empty API key or one with spaces around it; a ``tool_choice_default`` not among
            ``request_common.TOOL_CHOICE_DEFAULTS``.
    """
    if tool_choice_default not in TOOL_CHOICE_DEFAULTS:
        raise ValueError(f"the default tool_choice is {tool_choice_default!r}: use one of "
                         f"{', '.join(TOOL_CHOICE_DEFAULTS)}")
    if api_key is not None and not api_key:
        raise ValueError("the API key is empty: give a non-empty key, or none")
    if api_key is not None and api_key != api_key.strip():
        raise ValueError("the API key has spaces or line breaks around it, which no client can send: strip them")
    defaults = defaults or GenerationSettings()
    max_tokens = defaults.context.n_ctx if max_tokens is None else max_tokens
    gate = gate or GenerationGate(max_queue)
    grammars = grammars or GrammarCompiler()
    bodies = BodyReader()
    limits = ServerLimits(defaults, max_context, max_tokens, grammars.schema_grammar, n_ctx_advice, tool_choice_default)
    kept_responses = ResponseStore()
    created = int(time.time())
    app = FastAPI(title="SpecChat", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(WithoutTrailingSlash)

    if api_key is None:
        app.add_middleware(ThisComputerOnly)
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
        refusal = framework_error(error.status_code, str(error.detail))
        return JSONResponse(refusal.body(), status_code=error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        logger.error("unexpected error in the server", exc_info=error)
        return JSONResponse(internal_error("the server failed").body(), status_code=500)

    def authorize(request: Request) -> None:
        """Pass a request that sends the key as ``Authorization: Bearer KEY`` or ``X-Api-Key: KEY`` (llama-server
        takes both), every key it sends being the server's; else a 401."""
        if api_key is None:
            return
        sent = []
        if "authorization" in request.headers:
            scheme, _, token = request.headers["authorization"].partition(" ")
            sent.append(token.strip() if scheme.lower() == "bearer" else None)
        if request.headers.get("x-api-key"):
            sent.append(request.headers["x-api-key"].strip())
        if not sent or not all(key is not None and hmac.compare_digest(key.encode(), api_key.encode()) for key in sent):
            raise APIError(
                401,
                "missing or wrong API key: send the server's key as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'",
                type="authentication_error",
                code="invalid_api_key",
            )

    def model_object() -> dict:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "specchat"}

    @app.api_route("/health", methods=["GET", "HEAD"])
    @app.api_route("/v1/health", methods=["GET", "HEAD"])  # llama-server serves both paths
    async def health() -> dict:
        """No key needed: ``status`` ok, ``busy`` (a reply is generating), ``waiting`` (requests queued); HEAD
        (``wget --spider``, ``curl -I``) gets the status line alone."""
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

    async def engine_request_of(mapped: Callable[[], Mapped], parsed, schema_fields: tuple[str, ...],
                                size: int) -> Mapped:
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

        def mapped() -> list[GenerationRequest]:  # a text completion's: one per prompt
            return [chat_request(parsed, limits)] if chat else completion_requests(parsed, limits)

        engine_requests = await engine_request_of(mapped, parsed, ("response_format", "tools"), len(body))
        engine_request = engine_requests[0]
        if isinstance(engine_request.prompt, tuple):
            logged = f"({len(engine_request.prompt)} token ids)"
        elif engine_request.prompt is not None:
            logged = engine_request.prompt
        elif engine_request.messages:
            logged = engine_request.messages[-1]["content"] or ""
        else:  # a chat of system (or developer) messages alone: they are its system prompt, no message is left
            logged = engine_request.system_prompt
        if len(engine_requests) > 1:
            logged += f" (and {len(engine_requests) - 1} more prompts)"
        keep_prompt(request.scope, logged)
        reply = Reply.new(model_id, chat, unused_options(parsed, engine_request.settings))
        run = Generation(backend, gate, engine_requests, draft_advice, record_of(request.scope))
        if not parsed.stream:
            events = await whole_reply(request, run)
            if events is None:
                return Response(status_code=499)  # the client left: nobody reads this
            replies = [_answer(reply, one, its) for one, its in zip(engine_requests, _per_reply(events))]
            if len(replies) > 1:
                return JSONResponse(reply.several([(stats, text, logprobs) for stats, text, logprobs, _ in replies]))
            return JSONResponse(reply.response(*replies[0]))
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)

        def chunks_after(first: list[Event]) -> AsyncIterator[bytes]:
            transcripts = [Transcript(reply, one) for one in engine_requests]
            return completion_stream(reply, run, first, include_usage, transcripts)

        return await streamed(request, run, chunks_after, lambda error: sse(error.body()))

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
        conversation = kept + input_messages(parsed.input, kept)

        def mapped() -> GenerationRequest:
            chat = chat_completion(parsed, conversation)
            return renamed_errors(lambda: chat_request(chat, limits))

        engine_request = await engine_request_of(mapped, parsed, ("text", "tools"), len(body))
        keep_prompt(request.scope, conversation[-1]["content"] or "")
        builder = ResponseBuilder(model_id, parsed, engine_request, conversation)
        if not parsed.store:
            kept_responses.not_stored(builder.id)
        run = Generation(backend, gate, engine_request, draft_advice, record_of(request.scope))
        if not parsed.stream:
            events = await whole_reply(request, run)
            if events is None:
                return Response(status_code=499)
            builder.take(events)
            if parsed.store:
                kept_responses.put(builder.id, builder.conversation(), builder.response(), builder.inputs)
            return JSONResponse(builder.response())

        def events_after(first: list[Event]) -> AsyncIterator[bytes]:
            return response_stream(builder, run, first, kept_responses if parsed.store else None)

        return await streamed(request, run, events_after, lambda error: sse_event(builder.error(error)))

    @app.get("/v1/responses/{response_id}")
    async def retrieve_response(request: Request, response_id: str, stream: str | None = None,
                                starting_after: str | None = None) -> Response:
        """A stored response as its create call returned it, or with ``stream`` true as the events its streaming
        create sent (``response_replay``, after the sequence number ``starting_after``); 404 naming an id not
        kept."""
        authorize(request)
        streams = wants_stream(stream)
        response = kept_responses.response(response_id)
        if not streams:
            return JSONResponse(response)
        replay = b"".join(sse_event(event) for event in replayed_events(response, starting_after))
        return Response(replay, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.get("/v1/responses/{response_id}/input_items")
    async def response_input_items(request: Request, response_id: str, order: str = "desc",
                                   limit: str = str(DEFAULT_LIMIT), after: str | None = None) -> dict:
        """A stored response's input items as OpenAI lists them (``input_items``: newest first unless ``order`` is
        asc, ``limit`` a page, after the item ``after``); 404 naming an id not kept."""
        authorize(request)
        return item_page(response_id, kept_responses.input_items(response_id), order, limit, after)

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request, response_id: str) -> dict:
        """Drop a stored response: ``{"id", "object": "response.deleted", "deleted": true}``; 404 naming an id not
        kept."""
        authorize(request)
        return kept_responses.delete(response_id)

    app.state.gate = gate
    app.state.grammars = grammars
    app.state.responses = kept_responses
    return app


def _per_reply(events: list[Event]) -> list[list[Event]]:
    """The events of each reply of ``events`` (those of a completion's prompts, one after another), each list ending
    with its reply's ``Finished``."""
    replies: list[list[Event]] = [[]]
    for event in events:
        replies[-1].append(event)
        if isinstance(event, Finished):
            replies.append([])
    return replies[:-1]


def _answer(reply: Reply, request: GenerationRequest, events: list[Event]):
    """One finished reply's ``(stats, text, logprobs, calls)``, for :meth:`Reply.response` (``request``: its engine
    request; ``logprobs`` None when not asked, ``calls`` None when it wrote none)."""
    transcript = Transcript(reply, request)
    parts = [transcript.take(event) for event in events]
    text = "".join(part for part, _ in parts)
    logprobs = transcript.merged([entries for _, entries in parts]) if transcript.logprobs else None
    calls = next((event.calls for event in events if isinstance(event, ToolCalls)), None)
    return events[-1].stats, text, logprobs, calls


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
