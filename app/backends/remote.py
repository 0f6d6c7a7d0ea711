"""Replies from a remote OpenAI-compatible server (OpenVINO Model Server, vLLM, llama-server, Ollama, SpecChat's own
``specchat serve``), with the contract of :meth:`app.backends.worker.InferenceWorker.generate`.

Rules:
- The base URL is taken as given (``http://host:8000/v1``; OpenVINO Model Server's ends in ``/v3``): the routes
  ``/models`` and ``/chat/completions`` are appended to it.
- Replies stream (server-sent events, ``stream_options.include_usage``); every streamed delta becomes a
  :class:`~inference.events.TextDelta` (``token_id`` -1: the API sends text, not ids) and a
  :class:`~inference.events.StepStats` timed on this side, so that the live graph shows client-side tokens/s. The
  final :class:`~inference.events.Finished` carries TTFT and decode tokens/s measured here, token counts from
  ``usage`` when the server sends it, and, from a SpecChat server, its ``specchat`` extension (drafted, accepted,
  discarded tokens, rolls, mode), so that the acceptance graph works too.
- From SpecChat's server, a ``specchat`` object in a content chunk says ``from_draft`` (its delta came from accepted
  drafts: the draft highlighting) and lists the decode ``steps`` that ended there (each a StepStats with its drafted
  and accepted tokens: the acceptance curve).
- Stop works at all times: the cancel event is polled every :data:`CANCEL_POLL_S` while waiting for the server,
  also while it sends nothing.
- Every failure is a :class:`RemoteError` whose one-line message says what happened and what to do. One raised after
  text arrived follows a ``Finished`` event (stop reason ``interrupted``), so that the partial reply is recorded.
- A server is not trusted: the stream is split into lines at CR and LF only (the SSE rule; JSON may carry U+2028
  unescaped), no line may pass :data:`MAX_LINE_BYTES`, no model list :data:`MAX_BODY_BYTES`, an error body is read
  up to :data:`MAX_ERROR_BYTES`, a reply may not pass its ``max_new_tokens`` by more than a margin
  (:func:`reply_limits`), and JSON of another shape than OpenAI's (or nested deeper than :data:`MAX_JSON_DEPTH`) is
  a RemoteError, never a TypeError.
- Credentials stay out of what is shown and stored: a base URL with ``user:password@`` is refused
  (:func:`check_base_url`), and :func:`plain_http_warning` says when a key would cross the network unencrypted.

Sources: the OpenAI API reference (chat completions, streaming, ``stream_options``; ``GET /models``); OpenVINO Model
Server's OpenAI API (``/v3/chat/completions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from inference.constraints import json_object_grammar
from inference.events import Event, Finished, GenerationStats, StepStats, TextDelta
from inference.settings import Decoding

from .. import bounded_json
from ..binding import is_loopback
from .protocol import GenerationRequest

#: Seconds to wait for the TCP (and TLS) connection.
CONNECT_TIMEOUT_S = 10.0
#: Seconds the server may stay silent (before the first token: the prefill of a long prompt) before the reply is
#: given up with a read-timeout error.
READ_TIMEOUT_S = 120.0
#: How often a wait on the server checks the cancel event, seconds.
CANCEL_POLL_S = 0.05
#: OpenAI finish reasons -> the engine's stop reasons.
_FINISH_REASONS = {"stop": "eos", "length": "max_new_tokens"}
#: Longest line of an event stream, bytes: a line without an end is refused past it.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: Largest ``GET /models`` answer, bytes.
MAX_BODY_BYTES = 4 * 1024 * 1024
#: How much of an error answer is read for its message, bytes (the rest is not read).
MAX_ERROR_BYTES = 64 * 1024
#: Deepest nesting of lists and objects in a JSON answer (an OpenAI chunk nests 4 deep).
MAX_JSON_DEPTH = 32
#: Events (``data:`` lines) and characters a reply may hold beyond its ``max_new_tokens``: see :func:`reply_limits`.
EVENT_MARGIN = 64
CHARS_PER_TOKEN = 64
#: Line breaks of server-sent events: CRLF, LF or CR, nothing else (the WHATWG event-stream rule).
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")

T = TypeVar("T")


class RemoteError(RuntimeError):
    """A remote server could not give (all of) a reply; the message says what to do.

    Attributes:
        status: the HTTP status (None for connection, TLS and stream errors).
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _Cancelled(Exception):
    """The cancel event was set while waiting for the server."""


