"""Replies from a remote OpenAI-compatible server (OpenVINO Model Server, vLLM, llama-server, Ollama, SpecChat's own
``specchat serve``), with the contract of :meth:`app.backends.worker.InferenceWorker.generate`: the backend
(:class:`RemoteBackend`), where it points (:class:`RemoteTarget`, the base URL's checks) and the model list. Beside
it: ``remote_stream`` (chunks read into events, timed here), ``remote_io`` (cancellable, bounded reads),
``remote_errors`` (:class:`~app.backends.remote_errors.RemoteError` and its messages).

Rules:
- The base URL is taken as given (``http://host:8000/v1``; OpenVINO Model Server's ends in ``/v3``; one without a
  scheme, ``localhost:8080/v1``, as ``http://``): the routes ``/models`` and ``/chat/completions`` are appended to
  its path, and its query (``?api-version=...``, as Azure's) is kept on every request (:func:`route_url`).
- Replies stream (server-sent events, ``stream_options.include_usage``); a server that answers with a whole
  ``chat.completion`` (or an error object) in JSON instead, as llama-server and some proxies may, is read as a
  stream of one event (:func:`~app.backends.remote_stream.whole_reply`); a stream that ends without any event (the
  server failed before the reply began, as llama-cpp-python's does for a chat longer than its context) is asked for
  once more without streaming, so that the server's answer (its error: "maximum context length is 512 tokens...")
  says why. Every streamed delta becomes a
  :class:`~inference.events.TextDelta` (``token_id`` -1: the API sends text, not ids) and a
  :class:`~inference.events.StepStats` timed on this side, so that the live graph shows client-side tokens/s. The
  final :class:`~inference.events.Finished` carries TTFT and decode tokens/s measured here, token counts from
  ``usage`` when the server sends it, and, from a SpecChat server, its ``specchat`` extension (drafted, accepted,
  discarded tokens, rolls, mode, what each drafter did), so that the acceptance graph works too, and the footer names
  the drafters of a remote Auto reply.
- From SpecChat's server, a ``specchat`` object in a content chunk says ``from_draft`` (its delta came from accepted
  drafts: the draft highlighting) and lists the decode ``steps`` that ended there (each a StepStats with its drafted
  and accepted tokens: the acceptance curve).
- Stop works at all times: the cancel event is polled every :data:`~app.backends.remote_io.CANCEL_POLL_S` while
  waiting for the server, also while it sends nothing.
- Every failure is a :class:`~app.backends.remote_errors.RemoteError` whose one-line message says what happened and
  what to do. One raised after text arrived follows a ``Finished`` event (stop reason ``interrupted``), so that the
  partial reply is recorded.
- A server is not trusted: the stream is split into lines at CR and LF only (the SSE rule; JSON may carry U+2028
  unescaped), no line may pass :data:`~app.backends.remote_io.MAX_LINE_BYTES`, no model list
  :data:`MAX_BODY_BYTES`, an error body is read up to :data:`~app.backends.remote_io.MAX_ERROR_BYTES`, a reply may
  not pass its ``max_new_tokens`` by more than a margin (:func:`~app.backends.remote_stream.reply_limits`), and
  JSON of another shape than OpenAI's (or nested deeper than :data:`~app.backends.remote_errors.MAX_JSON_DEPTH`) is
  a RemoteError, never a TypeError.
- Credentials stay out of what is shown and stored: a base URL with ``user:password@`` is refused
  (:func:`check_base_url`), a URL a message quotes shows the secret values of its query (``?api_key=``, ``?key=``,
  ``?token=``...) as ``***`` (:func:`~app.backends.remote_errors.shown_url`; the requests carry them), and
  :func:`plain_http_warning` says when a key would cross the network unencrypted.

Sources: the OpenAI API reference (chat completions, streaming, ``stream_options``; ``GET /models``); OpenVINO Model
Server's OpenAI API (``/v3/chat/completions``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from inference.constraints import json_object_grammar
from inference.events import Event, Finished
from inference.settings import Decoding, GenerationSettings

from .. import bounded_json
from ..binding import is_loopback
from .protocol import GenerationRequest
from .remote_errors import CUT_TEXT, MAX_JSON_DEPTH, RemoteError, shown_url, status_error, stream_error, transport_error
from .remote_io import Cancelled, error_body, event_lines, or_cancel, read_body
from .remote_stream import REMOTE_CUT, ReplyClock, chunk_choices, parse_chunk, reply_limits, too_long, whole_reply

#: Seconds to wait for the TCP (and TLS) connection.
CONNECT_TIMEOUT_S = 10.0
#: Seconds the server may stay silent (before the first token: the prefill of a long prompt) before the reply is
#: given up with a read-timeout error.
READ_TIMEOUT_S = 120.0
#: OpenAI finish reasons -> the engine's stop reasons.
_FINISH_REASONS = {"stop": "eos", "length": "max_new_tokens"}
#: A model id that is a file path from a root (``/``, ``~/``, ``./``, ``../``, ``C:\\``, ``C:/``): shown by its file name.
_FILE_PATH = re.compile(r"^(/|~/|\.{1,2}/|[A-Za-z]:[/\\])")
#: Largest ``GET /models`` answer, and largest whole JSON reply to a streamed request, bytes.
MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RemoteTarget:
    """Where remote replies come from.

    Attributes:
        base_url: the API's base, e.g. ``http://host:8000/v1`` (taken as given; a trailing ``/`` is dropped; a
            query is kept on every request).
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
        return urlsplit(with_scheme(self.root)).netloc.rpartition("@")[2] or self.root

    def describe(self) -> str:
        """``Qwen2.5-7B on gpu-box:8000 (remote)``: the model as :func:`shown_model` names it."""
        return f"{shown_model(self.model)} on {self.host} (remote)"

    def is_label(self, label: str) -> bool:
        """Whether ``label`` names this model on this server: :meth:`describe`'s, or the one replies recorded before
        a model's file path was shown by its file name (the whole id)."""
        return label in (self.describe(), f"{self.model} on {self.host} (remote)")


