"""The OpenAI wire format of ``specchat serve``: request models, their mapping to a ``GenerationRequest``, the
response and stream-chunk objects, and OpenAI's error JSON.

Shapes follow OpenAI's API reference (https://platform.openai.com/docs/api-reference/chat and
``/completions``). SpecChat adds one documented extension field each way:

* request ``specchat``: ``{"mode": "ar"|"spec_model"|"spec_lookup", "k", "adaptive_k", "n_ctx", "n_keep",
  "n_discard"}``, every key optional (the server's defaults, from ``specchat serve``'s flags, fill the rest);
* response ``specchat``: the reply's statistics (:func:`stats_object`), in a non-streamed response and in the
  stream's chunk that carries ``finish_reason`` (and in the usage chunk, when asked for). Streamed content chunks
  carry ``specchat.from_draft`` (per token) and ``specchat.steps`` (the decode steps that ended there).

Everything a client can get wrong is refused here as an :class:`APIError` (HTTP 400, ``param`` naming the
field), never passed on to the engine as something it would fail on.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app.backends.protocol import GenerationRequest
from inference.events import GenerationStats, StepStats
from inference.settings import ContextSettings, Decoding, GenerationSettings, SettingError, SpeculativeSettings

#: Sampling defaults of a request that leaves them out: OpenAI's (temperature 1, top_p 1), not the engine's greedy.
OPENAI_TEMPERATURE = 1.0
OPENAI_TOP_P = 1.0

#: Roles a message may have; ``developer`` is OpenAI's newer name for ``system``.
SYSTEM_ROLES = ("system", "developer")

#: Engine setting names (``SettingError.field``) as the request names them.
_PARAMS = {
    "max_new_tokens": "max_tokens",
    "stop_strings": "stop",
    "decoding": "specchat.mode",
    "k": "specchat.k",
    "n_ctx": "specchat.n_ctx",
    "n_keep": "specchat.n_keep",
    "n_discard": "specchat.n_discard",
}


class APIError(Exception):
    """An error answered in OpenAI's JSON: ``{"error": {"message", "type", "param", "code"}}``.

    Attributes:
        status: the HTTP status; message: one line saying what is wrong and what to do; type: OpenAI's error
        type (``invalid_request_error``, ``authentication_error``, ``rate_limit_error``, ``server_error``...);
        param: the request field at fault, or None; code: a short machine-readable code, or None;
        headers: extra response headers (``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        """The JSON object of the error."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Strict(BaseModel):
    """Types are checked as JSON states them ("0.5" is not a number); unknown fields are ignored, as OpenAI's
    clients send fields such as ``metadata`` or ``store`` that change nothing here."""

    model_config = ConfigDict(strict=True, extra="ignore")


class SpecChatOptions(BaseModel):
    """The ``specchat`` request field: SpecChat's own knobs (unknown keys are refused, to catch typos)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    mode: Literal["ar", "spec_model", "spec_lookup"] | None = None
    k: int | None = None
    adaptive_k: bool | None = None
    n_ctx: int | None = None
    n_keep: int | Literal["auto"] | None = None
    n_discard: int | None = None


class StreamOptions(_Strict):
    include_usage: bool = False


class ContentPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    role: str
    content: str | list[ContentPart] | None = None


class _GenerationFields(_Strict):
    """Fields both endpoints take."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None  # vLLM's and OpenVINO Model Server's name for CTRL's penalty
    repeat_penalty: float | None = None  # llama.cpp's (llama-server, Ollama) name for it
    repeat_last_n: int | None = None  # llama.cpp's window of the repetition penalty, in tokens
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    logprobs: Any = None
    logit_bias: Any = None
    specchat: SpecChatOptions | None = None


class ChatCompletionRequest(_GenerationFields):
    """``POST /v1/chat/completions``."""

    messages: list[Message]
    max_completion_tokens: int | None = None
    top_logprobs: Any = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    response_format: Any = None
    parallel_tool_calls: Any = None


class CompletionRequest(_GenerationFields):
    """``POST /v1/completions``."""

    prompt: str | list[str]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


def parse(model: type[BaseModel], body: bytes) -> Any:
    """The request ``body`` (JSON bytes) as ``model``.

    Raises:
        APIError: 400: not JSON, not an object, or a field of the wrong type (``param`` names it, e.g.
            ``messages[0].role``).
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON ({error}): send a JSON object", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        param = _location(first["loc"])
        raise APIError(400, f"{param}: {first['msg']}", param=param, code="invalid_type") from None


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none"})


def _location(loc: tuple) -> str:
    """pydantic's error location as a field path: ``("messages", 0, "role")`` -> ``messages[0].role``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _TYPE_TAGS or not str(part).isidentifier():
            continue  # the branch of a union pydantic tried (``str``, ``list[str]``...), not a field
        else:
            path += f".{part}" if path else str(part)
    return path


def asks_for_nothing(name: str, value: Any) -> bool:
    """True when an unsupported field's value asks for nothing, as many clients always send it: left out, false,
    empty, ``tool_choice`` "none" or "auto" (no tools), ``response_format`` ``{"type": "text"}``,
    ``top_logprobs`` 0, ``parallel_tool_calls`` either way (no tools)."""
    if value is None or value is False or (isinstance(value, list | dict) and not value):
        return True
    if name == "tool_choice":
        return value in ("none", "auto")
    if name == "response_format":
        return value == {"type": "text"}
    if name == "top_logprobs":
        return value == 0 and not isinstance(value, bool)
    return name == "parallel_tool_calls" and isinstance(value, bool)


def _unsupported(request: BaseModel, fields: tuple[str, ...]) -> None:
    for name in fields:
        if not asks_for_nothing(name, getattr(request, name)):
            raise APIError(400, f"{name} is not supported by SpecChat's server: leave it out", param=name, code="unsupported")


def _message_text(message: Message, index: int) -> str:
    """The text of a message (its text parts joined); images, audio and files are refused."""
    content = message.content
    if content is None:
        raise APIError(400, f"messages[{index}].content is missing: give the message's text", param=f"messages[{index}].content")
    if isinstance(content, str):
        return content
    texts = []
    for part_index, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise APIError(
                400,
                f"messages[{index}].content[{part_index}] is of type {part.type!r}: SpecChat's models read text only "
                "(no images, audio or files); send text parts",
                param=f"messages[{index}].content[{part_index}].type",
                code="unsupported",
            )
        texts.append(part.text)
    return "".join(texts)


def chat_request(body: ChatCompletionRequest, defaults: GenerationSettings, max_context: int | None) -> GenerationRequest:
    """The engine request of a chat completion: leading system (or developer) messages become the system prompt,
    the others the conversation, in order.

    Raises:
        APIError: 400 naming the field: empty messages, an unknown role, non-text content, tools, ``n`` other
            than 1, a setting out of range.
    """
    _unsupported(body, ("tools", "tool_choice", "functions", "function_call", "response_format", "parallel_tool_calls",
                        "logprobs", "top_logprobs", "logit_bias"))
    if not body.messages:
        raise APIError(400, "messages is empty: send at least one message", param="messages")
    system, messages = [], []
    for index, message in enumerate(body.messages):
        if message.role not in SYSTEM_ROLES + ("user", "assistant"):
            raise APIError(
                400,
                f"messages[{index}].role is {message.role!r}: SpecChat's server takes system, developer, user and "
                "assistant messages (no tools)",
                param=f"messages[{index}].role",
            )
        if getattr(message, "tool_calls", None):
            raise APIError(400, "tool calls are not supported: leave tool_calls out", param=f"messages[{index}].tool_calls")
        text = _message_text(message, index)
        if message.role in SYSTEM_ROLES and not messages:
            system.append(text)
        else:
            messages.append({"role": "system" if message.role in SYSTEM_ROLES else message.role, "content": text})
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    settings = _settings(body, max_tokens, max_param, defaults, max_context)
    return GenerationRequest(messages=messages, system_prompt="\n\n".join(system), settings=settings)


def completion_request(body: CompletionRequest, defaults: GenerationSettings, max_context: int | None) -> GenerationRequest:
    """The engine request of a text completion (the prompt continued as is, without the chat template).

    Raises:
        APIError: 400 naming the field: an empty prompt or several, ``echo``/``suffix``/``best_of``, ``n`` other
            than 1, a setting out of range.
    """
    _unsupported(body, ("logprobs", "logit_bias", "echo", "suffix"))
    if body.best_of not in (None, 1):
        raise APIError(400, "best_of must be 1 (SpecChat generates one reply)", param="best_of")
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise APIError(400, f"prompt holds {len(prompt)} prompts: send one (a string)", param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise APIError(400, "prompt is empty: send the text to continue", param="prompt")
    settings = _settings(body, body.max_tokens, "max_tokens", defaults, max_context)
    return GenerationRequest(messages=[], system_prompt="", settings=settings, prompt=prompt)


def _settings(
    body: _GenerationFields, max_tokens: int | None, max_param: str, defaults: GenerationSettings, max_context: int | None
) -> GenerationSettings:
    """The request's settings on top of the server's ``defaults``, validated (``max_context``: the model's bound
    of n_ctx)."""
    if body.n not in (None, 1):
        raise APIError(400, f"n must be 1 (SpecChat generates one choice per request), got {body.n}", param="n")
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    sampling = replace(
        defaults.sampling,
        temperature=OPENAI_TEMPERATURE if body.temperature is None else body.temperature,
        top_p=OPENAI_TOP_P if body.top_p is None else body.top_p,
        seed=body.seed,
        stop_strings=stop,
        **{name: value for name, value in (
            ("max_new_tokens", max_tokens),
            ("presence_penalty", body.presence_penalty),
            ("frequency_penalty", body.frequency_penalty),
            ("repetition_penalty", body.repetition_penalty if body.repetition_penalty is not None else body.repeat_penalty),
            ("repeat_last_n", body.repeat_last_n),
        ) if value is not None},
    )
    options = body.specchat or SpecChatOptions()
    context = ContextSettings(
        n_ctx=defaults.context.n_ctx if options.n_ctx is None else options.n_ctx,
        n_keep=defaults.context.n_keep if options.n_keep is None else options.n_keep,
        n_discard=defaults.context.n_discard if options.n_discard is None else options.n_discard,
    )
    speculative = SpeculativeSettings(
        k=defaults.speculative.k if options.k is None else options.k,
        adaptive=defaults.speculative.adaptive if options.adaptive_k is None else options.adaptive_k,
        lookup_max_ngram=defaults.speculative.lookup_max_ngram,
    )
    decoding = defaults.decoding if options.mode is None else Decoding(options.mode)
    settings = GenerationSettings(decoding=decoding, sampling=sampling, context=context, speculative=speculative)
    try:
        settings.validate(max_context)
    except SettingError as error:
        raise setting_error(error, max_param) from None
    return settings


def setting_error(error: SettingError, max_param: str = "max_tokens") -> APIError:
    """A ``SettingError`` as a 400 naming the request field (``max_tokens``, ``stop``, ``specchat.n_ctx``...), in
    the message too: "max_tokens must be >= 1, got 0", not the engine's "max_new_tokens must be ..."."""
    param = max_param if error.field == "max_new_tokens" else _PARAMS.get(error.field, error.field)
    return APIError(400, error.renamed(param), param=param, code="invalid_value")


@dataclass(frozen=True)
class Reply:
    """Identity of one response: ``id`` (``chatcmpl-...`` or ``cmpl-...``), ``created`` (Unix seconds),
    ``model`` (the served model's id), ``chat`` (chat completion, else text completion)."""

    id: str
    created: int
    model: str
    chat: bool

    @classmethod
    def new(cls, model: str, chat: bool) -> "Reply":
        """A fresh id, created now."""
        return cls(f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time()), model, chat)

    def _head(self, streamed: bool) -> dict:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "system_fingerprint": None}

    def response(self, stats: GenerationStats) -> dict:
        """The non-streamed response of a finished reply."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": stats.text}}
        else:
            choice = {"index": 0, "text": stats.text}
        choice.update(logprobs=None, finish_reason=finish_reason(stats))
        return {**self._head(False), "choices": [choice], "usage": usage(stats), "specchat": stats_object(stats)}

    def chunk(self, text: str | None, *, role: bool = False, finish: str | None = None, extension: dict | None = None,
              include_usage: bool = False) -> dict:
        """One stream chunk: ``text`` as the delta (None: no content), ``role`` announces the assistant (first
        chunk), ``finish`` its finish_reason; ``extension`` its ``specchat`` field. With ``include_usage`` the
        chunk carries ``"usage": null`` (OpenAI's shape when the client asked for a usage chunk)."""
        if self.chat:
            delta = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text or ""}
        choice.update(logprobs=None, finish_reason=finish)
        chunk = {**self._head(True), "choices": [choice]}
        if include_usage:
            chunk["usage"] = None
        if extension:
            chunk["specchat"] = extension
        return chunk

    def usage_chunk(self, stats: GenerationStats) -> dict:
        """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage and statistics."""
        return {**self._head(True), "choices": [], "usage": usage(stats), "specchat": stats_object(stats)}