@dataclass(frozen=True)
class RemoteTarget:
    """Where remote replies come from.

    Attributes:
        base_url: the API's base, e.g. ``http://host:8000/v1`` (taken as given; a trailing ``/`` is dropped).
        model: the model id, one of those ``GET {base_url}/models`` lists.
        api_key: sent as ``Authorization: Bearer`` ("" = none).
    """

    base_url: str
    model: str = ""
    api_key: str = ""

    @property
    def root(self) -> str:
        """``base_url`` without a trailing slash."""
        return self.base_url.strip().rstrip("/")

    @property
    def host(self) -> str:
        """``host:port`` of the URL (what footers and the picker show), never a ``user:password@`` it holds."""
        return urlsplit(self.root).netloc.rpartition("@")[2] or self.root

    def describe(self) -> str:
        """``Qwen2.5-7B on gpu-box:8000 (remote)``."""
        return f"{self.model} on {self.host} (remote)"


@dataclass(frozen=True)
class RemoteModel:
    """One entry of ``GET /models``.

    Attributes:
        id: the model id to request; specchat: the server is SpecChat's (it offers autoregressive and speculative
            decoding, chosen per request with the ``specchat`` extension field).
    """

    id: str
    specchat: bool = False


def check_base_url(url: str) -> str:
    """``url`` stripped, if it is an ``http(s)://host...`` URL without a user name or password.

    Raises:
        RemoteError: it is not (the message says what a base URL looks like), or it holds ``user:password@``
            (which would be shown in reply footers and kept in the settings file; the message does not repeat it).
    """
    url = url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:  # e.g. an unclosed "[" of an IPv6 address
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RemoteError(
            f"{url or 'the base URL'} is not a server address: enter one like http://HOST:8000/v1 "
            "(OpenVINO Model Server: http://HOST:8000/v3)"
        )
    if "@" in parts.netloc:
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        raise RemoteError(
            f"The base URL holds a user name or password (…@{parts.netloc.rpartition('@')[2]}): remove it and enter "
            f"{shown}; put the server's key in the API key field (sent as a Bearer token, never kept in the settings "
            "file)"
        )
    return url