@dataclass(frozen=True)
class RemoteModel:
    """One entry of ``GET /models``.

    Attributes:
        id: the model id to request; specchat: the server is SpecChat's (it offers autoregressive and speculative
            decoding, chosen per request with the ``specchat`` extension field).
    """

    id: str
    specchat: bool = False


def shown_model(model: str) -> str:
    """The name a model id is shown by: a file path's file name (llama.cpp's servers list their model by the path
    given to ``-m``, ``/home/me/models/qwen2.5-7b-q4_k_m.gguf``; vLLM a folder's: ``/models/Qwen2.5-7B``), else the id
    as it is (``Qwen/Qwen2.5-7B-Instruct``, ``llama3.2:latest``). The server is still asked by the whole id."""
    path = model.strip()
    if _FILE_PATH.match(path) or (("/" in path or "\\" in path) and path.lower().endswith(".gguf")):
        return re.split(r"[/\\]", path.rstrip("/\\"))[-1] or model
    return model


def with_scheme(url: str) -> str:
    """``url`` stripped, with ``http://`` before it when it names no scheme (``localhost:8080/v1``, as LM Studio
    and Jan take it)."""
    url = url.strip()
    return url if "://" in url or not url else f"http://{url}"


def check_base_url(url: str) -> str:
    """``url`` stripped, its path without a trailing ``/`` (``http://`` put before it when it names no scheme:
    :func:`with_scheme`), if it is an ``http(s)://host...`` URL without a user name or password.

    Raises:
        RemoteError: it is not (the message says what a base URL looks like), or it holds ``user:password@``
            (which would be shown in reply footers and kept in the settings file; the message does not repeat it).
    """
    given = shown_url(url.strip().rstrip("/"))
    try:
        parts = urlsplit(with_scheme(url))
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:  # e.g. an unclosed "[" of an IPv6 address
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in parts.netloc):
        what = f"{given} is not a server address" if given else "The base URL is empty"
        raise RemoteError(f"{what}: enter one like http://HOST:8000/v1 (OpenVINO Model Server: http://HOST:8000/v3)")
    if "@" in parts.netloc:
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        raise RemoteError(
            f"The base URL holds a user name or password (…@{parts.netloc.rpartition('@')[2]}): remove it and enter "
            f"{shown}; put the server's key in the API key field (sent as a Bearer token, never kept in the settings "
            "file)"
        )
    return parts._replace(path=parts.path.rstrip("/")).geturl()


def route_url(base_url: str, route: str) -> str:
    """The URL of an API ``route`` (``models``, ``chat/completions``) under ``base_url`` (checked by
    :func:`check_base_url`): the route appended to its path, its query kept (``http://host/v1?api-version=1`` ->
    ``http://host/v1/models?api-version=1``).

    Raises:
        RemoteError: ``base_url`` is refused by :func:`check_base_url`.
    """
    parts = urlsplit(check_base_url(base_url))
    return parts._replace(path=f"{parts.path}/{route}").geturl()