def finish_reason(stats: GenerationStats) -> str:
    """OpenAI's finish_reason: ``length`` when max_tokens ended the reply, else ``stop``."""
    return "length" if stats.stop_reason == "max_new_tokens" else "stop"


def usage(stats: GenerationStats) -> dict:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens`` counts the prompt tokens the KV cache
    already held (not prefilled again)."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.new_tokens,
        "total_tokens": stats.prompt_tokens + stats.new_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.prompt_tokens - stats.prefilled_tokens},
    }


def stats_object(stats: GenerationStats) -> dict:
    """The response's ``specchat`` field: the reply's statistics.

    Keys: ``ttft_ms`` (prefill + first token, ms), ``tokens_per_s`` (decode rate after the first token),
    ``acceptance_rate`` (accepted / drafted, null without drafts), ``drafted``, ``accepted``, ``discarded_tokens``
    and ``rolls`` (rolling context), ``prefilled_tokens`` and ``prompt_tokens`` (computed / whole prompt),
    ``mode`` (``ar``/``spec``), ``drafter`` (``model``/``lookup``/null), ``final_k``, ``fallback_tokens``,
    ``stop_reason`` (``eos``, ``stop_string``, ``max_new_tokens``, ``cancelled``).
    """
    return {
        "ttft_ms": round(stats.ttft_ms, 3),
        "tokens_per_s": round(stats.decode_tokens_per_s, 3),
        "acceptance_rate": stats.acceptance_rate,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "discarded_tokens": stats.discarded_tokens,
        "rolls": stats.rolls,
        "prefilled_tokens": stats.prefilled_tokens,
        "prompt_tokens": stats.prompt_tokens,
        "mode": stats.mode,
        "drafter": stats.drafter,
        "final_k": stats.final_k,
        "fallback_tokens": stats.fallback_tokens,
        "stop_reason": stats.stop_reason,
    }


def step_object(step: StepStats) -> dict:
    """One decode step in a content chunk's ``specchat.steps``."""
    return {"drafted": step.drafted, "accepted": step.accepted, "emitted": step.emitted, "k": step.k}


def sse(data: dict | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line (``[DONE]`` is sent as is)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