def plain_http_warning(url: str, api_key: str) -> str | None:
    """Why sending ``api_key`` to ``url`` is risky: over plain http to another computer, anyone on the network path
    can read it. None when there is no key, the URL is https, or the host is this computer (loopback)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number raises only when read
    except ValueError:  # not a URL: nothing is sent
        return None
    if not api_key or parts.scheme != "http" or not host or is_loopback(host):
        return None
    return (
        f"The API key is sent unencrypted to {host} (http://): anyone on the network path can read it. "
        "Use https:// if the server offers it, or a server on a network you trust."
    )


def reply_limits(max_new_tokens: int) -> tuple[int, int]:
    """``(events, characters)`` a streamed reply of at most ``max_new_tokens`` may hold: one ``data:`` event per token
    (twice over, for servers that send reasoning or empty deltas) plus :data:`EVENT_MARGIN`; :data:`CHARS_PER_TOKEN`
    characters per token (vocabularies' longest tokens are 16-128 bytes, their mean about 4). Past either the
    server ignores ``max_tokens``, and the reply is cut there."""
    return 2 * max_new_tokens + EVENT_MARGIN, CHARS_PER_TOKEN * max_new_tokens + CHARS_PER_TOKEN * EVENT_MARGIN


class RemoteBackend:
    """Talks to one OpenAI-compatible server (see the module doc).

    Args:
        target: the server, model and key.
        connect_timeout_s / read_timeout_s: time-outs of the connection and of each read (seconds).
        specchat: the server is SpecChat's (send the ``specchat`` extension with the decoding mode and K); None:
            as the last :meth:`list_models` found (False before).

    Attributes:
        answered_by: the model the server says wrote the last reply (its chunks' ``model``; servers such as
            llama-server answer any name with the model they serve), None until a chunk names one.
    """

    def __init__(
        self,
        target: RemoteTarget,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        specchat: bool | None = None,
    ):
        self.target = target
        self.read_timeout_s = read_timeout_s
        self.timeout = httpx.Timeout(
            connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=connect_timeout_s
        )
        self.specchat = bool(specchat)
        self.answered_by: str | None = None

    def describe_answer(self) -> str:
        """Who wrote the reply: ``MODEL on HOST (remote)``, the model as the server named it where it did."""
        return replace(self.target, model=self.answered_by).describe() if self.answered_by else self.target.describe()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        return headers

    async def list_models(self, cancel: threading.Event | None = None) -> list[RemoteModel]:
        """The models of ``GET {base_url}/models``; also sets :attr:`specchat` (any entry, or the answer, carries a
        ``specchat`` field, or an entry is ``owned_by`` specchat).

        Raises:
            RemoteError: the server cannot be reached, refuses the key, or answers something else than a model list.
        """
        url = check_base_url(self.target.base_url) + "/models"
        cancel = cancel or threading.Event()
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                send = client.send(client.build_request("GET", url, headers=self._headers()), stream=True)
                response = await _or_cancel(send, cancel)
                try:
                    if response.status_code != 200:
                        text = await _error_body(response, cancel)
                        raise _status_error(response.status_code, text, response.headers, self.target, url,
                                            listing=True)
                    body = await _read_body(response, MAX_BODY_BYTES, cancel, f"{url} sent a model list")
                finally:
                    await response.aclose()
                models = _model_list(body, url)
        except httpx.HTTPError as error:
            raise _transport_error(error, self.target, url, self.read_timeout_s, partial=False, listing=True) from None
        except _Cancelled:
            return []
        self.specchat = any(model.specchat for model in models)
        return models

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON of ``POST /chat/completions`` for ``request`` (streaming, with usage; ``response_format``
        json_object for a reply constrained to a JSON object; the ``specchat`` extension with the decoding mode, K and
        the rolling context only for a SpecChat server)."""
        settings = request.settings
        sampling = settings.sampling
        messages = ([{"role": "system", "content": request.system_prompt}] if request.system_prompt else []) + [
            {"role": m["role"], "content": m["content"]} for m in request.messages
        ]
        body: dict[str, Any] = {
            "model": self.target.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop_strings:
            body["stop"] = list(sampling.stop_strings)
        if sampling.presence_penalty:
            body["presence_penalty"] = sampling.presence_penalty
        if sampling.frequency_penalty:
            body["frequency_penalty"] = sampling.frequency_penalty
        if sampling.repetition_penalty != 1.0:  # not in OpenAI's API: sent under both names servers read
            body["repetition_penalty"] = sampling.repetition_penalty  # vLLM, OpenVINO Model Server, SpecChat
            body["repeat_penalty"] = sampling.repetition_penalty  # llama-server, Ollama
            body["repeat_last_n"] = sampling.repeat_last_n
        if settings.output.grammar is not None and settings.output.grammar == json_object_grammar():
            body["response_format"] = {"type": "json_object"}  # the window's "JSON output"
        if self.specchat:
            body["specchat"] = {"mode": settings.decoding.value, "k": settings.speculative.k}
        return body

    async def generate(self, request: GenerationRequest, cancel: threading.Event) -> AsyncIterator[list[Event]]:
        """Stream the events of one reply, in batches (one per server-sent event), like
        :meth:`InferenceWorker.generate`: set ``cancel`` to stop (the reply ends with a ``Finished`` event whose stop
        reason is ``cancelled``, within ~:data:`CANCEL_POLL_S` even while the server sends nothing).

        Raises:
            RemoteError: the server cannot be reached, refuses the request (401, 404, 429, 5xx...), closes the stream
                mid-reply or stays silent for ``read_timeout_s``; raised after a ``Finished`` event when text had
                arrived (stop reason ``interrupted``).
        """
        url = check_base_url(self.target.base_url) + "/chat/completions"
        clock = _ReplyClock()
        extension: dict = {}
        usage: dict = {}
        finish_reason = None
        done = False
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                send = client.send(
                    client.build_request("POST", url, json=self.request_body(request), headers=self._headers()),
                    stream=True,
                )
                response = await _or_cancel(send, cancel)
                try:
                    if response.status_code != 200:
                        text = await _error_body(response, cancel)
                        raise _status_error(response.status_code, text, response.headers, self.target, url)
                    max_events, max_chars = reply_limits(request.settings.sampling.max_new_tokens)
                    lines = _event_lines(response.aiter_bytes(), url)
                    events = 0
                    while True:
                        try:
                            line = await _or_cancel(anext(lines), cancel)
                        except StopAsyncIteration:
                            break
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            done = True
                            break
                        events += 1
                        if events > max_events or len(clock.text) > max_chars:
                            raise RemoteError(_too_long(request.settings.sampling.max_new_tokens))
                        chunk = _parse_chunk(data, url)
                        if isinstance(chunk.get("model"), str) and chunk["model"]:
                            self.answered_by = chunk["model"]
                        if isinstance(chunk.get("error"), dict | str):
                            raise RemoteError(
                                f"The server stopped the reply with an error: {_error_text(chunk['error'])}"
                            )
                        choices = _choices(chunk, url)  # checks the types of the choices and usage
                        usage = chunk.get("usage") or usage
                        chunk_extension = chunk.get("specchat") if isinstance(chunk.get("specchat"), dict) else {}
                        extension = {**extension, **chunk_extension}
                        for text, finish in choices:
                            finish_reason = finish or finish_reason
                            if text:
                                yield clock.delta(text, chunk_extension.get("from_draft") is True)
                        if chunk_extension:
                            yield clock.drafts(chunk_extension)
                finally:
                    await response.aclose()
        except _Cancelled:
            yield [Finished(clock.stats(request, extension, usage, "cancelled"))]
            return
        except (httpx.HTTPError, RemoteError) as error:
            if isinstance(error, httpx.HTTPError):
                error = _transport_error(error, self.target, url, self.read_timeout_s, partial=clock.generated > 0)
            if clock.generated:
                yield [Finished(clock.stats(request, extension, usage, "interrupted"))]
            raise error from None
        if not done and finish_reason is None:  # the body ended cleanly, but not the reply
            cut = RemoteError(_CUT_TEXT)
            if clock.generated:
                yield [Finished(clock.stats(request, extension, usage, "interrupted"))]
            raise cut
        stop_reason = extension.get("stop_reason")  # a SpecChat server's own (stop_string, eos...)
        if not isinstance(stop_reason, str) or not stop_reason:
            stop_reason = _FINISH_REASONS.get(finish_reason or "", "eos")
        yield [Finished(clock.stats(request, extension, usage, stop_reason))]


_CUT_TEXT = "The server closed the stream before the reply ended (the partial reply was kept): Regenerate to try again"


class _ReplyClock:
    """Client-side timing of one streamed reply: StepStats per delta, and the final GenerationStats. The server's
    context is its own: StepStats say ``n_ctx`` 0 (unknown), so no context fill is drawn for a remote reply."""

    def __init__(self):
        self.start = time.perf_counter()
        self.first: float | None = None
        self.last = self.start
        self.generated = 0
        self.text = ""
        self.drafted = self.accepted = 0

    def delta(self, text: str, from_draft: bool = False) -> list[Event]:
        """The events of one streamed delta (``from_draft``: the server says its tokens came from accepted drafts)."""
        now = time.perf_counter()
        self.first = now if self.first is None else self.first
        step_ms = (now - self.last) * 1000.0
        self.last = now
        self.generated += 1
        self.text += text
        step = StepStats(
            drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=step_ms, step_ms=step_ms, k=0,
            cache_len=0, n_ctx=0, elapsed_s=now - self.start, generated=self.generated,
        )  # fmt: skip
        return [TextDelta(text, -1, from_draft), step]

    def drafts(self, extension: dict) -> list[Event]:
        """StepStats for the drafting a chunk's ``specchat`` extension reports, so that the live graph's acceptance
        curve follows the server's: one per entry of its ``steps`` (``{drafted, accepted, emitted, k}``, as
        ``specchat serve`` sends them), else one with the increase of its running ``drafted`` / ``accepted`` totals
        beyond those already reported (none when there is no increase)."""
        steps = extension.get("steps")
        if isinstance(steps, list):
            counts = [
                (_int(s.get("drafted"), 0), _int(s.get("accepted"), 0), _int(s.get("k"), 0))
                for s in steps
                if isinstance(s, dict)
            ]
        else:
            drafted = _int(extension.get("drafted"), self.drafted) - self.drafted
            counts = [
                (drafted, _int(extension.get("accepted"), self.accepted) - self.accepted, _int(extension.get("k"), 0))
            ]
        events: list[Event] = []
        for drafted, accepted, k in counts:
            if drafted <= 0:
                continue
            events.append(StepStats(
                drafted=drafted, accepted=accepted, emitted=0, draft_ms=0.0, verify_ms=0.0, step_ms=0.0, k=k,
                cache_len=0, n_ctx=0, elapsed_s=self.last - self.start, generated=self.generated,
            ))  # fmt: skip
            self.drafted += drafted
            self.accepted += accepted
        return events

    def stats(self, request: GenerationRequest, extension: dict, usage: dict, stop_reason: str) -> GenerationStats:
        decoding = request.settings.decoding
        mode = str(extension.get("mode") or "ar")
        if mode in {d.value for d in Decoding}:  # the extension may name the request's mode value
            mode = Decoding(mode).mode
        new_tokens = _int(usage.get("completion_tokens"), self.generated)
        span = (self.last - self.first) if self.first is not None else 0.0
        rate = (new_tokens - 1) / span if new_tokens > 1 and span > 0 else 0.0
        return GenerationStats(
            mode=mode,
            drafter=_str(extension.get("drafter")) or (decoding.drafter if mode == "spec" else None),
            prompt_tokens=_int(usage.get("prompt_tokens"), 0),
            reused_tokens=_int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens"), 0),
            prefilled_tokens=_int(extension.get("prefilled_tokens"), _int(usage.get("prompt_tokens"), 0)),
            new_tokens=new_tokens,
            ttft_ms=((self.first - self.start) * 1000.0) if self.first is not None else 0.0,
            decode_tokens_per_s=rate,
            tpot_ms=1000.0 / rate if rate else 0.0,
            drafted=_int(extension.get("drafted"), 0),
            accepted=_int(extension.get("accepted"), 0),
            discarded_tokens=_int(extension.get("discarded_tokens"), 0),
            rolls=_int(extension.get("rolls"), 0),
            stop_reason=stop_reason,
            text=self.text,
        )


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _is_specchat(entry: Any, body: Any) -> bool:
    return (isinstance(entry, dict) and ("specchat" in entry or entry.get("owned_by") == "specchat")) or (
        isinstance(body, dict) and "specchat" in body
    )


async def _or_cancel(awaitable: Awaitable[T], cancel: threading.Event) -> T:
    """Await ``awaitable``, checking ``cancel`` every CANCEL_POLL_S.

    Raises:
        _Cancelled: ``cancel`` was set first (the awaitable is cancelled, as it is when the caller's task is).
    """
    task = asyncio.ensure_future(awaitable)
    try:
        while not task.done():
            if cancel.is_set():
                raise _Cancelled
            await asyncio.wait({task}, timeout=CANCEL_POLL_S)
    except BaseException:  # _Cancelled, or the caller was cancelled (the window closes): no read is left behind
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    return task.result()


async def _event_lines(chunks: AsyncIterator[bytes], url: str) -> AsyncIterator[str]:
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
                f"{url} sent a line longer than {MAX_LINE_BYTES // (1024 * 1024)} MB: not an OpenAI stream "
                "(the partial reply was kept); check the base URL and the server"
            )
        if rest:
            partial.append(rest)
    if partial:
        yield b"".join(partial).decode("utf-8", "replace")


async def _read_body(response: httpx.Response, limit: int, cancel: threading.Event, what: str) -> bytes:
    """The whole body of ``response``, refused past ``limit`` bytes (``what`` starts the message: "URL sent ...").

    Raises:
        RemoteError: the body is larger. _Cancelled: ``cancel`` was set.
    """
    parts, size = [], 0
    chunks = response.aiter_bytes()
    while True:
        try:
            chunk = await _or_cancel(anext(chunks), cancel)
        except StopAsyncIteration:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise RemoteError(f"{what} larger than {limit // (1024 * 1024)} MB: check the base URL and the server")
        parts.append(chunk)


async def _error_body(response: httpx.Response, cancel: threading.Event) -> str:
    """The first :data:`MAX_ERROR_BYTES` of an error answer as text (the rest is never read)."""
    parts, size = [], 0
    chunks = response.aiter_bytes()
    while size < MAX_ERROR_BYTES:
        try:
            chunk = await _or_cancel(anext(chunks), cancel)
        except StopAsyncIteration:
            break
        parts.append(chunk[: MAX_ERROR_BYTES - size])
        size += len(chunk)
    return b"".join(parts).decode("utf-8", "replace")


def _parse_chunk(data: str, url: str) -> dict:
    try:
        chunk = bounded_json.loads(data, MAX_JSON_DEPTH)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise RemoteError(f"{url} sent something that is not an OpenAI stream ({data[:60]!r}): check the base URL")
    return chunk


def _choices(chunk: dict, url: str) -> list[tuple[str, str | None]]:
    """``(content, finish_reason)`` of each choice of a stream chunk ("" for no content).

    Raises:
        RemoteError: ``choices``, a choice, its ``delta``, ``content`` or ``finish_reason``, or the chunk's ``usage``
            is not of OpenAI's type.
    """

    def wrong(what: str) -> RemoteError:
        return RemoteError(f"{url} sent a stream chunk whose {what}: not an OpenAI stream; check the base URL")

    if chunk.get("usage") is not None and not isinstance(chunk["usage"], dict):
        raise wrong("usage is not an object")
    choices = chunk.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        raise wrong("choices is not a list")
    found = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise wrong("choice is not an object")
        delta = choice.get("delta")
        if delta is not None and not isinstance(delta, dict):
            raise wrong("delta is not an object")
        content = (delta or {}).get("content")
        if content is not None and not isinstance(content, str):
            raise wrong("content is not text")
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise wrong("finish_reason is not text")
        found.append((content or "", finish or None))
    return found


def _model_list(body: bytes, url: str) -> list[RemoteModel]:
    """The models of a ``GET /models`` answer (``{"data": [{"id": ...}, ...]}``).

    Raises:
        RemoteError: the answer is not such a list.
    """
    try:
        answer = bounded_json.loads(body, MAX_JSON_DEPTH)
        entries = answer["data"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("id"), str)
                                                    for e in entries):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise RemoteError(
            f"{url} did not answer with a model list: check that the base URL is the API's "
            "(it usually ends in /v1; OpenVINO Model Server's in /v3)"
        ) from None
    return [RemoteModel(entry["id"], _is_specchat(entry, answer)) for entry in entries]