def plain_http_warning(url: str, api_key: str) -> str | None:
    """Why sending ``api_key`` to ``url`` is risky: over plain http to another computer, anyone on the network path
    can read it. None when there is no key, the URL is https, or the host is this computer (loopback); None too for
    what :func:`check_base_url` refuses (nothing is sent)."""
    try:
        parts = urlsplit(check_base_url(url))
    except RemoteError:
        return None
    host = parts.hostname
    if not api_key or parts.scheme != "http" or is_loopback(host):
        return None
    return (
        f"The API key is sent unencrypted to {host} (http://): anyone on the network path can read it. "
        "Use https:// if the server offers it, or a server on a network you trust."
    )


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
        url = route_url(self.target.base_url, "models")
        shown = shown_url(url)  # (what messages quote)
        cancel = cancel or threading.Event()
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                send = client.send(client.build_request("GET", url, headers=self._headers()), stream=True)
                response = await or_cancel(send, cancel)
                try:
                    if response.status_code != 200:
                        text = await error_body(response, cancel)
                        raise status_error(response.status_code, text, response.headers, self.target.host,
                                            self.target.model, url, listing=True, key_sent=bool(self.target.api_key))
                    body = await read_body(response, MAX_BODY_BYTES, cancel, f"{shown} sent a model list")
                finally:
                    await response.aclose()
                models = _model_list(body, shown)
        except httpx.HTTPError as error:
            raise transport_error(error, self.target.host, url, self.read_timeout_s, partial=False,
                                  listing=True) from None
        except Cancelled:
            return []
        self.specchat = any(model.specchat for model in models)
        return models

    def request_body(self, request: GenerationRequest, stream: bool = True) -> dict[str, Any]:
        """The JSON of ``POST /chat/completions`` for ``request`` (streaming, with usage, unless ``stream`` is False;
        ``top_k``, ``min_p`` and the repetition penalty, extensions of OpenAI's API, only when set; ``response_format``
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
            "stream": stream,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if sampling.top_k:  # not in OpenAI's API: llama-server, llama-cpp-python, vLLM, LM Studio, SpecChat read them
            body["top_k"] = sampling.top_k
        if sampling.min_p:
            body["min_p"] = sampling.min_p
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
            body["specchat"] = specchat_options(settings)
        return body

    async def check_prompt(self, request: GenerationRequest) -> None:
        """Nothing to refuse here (``ReplySource.check_prompt``): the server checks what it is sent when it
        generates it."""

    async def generate(self, request: GenerationRequest, cancel: threading.Event) -> AsyncIterator[list[Event]]:
        """Stream the events of one reply, in batches (one per server-sent event), like
        :meth:`InferenceWorker.generate`: set ``cancel`` to stop (the reply ends with a ``Finished`` event whose stop
        reason is ``cancelled``, within ~:data:`~app.backends.remote_io.CANCEL_POLL_S` even while the server sends
        nothing).

        Raises:
            RemoteError: the server cannot be reached, refuses the request (401, 404, 429, 5xx...), closes the stream
                mid-reply or stays silent for ``read_timeout_s``; raised after a ``Finished`` event when text had
                arrived (stop reason ``interrupted``).
        """
        try:
            async for batch in self._generate(request, cancel, stream=True):
                yield batch
        except _NoEvent:  # e.g. llama-cpp-python's answer to a chat longer than its context: its 400 says so unstreamed
            async for batch in self._generate(request, cancel, stream=False):
                yield batch

    async def _generate(
        self, request: GenerationRequest, cancel: threading.Event, stream: bool
    ) -> AsyncIterator[list[Event]]:
        """:meth:`generate`'s request, streamed or not (a whole JSON answer is read as a stream of one event).

        Raises:
            _NoEvent: ``stream`` and the server's event stream ended cleanly without any event (nothing was yielded).
        """
        url = route_url(self.target.base_url, "chat/completions")
        shown = shown_url(url)  # (what messages quote)
        clock = ReplyClock()
        extension: dict = {}
        usage: dict = {}
        finish_reason = None
        done = False
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                send = client.send(
                    client.build_request("POST", url, json=self.request_body(request, stream), headers=self._headers()),
                    stream=True,
                )
                response = await or_cancel(send, cancel)
                try:
                    if response.status_code != 200:
                        text = await error_body(response, cancel)
                        raise status_error(response.status_code, text, response.headers, self.target.host,
                                            self.target.model, url, key_sent=bool(self.target.api_key))
                    max_events, max_chars = reply_limits(request.settings.sampling.max_new_tokens)
                    if _media_type(response) == "application/json":  # a whole reply, not a stream
                        lines = whole_reply(response, MAX_BODY_BYTES, cancel, shown)
                    else:
                        lines = event_lines(response.aiter_bytes(), shown)
                    events = 0
                    while True:
                        try:
                            line = await or_cancel(anext(lines), cancel)
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
                            raise RemoteError(too_long(request.settings.sampling.max_new_tokens))
                        chunk = parse_chunk(data, shown)
                        if isinstance(chunk.get("model"), str) and chunk["model"]:
                            self.answered_by = chunk["model"]
                        if isinstance(chunk.get("error"), dict | str):
                            raise stream_error(chunk["error"], partial=clock.generated > 0)
                        choices = chunk_choices(chunk, shown)  # checks the types of the choices and usage
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
        except Cancelled:
            yield [Finished(clock.stats(extension, usage, "cancelled"))]
            return
        except (httpx.HTTPError, RemoteError) as error:
            if isinstance(error, httpx.HTTPError):
                error = transport_error(error, self.target.host, url, self.read_timeout_s,
                                        partial=clock.generated > 0)
            if clock.generated:
                yield [Finished(clock.stats(extension, usage, REMOTE_CUT))]
            raise error from None
        if not done and finish_reason is None:  # the body ended cleanly, but not the reply
            if stream and events == 0:  # nor did it begin: the server failed before its first event
                raise _NoEvent
            cut = RemoteError(CUT_TEXT)
            if clock.generated:
                yield [Finished(clock.stats(extension, usage, REMOTE_CUT))]
            raise cut
        stop_reason = extension.get("stop_reason")  # a SpecChat server's own (stop_string, eos...)
        if not isinstance(stop_reason, str) or not stop_reason:
            stop_reason = _FINISH_REASONS.get(finish_reason or "", "eos")
        yield [Finished(clock.stats(extension, usage, stop_reason))]


class _NoEvent(Exception):
    """A streamed request's answer ended without any event: the server failed before the reply began, and said
    nothing of why (llama-cpp-python's ``llama_cpp.server`` so answers a chat longer than its context, which it
    refuses with a 400 saying so when asked without streaming). :meth:`RemoteBackend.generate` asks once more,
    unstreamed, so that the message is the server's own."""