def _too_long(max_new_tokens: int) -> str:
    return (
        f"The server sent more than a reply of at most {max_new_tokens} new tokens can hold (the partial reply was "
        "kept): it does not respect max_tokens; check the server"
    )


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or json.dumps(error)[:200])
    return str(error)[:200]


def _server_message(text: str) -> str:
    """The ``error.message`` (or ``detail``) of an error body, else its first 200 characters."""
    try:
        body = bounded_json.loads(text, MAX_JSON_DEPTH)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(body, dict):
        return _error_text(body.get("error") if body.get("error") is not None else body)
    return str(body)[:200]


def _status_error(
    status: int, text: str, headers: httpx.Headers, target: RemoteTarget, url: str, listing: bool = False
) -> RemoteError:
    """The RemoteError of an HTTP status other than 200 (``listing``: of ``GET /models``, asked from the remote
    server dialog, whose fields the advice then names, instead of a reply's)."""
    said = _server_message(text)
    said = f" (the server said: {said})" if said else ""
    if status in (401, 403):
        where = "in the API key field" if listing else "under the model picker's Remote server… (Ctrl+L)"
        message = f"{target.host} refused the API key ({status}){said}: enter the right key {where}"
    elif status == 404 and listing:
        message = (
            f"{target.host} has no model list at {url} ({status}){said}: check the base URL (usually …/v1; "
            "OpenVINO Model Server: …/v3)"
        )
    elif status == 404:
        message = (
            f"{target.host} has no model {target.model!r} or no such API route ({status} for {url}){said}: "
            "choose a model with Fetch models under the model picker's Remote server… (Ctrl+L), and check the base "
            "URL (usually …/v1; OpenVINO Model Server: …/v3)"
        )
    elif status == 429:
        after = headers.get("retry-after", "").strip()
        when = f"in {after} s" if after.isdigit() else (f"after {after}" if after else "in a moment")
        message = f"{target.host} is busy (429: too many requests){said}: retry {when}"
    elif status >= 500:
        message = f"{target.host} failed ({status}){said}: retry, or check the server's log"
    else:
        message = f"{target.host} refused the request ({status}){said}"
    return RemoteError(message, status)


def _transport_error(
    error: httpx.HTTPError, target: RemoteTarget, url: str, read_timeout_s: float, partial: bool, listing: bool = False
) -> RemoteError:
    """The RemoteError of a connection, TLS, time-out or stream failure (``partial``: text had arrived;
    ``listing``: of ``GET /models``, from the remote server dialog)."""
    kept = " (the partial reply was kept)" if partial else ""
    causes = _causes(error)
    if isinstance(error, httpx.ReadTimeout):
        again = "Fetch models again" if listing else "Regenerate"
        return RemoteError(
            f"{target.host} sent nothing for {read_timeout_s:g} s{kept}: check that the server still runs, then {again}"
        )
    if isinstance(error, httpx.TimeoutException):
        return RemoteError(
            f"{target.host} did not answer in time ({type(error).__name__}): check the address and the network"
        )
    if any(isinstance(c, ssl.SSLError) for c in causes) or "SSL" in str(error) or "certificate" in str(error).lower():
        return RemoteError(
            f"TLS error with {target.host} ({_first_line(error)}): check the server's certificate, or use http:// if "
            "it does not serve https"
        )
    if isinstance(error, httpx.ConnectError):
        text = str(error).lower()
        if any(isinstance(c, socket.gaierror) for c in causes) or any(
            word in text
            for word in ("name or service not known", "nodename nor servname", "name resolution", "getaddrinfo")
        ):
            host = urlsplit(target.root).hostname or target.host
            return RemoteError(f"The server name {host} was not found (DNS lookup failed): check the base URL")
        if (
            any(isinstance(c, ConnectionRefusedError) for c in causes)
            or "refused" in text
            or _errno(causes) == errno.ECONNREFUSED
        ):
            return RemoteError(
                f"{target.host} refused the connection: check that the server is running and the port is right"
            )
        return RemoteError(
            f"Could not connect to {target.host} ({_first_line(error)}): check the address and the network"
        )
    if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError)):
        return RemoteError(
            _CUT_TEXT
            if partial
            else f"{target.host} closed the connection without an answer: check the server's log, then retry"
        )
    return RemoteError(f"The request to {url} failed ({type(error).__name__}: {_first_line(error)}){kept}")


def _causes(error: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _errno(causes: list[BaseException]) -> int | None:
    return next((c.errno for c in causes if isinstance(c, OSError) and c.errno), None)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]