def _media_type(response: httpx.Response) -> str:
    """The media type of ``response``'s Content-Type, lower case, without parameters (``application/json``)."""
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


def _is_specchat(entry: Any, body: Any) -> bool:
    return (isinstance(entry, dict) and ("specchat" in entry or entry.get("owned_by") == "specchat")) or (
        isinstance(body, dict) and "specchat" in body
    )


def _model_list(body: bytes, url: str) -> list[RemoteModel]:
    """The models of a ``GET /models`` answer (``{"data": [{"id": ...}, ...]}``); an entry without a model id (not
    an object, no ``id``, one that is not text or is empty) is skipped.

    Raises:
        RemoteError: the answer is not such a list, or every entry of it was skipped (the message says how many).
    """
    advice = "check that the base URL is the API's (it usually ends in /v1; OpenVINO Model Server's in /v3)"
    try:
        answer = bounded_json.loads(body, MAX_JSON_DEPTH)
        entries = answer["data"]
        if not isinstance(entries, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise RemoteError(f"{url} did not answer with a model list: {advice}") from None
    models = [RemoteModel(e["id"], _is_specchat(e, answer)) for e in entries
              if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"]]  # fmt: skip
    if entries and not models:
        raise RemoteError(f"{url} listed {len(entries)} entries, none with a model id to ask for: {advice}")
    return models


def specchat_options(settings: GenerationSettings) -> dict:
    """The ``specchat`` extension a SpecChat server gets for ``settings``: the decoding mode, and with a fixed mode its
    K (or ``adaptive_k``, which chooses K per step), nothing the mode does not use (the server names such options in
    its response's ``specchat.unused``: Auto chooses its own K)."""
    options: dict[str, Any] = {"mode": settings.decoding.value}
    if settings.decoding in (Decoding.PROMPT_LOOKUP, Decoding.DRAFT_MODEL):
        options.update({"adaptive_k": True} if settings.speculative.adaptive else {"k": settings.speculative.k})
    return options
