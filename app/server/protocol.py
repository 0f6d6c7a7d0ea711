"""The OpenAI wire format of ``specchat serve``: request models, their mapping to a ``GenerationRequest``, the
response and stream-chunk objects, and OpenAI's error JSON.

Shapes follow OpenAI's API reference (https://platform.openai.com/docs/api-reference/chat and
``/completions``). SpecChat adds one documented extension field each way:

* request ``specchat``: ``{"mode": "auto"|"ar"|"spec_model"|"spec_lookup", "k", "adaptive_k", "n_ctx", "n_keep",
  "n_discard"}``, every key optional (``k``: a fixed mode's K, and Auto's in a seeded sampled reply, which drafts
  with a fixed drafter and K so that the same seed gives the same reply) (the server's defaults, from ``specchat serve``'s flags, fill the rest);
* response ``specchat``: the reply's statistics (:func:`stats_object`), in a non-streamed response and in the
  stream's chunk that carries ``finish_reason`` (and in the usage chunk, when asked for). Streamed content chunks
  carry ``specchat.from_draft`` (per token) and ``specchat.steps`` (the decode steps that ended there).

A request's omitted sampling fields take the server's defaults (``defaults.sampling``): the model's recommended
sampling (its ``generation_config.json`` over ``inference.generation_config.CHAT_DEFAULTS``), or what ``specchat
serve``'s flags say, as Ollama, llama-server and LM Studio apply their own, never OpenAI's cloud defaults
(temperature 1, top_p 1), with which a small local model writes gibberish.

Everything a client can get wrong is refused here as an :class:`APIError` (HTTP 400, ``param`` naming the
field), never passed on to the engine as something it would fail on. What one request may cost is bounded: its
JSON nests at most :data:`MAX_JSON_DEPTH` deep, it asks for at most :data:`MAX_STOP_STRINGS` stop strings of
:data:`MAX_STOP_CHARS` characters (OpenAI's bound on their number), no larger ``specchat.n_ctx`` than the server's,
and no more new tokens than the server's cap (a larger ``max_tokens`` is lowered to it, as llama-server's ``-n``);
it gives at most :data:`MAX_TOOLS` tools and :data:`MAX_SCHEMA_BYTES` of JSON schemas (``app.server.grammars``
compiles them off the event loop, within a time bound).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app import bounded_json
from app.backends.protocol import GenerationRequest
from inference.constraints import GrammarError, json_object_grammar, json_schema_grammar
from inference.events import GenerationStats, StepStats, TokenLogprob, ToolCall
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    OutputSettings,
    SettingError,
    SpeculativeSettings,
)
from inference.tools import ToolUse

#: Deepest nesting of lists and objects in a request (a chat request with tools nests about 8 deep).
MAX_JSON_DEPTH = 64
#: Most stop strings a request may give (OpenAI's bound), and their longest, in characters: a stop string holds back
#: as much streamed text as it is long, and each is looked for after every token.
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
#: Most tools a request may give (OpenAI's bound).
MAX_TOOLS = 128
#: Largest JSON schemas one request may send, all together (``response_format`` and every tool's ``parameters``),
#: in bytes of compact JSON: 256 KiB compile in about 0.4 s on 2 cores (measured with a 280 KB schema of 2,000
#: properties); a 4 MiB body of schemas would take several seconds of CPU.
MAX_SCHEMA_BYTES = 256 * 1024

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
    "grammar": "response_format",  # tools' schemas are refused with the request; one failing later is the format's
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

    mode: Literal["auto", "ar", "spec_model", "spec_lookup"] | None = None
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
    top_k: int | None = None  # llama-server's and vLLM's extension (0 or -1 = off)
    min_p: float | None = None  # llama-server's and vLLM's extension
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
    logit_bias: Any = None
    response_format: Any = None
    specchat: SpecChatOptions | None = None


class ChatCompletionRequest(_GenerationFields):
    """``POST /v1/chat/completions``."""

    messages: list[Message]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: Any = None


class CompletionRequest(_GenerationFields):
    """``POST /v1/completions``."""

    prompt: str | list[str]
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


def parse(model: type[BaseModel], body: bytes) -> Any:
    """The request ``body`` (JSON bytes) as ``model``.

    Raises:
        APIError: 400: not JSON, nested more than :data:`MAX_JSON_DEPTH` deep (``too_deep``), not an object, or a field of the wrong
            type (``param`` names it, e.g. ``messages[0].role``).
    """
    try:
        data = bounded_json.loads(body, MAX_JSON_DEPTH)
    except bounded_json.TooDeep:
        raise APIError(400, f"the request body nests lists and objects more than {MAX_JSON_DEPTH} levels deep, "
                       f"SpecChat's limit: send at most {MAX_JSON_DEPTH} levels", code="too_deep") from None
    except ValueError as error:  # not JSON, not UTF-8
        raise APIError(400, f"the request body is not valid JSON ({error}): send a JSON object", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise _invalid_field(error) from None


#: What a field takes, by pydantic's error type, in JSON's words.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
}
#: The request's objects as a client writes them, by their model's name (a ``model_type`` error's ``class_name``).
_OBJECTS = {
    "Message": 'a message object ({"role": ..., "content": ...})',
    "ContentPart": 'a content part ({"type": "text", "text": ...})',
}


def _invalid_field(error: ValidationError) -> APIError:
    """pydantic's refusal of a request as OpenAI's 400: the field at fault as the request names it
    (``messages[0].content[1].text``), what it holds and what to send instead, in JSON's words, never pydantic's
    class names. Where pydantic tried each type of a union, the field at fault is the deepest one an error reaches
    (a content part's ``text``, not the content that is not a string either), and every type it takes is named."""
    located = [(_fields(detail["loc"]), detail) for detail in error.errors()]
    fields = max((fields for fields, _ in located), key=len)
    param = _location(fields)
    details = [detail for at, detail in located if at == fields]
    kinds = {detail["type"] for detail in details}
    if "missing" in kinds:
        return APIError(400, f"{param} is missing: add it", param=param, code="missing_required_parameter")
    if "extra_forbidden" in kinds:  # only the specchat object refuses unknown keys
        *others, last = SpecChatOptions.model_fields
        return APIError(400, f"{param} is not a SpecChat option: specchat takes {', '.join(others)} and {last}",
                        param=param, code="unknown_parameter")
    expected = [_expected(detail) for detail in details]
    held = _json_value(details[0]["input"])
    if None in expected:  # a refusal this module words nowhere: pydantic's own words, with the field's path
        return APIError(400, f"{param} is {held}: {details[0]['msg']}", param=param, code="invalid_value")
    code = "invalid_value" if kinds == {"literal_error"} else "invalid_type"
    return APIError(400, f"{param} is {held}: send {' or '.join(dict.fromkeys(expected))}", param=param, code=code)


def _expected(detail: dict) -> str | None:
    """What the field of one pydantic error takes, in JSON's words (None: a kind of error not worded here)."""
    if detail["type"] == "literal_error":
        return detail["ctx"]["expected"].replace("'", '"')  # 'ar', 'spec_model' or 'spec_lookup', as JSON writes them
    if detail["type"] == "model_type":
        return _OBJECTS.get(detail["ctx"]["class_name"], "an object")
    return _EXPECTED.get(detail["type"])


def _json_value(value: Any) -> str:
    """A value of the request as JSON names it: ``the string "hot"``, ``the number 5``, ``true``, ``null``, ``a
    list``, ``an object``; ``a long string`` (or number) past 40 characters."""
    if isinstance(value, list | dict):
        return "a list" if isinstance(value, list) else "an object"
    text = json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, bool):
        return text
    kind = "string" if isinstance(value, str) else "number"
    return f"the {kind} {text}" if len(text) <= 40 else f"a long {kind}"


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none"})


def _fields(loc: tuple) -> tuple:
    """The field names and list indices of pydantic's error location, without the union branches it tried
    (``("stop", "list[str]", 1)`` -> ``("stop", 1)``)."""
    return tuple(part for part in loc
                 if isinstance(part, int) or (part not in _TYPE_TAGS and str(part).isidentifier()))


def _location(fields: tuple) -> str:
    """Field names and indices as a field path: ``("messages", 0, "role")`` -> ``messages[0].role``."""
    path = ""
    for part in fields:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def asks_for_nothing(value: Any) -> bool:
    """True when an unsupported field's value asks for nothing, as many clients always send it: left out, false,
    empty."""
    return value is None or value is False or (isinstance(value, list | dict) and not value)


def _unsupported(request: BaseModel, fields: tuple[str, ...]) -> None:
    for name in fields:
        if not asks_for_nothing(getattr(request, name)):
            raise APIError(400, f"{name} is not supported by SpecChat's server: leave it out", param=name, code="unsupported")


def _message_text(message: Message, index: int) -> str:
    """The text of a message (its text parts joined); images, audio, files and a text part without its text are
    refused."""
    content = message.content
    if content is None:
        raise APIError(400, f"messages[{index}].content is missing: give the message's text", param=f"messages[{index}].content")
    if isinstance(content, str):
        return content
    texts = []
    for part_index, part in enumerate(content):
        if part.type == "text" and part.text is None:
            raise APIError(
                400,
                f'messages[{index}].content[{part_index}] is a text part without its text: add "text": "..." to it',
                param=f"messages[{index}].content[{part_index}].text",
                code="missing_required_parameter",
            )
        if part.type != "text":
            raise APIError(
                400,
                f"messages[{index}].content[{part_index}] is of type {part.type!r}: SpecChat's models read text only "
                "(no images, audio or files); send text parts",
                param=f"messages[{index}].content[{part_index}].type",
                code="unsupported",
            )
        texts.append(part.text)
    return "".join(texts)


#: How to give ``specchat serve`` a larger n_ctx, for a request that asks more than the server's.
SERVE_N_CTX_ADVICE = "start the server with a larger --n-ctx"


def chat_request(
    body: ChatCompletionRequest,
    defaults: GenerationSettings,
    max_context: int | None,
    max_tokens: int | None = None,
    schema_grammar: Callable[[Any], str] = json_schema_grammar,
    n_ctx_advice: str = SERVE_N_CTX_ADVICE,
) -> GenerationRequest:
    """The engine request of a chat completion: leading system (or developer) messages become the system prompt,
    the others the conversation, in order (assistant tool calls and ``tool`` results included; ``defaults``,
    ``max_context``, ``max_tokens``, ``n_ctx_advice``: see :func:`_settings`; ``schema_grammar`` compiles a JSON schema, as
    ``json_schema_grammar`` or a cache of it).

    Raises:
        APIError: 400 naming the field: empty messages, an unknown role, non-text content, invalid tools or tool
            calls, more than :data:`MAX_TOOLS` tools or :data:`MAX_SCHEMA_BYTES` of schemas, ``n`` other than 1, a
            setting out of range.
    """
    _check_bounds(body.response_format, body.tools)
    _unsupported(body, ("functions", "function_call", "logit_bias"))
    if not body.messages:
        raise APIError(400, "messages is empty: send at least one message", param="messages")
    system, messages = [], []
    for index, message in enumerate(body.messages):
        if message.role not in SYSTEM_ROLES + ("user", "assistant", "tool"):
            raise APIError(
                400,
                f"messages[{index}].role is {message.role!r}: SpecChat's server takes system, developer, user, "
                "assistant and tool messages",
                param=f"messages[{index}].role",
            )
        calls = getattr(message, "tool_calls", None)
        if calls and message.role != "assistant":
            raise APIError(400, f"messages[{index}].tool_calls: only assistant messages make tool calls",
                           param=f"messages[{index}].tool_calls")
        text = "" if calls and message.content is None else _message_text(message, index)
        if message.role in SYSTEM_ROLES and not messages:
            system.append(text)
            continue
        entry = {"role": "system" if message.role in SYSTEM_ROLES else message.role, "content": text}
        if calls:
            entry["tool_calls"] = _tool_calls(calls, f"messages[{index}].tool_calls")
        if message.role == "tool" and isinstance(getattr(message, "tool_call_id", None), str):
            entry["tool_call_id"] = message.tool_call_id
        messages.append(entry)
    asked = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    if body.top_logprobs and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    top = (body.top_logprobs or 0) if body.logprobs else None
    output = OutputSettings(grammar=response_format_grammar(body.response_format, schema_grammar), logprobs=top)
    settings = _settings(body, asked, max_param, defaults, max_context, output, "top_logprobs", max_tokens, n_ctx_advice)
    return GenerationRequest(messages=messages, system_prompt="\n\n".join(system), settings=settings,
                             tools=tool_use(body.tools, body.tool_choice, body.parallel_tool_calls, schema_grammar))


#: What a function's name may be (OpenAI's rule).
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def tool_use(
    tools: Any, choice: Any, parallel: Any, schema_grammar: Callable[[Any], str] = json_schema_grammar
) -> ToolUse | None:
    """The tools of a chat request (``tools``, ``tool_choice``, ``parallel_tool_calls``): None without tools or
    with ``tool_choice`` "none" (the model is then not told about them). ``schema_grammar`` compiles each
    function's ``parameters`` (to refuse what cannot be enforced).

    Raises:
        APIError: 400 naming the field: a tool that is not ``{"type": "function", "function": {"name", ...}}``,
            parameters that are not a JSON schema SpecChat can enforce, a
            ``tool_choice`` that is none of its values (the message lists them) or names no given tool.
    """
    if parallel is not None and not isinstance(parallel, bool):
        raise APIError(400, "parallel_tool_calls must be true or false", param="parallel_tool_calls")
    named = _named_function(choice)
    if choice not in (None, "none", "auto", "required") and named is None:
        raise APIError(400, f'tool_choice is {_json_value(choice)}: use "none", "auto", "required" or {{"type": '
                       '"function", "function": {"name": ...}} naming one of the tools', param="tool_choice",
                       code="invalid_value")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise APIError(400, f"tool_choice is {_json_value(choice)}, which needs tools: send the tools the model may "
                           "call, or leave tool_choice out", param="tool_choice", code="invalid_value")
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list of functions", param="tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise APIError(400, f'tools[{index}] must be {{"type": "function", "function": {{"name", "description", '
                           '"parameters"}}', param=f"tools[{index}]")
        if not isinstance(function.get("name"), str) or not _FUNCTION_NAME.fullmatch(function["name"]):
            raise APIError(400, f"tools[{index}].function.name must be 1 to 64 letters, digits, _ or -",
                           param=f"tools[{index}].function.name")
        parameters = function.get("parameters")
        if parameters is not None:
            param = f"tools[{index}].function.parameters"
            try:
                schema_grammar(parameters)
            except GrammarError as error:
                raise APIError(400, f"{param}: {error}", param=param, code="invalid_schema") from None
    if choice == "none":
        return None
    names = [tool["function"]["name"] for tool in tools]
    if named is not None and named not in names:
        listed = ", ".join(json.dumps(name) for name in names)
        raise APIError(400, f"tool_choice names the function {json.dumps(named)}, which is not among the tools: name "
                       f'one of {listed}, or use "none", "auto" or "required"', param="tool_choice",
                       code="invalid_value")
    return ToolUse(tuple(tools), named or choice or "auto", parallel is not False)


def _named_function(choice: Any) -> str | None:
    """The function a ``tool_choice`` of ``{"type": "function", "function": {"name": NAME}}`` names, else None."""
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _tool_calls(calls: Any, param: str) -> list[dict]:
    """An assistant message's ``tool_calls`` as chat templates render them: arguments parsed from their JSON string.

    Raises:
        APIError: 400: not a list of ``{"id", "type": "function", "function": {"name", "arguments"}}``.
    """
    parsed = []
    for index, call in enumerate(calls if isinstance(calls, list) else [None]):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            arguments = None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not isinstance(arguments, dict):
            raise APIError(400, f'{param}[{index}] must be {{"id", "type": "function", "function": {{"name", '
                           '"arguments": a JSON object as a string}}', param=f"{param}[{index}]")
        parsed.append({"id": call.get("id", ""), "type": "function",
                       "function": {"name": function["name"], "arguments": arguments}})
    return parsed


def response_format_grammar(value: Any, schema_grammar: Callable[[Any], str] = json_schema_grammar) -> str | None:
    """The grammar of a request's ``response_format`` (a chat's or a text completion's): None for ``{"type":
    "text"}`` or none; ``{"type": "json_object"}`` (with llama-server's optional ``"schema"``) and ``{"type":
    "json_schema", "json_schema": {"name", "schema", "strict", "description"}}`` constrain the reply
    (``inference.constraints``; ``schema_grammar`` compiles the schema).

    Raises:
        APIError: 400 naming the part at fault: an unknown type, a missing or invalid schema.
    """
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise APIError(400, "response_format must be an object with a type: text, json_object or json_schema",
                       param="response_format")
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object" and "schema" not in value:
        return json_object_grammar()
    if kind == "json_object":
        schema, param = value["schema"], "response_format.schema"
    elif kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise APIError(400, 'response_format.json_schema must be an object with a "schema" (a JSON schema)',
                           param="response_format.json_schema")
        schema, param = spec["schema"], "response_format.json_schema.schema"
    else:
        raise APIError(400, f"response_format.type is {kind!r}: use text, json_object or json_schema",
                       param="response_format.type")
    try:
        return schema_grammar(schema)
    except GrammarError as error:
        raise APIError(400, f"{param}: {error}", param=param, code="invalid_schema") from None


def completion_request(
    body: CompletionRequest,
    defaults: GenerationSettings,
    max_context: int | None,
    max_tokens: int | None = None,
    schema_grammar: Callable[[Any], str] = json_schema_grammar,
    n_ctx_advice: str = SERVE_N_CTX_ADVICE,
) -> GenerationRequest:
    """The engine request of a text completion (the prompt continued as is, without the chat template;
    ``defaults``, ``max_context``, ``max_tokens``, ``n_ctx_advice``: see :func:`_settings`; ``schema_grammar``: see
    :func:`chat_request`).

    Raises:
        APIError: 400 naming the field: an empty prompt or several, ``suffix``, ``best_of`` other than 1, ``n``
            other than 1, an invalid ``response_format`` or one over :data:`MAX_SCHEMA_BYTES`, a setting out of
            range.
    """
    _check_bounds(body.response_format, None)
    _unsupported(body, ("logit_bias", "suffix"))
    if body.best_of not in (None, 1):
        raise APIError(400, "best_of must be 1 (SpecChat generates one reply)", param="best_of")
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise APIError(400, f"prompt holds {len(prompt)} prompts: send one (a string)", param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise APIError(400, "prompt is empty: send the text to continue", param="prompt")
    output = OutputSettings(grammar=response_format_grammar(body.response_format, schema_grammar), logprobs=body.logprobs)
    settings = _settings(body, body.max_tokens, "max_tokens", defaults, max_context, output, "logprobs", max_tokens,
                         n_ctx_advice)
    return GenerationRequest(messages=[], system_prompt="", settings=settings, prompt=prompt, echo=body.echo)


def _check_bounds(response_format: Any, tools: Any) -> None:
    """Refuse a request with more than :data:`MAX_TOOLS` tools, or whose JSON schemas (``response_format`` and the
    tools, measured whole as compact JSON) are larger than :data:`MAX_SCHEMA_BYTES` together, before anything
    compiles.

    Raises:
        APIError: 400 ``too_many_tools``, or ``schema_too_large`` naming the field that holds the most.
    """
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        raise APIError(400, f"tools holds {len(tools)} functions: send at most {MAX_TOOLS} (OpenAI's limit), the ones "
                       "this request may call", param="tools", code="too_many_tools")
    sizes = {field: len(json.dumps(value, separators=(",", ":")).encode()) if value is not None else 0
             for field, value in (("response_format", response_format), ("tools", tools))}
    if sum(sizes.values()) > MAX_SCHEMA_BYTES:
        largest = max(sizes, key=sizes.get)
        raise APIError(400, f"the request's JSON schemas take {sum(sizes.values())} bytes ({largest}: "
                       f"{sizes[largest]}): send at most {MAX_SCHEMA_BYTES} bytes of schemas (fewer properties, "
                       "enum values or tools; shorter descriptions)", param=largest, code="schema_too_large")


def _settings(
    body: _GenerationFields,
    asked_tokens: int | None,
    max_param: str,
    defaults: GenerationSettings,
    max_context: int | None,
    output: OutputSettings,
    logprobs_param: str,
    max_tokens: int | None = None,
    n_ctx_advice: str = SERVE_N_CTX_ADVICE,
) -> GenerationSettings:
    """The request's settings on top of the server's ``defaults`` (every sampling field the request leaves out),
    validated.

    Args:
        body: the request; asked_tokens: its ``max_tokens`` (or ``max_completion_tokens``, then named by
            ``max_param``), None when left out.
        defaults: the server's settings: decoding, K, the rolling context, sampling, and the new tokens of a
            request that asks none (``sampling.max_new_tokens``). Its ``context.n_ctx`` is the largest
            ``specchat.n_ctx`` a request may ask (the server's ``--n-ctx``, or the window's Context length).
        max_context: the model's largest n_ctx (None = unknown).
        output: the grammar and log-probabilities asked for; logprobs_param: the field that asked for its
            alternatives (``top_logprobs`` in a chat, ``logprobs`` in a completion).
        max_tokens: the most new tokens one reply may generate (None = no cap): a request asking more gets this
            many, and its reply ends with ``finish_reason`` ``length``.
        n_ctx_advice: how to give this server a larger n_ctx, told to a request that asks more than its own
            (default: ``specchat serve``'s flag; the window's server names its setting).

    Raises:
        APIError: 400 naming the field: ``n`` other than 1, more than :data:`MAX_STOP_STRINGS` stop strings or one
            longer than :data:`MAX_STOP_CHARS`, ``specchat.n_ctx`` above the server's, a setting out of range.
    """
    if body.n not in (None, 1):
        raise APIError(400, f"n must be 1 (SpecChat generates one choice per request), got {body.n}", param="n")
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if len(stop) > MAX_STOP_STRINGS:
        raise APIError(400, f"stop holds {len(stop)} strings: send at most {MAX_STOP_STRINGS}", param="stop",
                       code="invalid_value")
    if any(len(text) > MAX_STOP_CHARS for text in stop):
        longest = max(len(text) for text in stop)
        raise APIError(400, f"stop holds a string of {longest} characters: each may have at most {MAX_STOP_CHARS}",
                       param="stop", code="invalid_value")
    options = body.specchat or SpecChatOptions()
    if options.n_ctx is not None and options.n_ctx > defaults.context.n_ctx:
        raise APIError(
            400,
            f"specchat.n_ctx must be at most {defaults.context.n_ctx}, this server's n_ctx: ask for less (the rolling "
            f"context keeps a longer conversation going), or {n_ctx_advice}",
            param="specchat.n_ctx", code="invalid_value",
        )  # fmt: skip
    if asked_tokens is None:
        asked_tokens = defaults.sampling.max_new_tokens
    if max_tokens is not None:
        asked_tokens = min(asked_tokens, max_tokens)
    top_k = 0 if body.top_k == -1 else body.top_k  # llama-server and vLLM write "off" as -1 too
    sampling = replace(
        defaults.sampling,
        seed=body.seed,
        stop_strings=stop,
        **{name: value for name, value in (
            ("temperature", body.temperature),
            ("top_p", body.top_p),
            ("top_k", top_k),
            ("min_p", body.min_p),
            ("max_new_tokens", asked_tokens),
            ("presence_penalty", body.presence_penalty),
            ("frequency_penalty", body.frequency_penalty),
            ("repetition_penalty", body.repetition_penalty if body.repetition_penalty is not None else body.repeat_penalty),
            ("repeat_last_n", body.repeat_last_n),
        ) if value is not None},
    )
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
    settings = GenerationSettings(decoding=decoding, sampling=sampling, context=context, speculative=speculative,
                                  output=output)
    try:
        settings.validate(defaults.context.n_ctx if max_context is None else min(max_context, defaults.context.n_ctx))
    except SettingError as error:
        raise setting_error(error, max_param, logprobs_param) from None
    return settings


def setting_error(error: SettingError, max_param: str = "max_tokens", logprobs_param: str = "logprobs") -> APIError:
    """A ``SettingError`` as a 400 naming the request field (``max_tokens``, ``stop``, ``specchat.n_ctx``...), in
    the message too: "max_tokens must be >= 1, got 0", not the engine's "max_new_tokens must be ..."."""
    param = {"max_new_tokens": max_param, "logprobs": logprobs_param}.get(error.field) or _PARAMS.get(error.field, error.field)
    return APIError(400, error.renamed(param), param=param, code="invalid_value")


def no_draft_model(advice: str) -> APIError:
    """A request for draft-model decoding (``specchat.mode`` ``spec_model``) on a server that runs no draft model:
    a 400 that says how to run one (``advice``, e.g. the flags to restart with) and what works without one."""
    return APIError(
        400,
        f'specchat.mode "spec_model" needs a draft model, and this server has none: {advice}; or send "mode": '
        '"spec_lookup" (prompt lookup drafts from the conversation, without a draft model) or "ar"',
        param="specchat.mode", code="no_draft_model",
    )  # fmt: skip


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

    def response(self, stats: GenerationStats, text: str, logprobs: dict | None = None,
                 calls: tuple[ToolCall, ...] = ()) -> dict:
        """The non-streamed response of a finished reply: its ``text`` (the content; a completion's, echo
        included), ``logprobs`` (:func:`chat_logprobs` or :func:`completion_logprobs`; None when not asked) and
        tool ``calls`` (content null when they are all the reply says)."""
        if self.chat:
            message = {"role": "assistant", "content": text or (None if calls else text)}
            if calls:
                message["tool_calls"] = tool_calls(calls)
            choice = {"index": 0, "message": message}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=logprobs, finish_reason=finish_reason(stats, bool(calls)))
        return {**self._head(False), "choices": [choice], "usage": usage(stats), "specchat": stats_object(stats)}

    def chunk(self, text: str | None, *, role: bool = False, finish: str | None = None, extension: dict | None = None,
              include_usage: bool = False, logprobs: dict | None = None, calls: list[dict] | None = None) -> dict:
        """One stream chunk: ``text`` as the delta (None: no content), ``role`` announces the assistant (first
        chunk), ``finish`` its finish_reason; ``extension`` its ``specchat`` field; ``logprobs`` those of its tokens;
        ``calls`` its ``delta.tool_calls`` (:func:`call_opening`, :func:`arguments_fragment`). With ``include_usage`` the chunk carries
        ``"usage": null`` (OpenAI's shape when the client asked for a usage chunk)."""
        if self.chat:
            delta = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            if calls:
                delta["tool_calls"] = calls
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text or ""}
        choice.update(logprobs=logprobs, finish_reason=finish)
        chunk = {**self._head(True), "choices": [choice]}
        if include_usage:
            chunk["usage"] = None
        if extension:
            chunk["specchat"] = extension
        return chunk

    def usage_chunk(self, stats: GenerationStats) -> dict:
        """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage and statistics."""
        return {**self._head(True), "choices": [], "usage": usage(stats), "specchat": stats_object(stats)}


#: The log-probability written for a token of probability 0 (a grammar forbids it): OpenAI's own floor, since JSON
#: has no -Infinity.
LOGPROB_FLOOR = -9999.0


def _logprob(value: float) -> float:
    return max(value, LOGPROB_FLOOR)


def _token_text(piece: bytes) -> str:
    """A token's text: its bytes as UTF-8, U+FFFD for those of a character split between tokens (the ``bytes``
    field, or the next token, has the rest)."""
    return piece.decode("utf-8", "replace")


def chat_logprobs(tokens: list[tuple[TokenLogprob, tuple[TokenLogprob, ...]]]) -> dict:
    """A chat choice's ``logprobs``: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
    "logprob", "bytes"}]}], "refusal": null}`` for ``tokens`` (each with its alternatives)."""

    def entry(token: TokenLogprob) -> dict:
        return {"token": _token_text(token.piece), "logprob": _logprob(token.logprob), "bytes": list(token.piece)}

    return {"content": [{**entry(token), "top_logprobs": [entry(t) for t in top]} for token, top in tokens],
            "refusal": None}


def completion_logprobs(tokens: list[tuple[bytes, float | None, tuple[TokenLogprob, ...] | None]], offset: int) -> dict:
    """A text completion's ``logprobs`` (OpenAI's legacy shape): ``tokens``, ``token_logprobs``, ``top_logprobs``
    (``{token: logprob}`` per token) and ``text_offset`` (each token's character offset in the choice's text,
    counted from ``offset``), for ``tokens`` as ``(bytes, logprob, alternatives)``; an echoed prompt's first token
    has None for both."""
    texts = [_token_text(piece) for piece, _, _ in tokens]
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": texts,
        "token_logprobs": [None if value is None else _logprob(value) for _, value, _ in tokens],
        "top_logprobs": [None if top is None else {_token_text(t.piece): _logprob(t.logprob) for t in top}
                         for _, _, top in tokens],
        "text_offset": offsets,
    }


def finish_reason(stats: GenerationStats, called: bool = False) -> str:
    """OpenAI's finish_reason: ``tool_calls`` when the reply ``called`` tools, ``length`` when max_tokens ended it,
    else ``stop``."""
    if called:
        return "tool_calls"
    return "length" if stats.stop_reason == "max_new_tokens" else "stop"


def tool_calls(calls: tuple[ToolCall, ...]) -> list[dict]:
    """OpenAI's ``tool_calls``: ``[{"index", "id", "type": "function", "function": {"name", "arguments": a JSON
    string}}]``, each with a fresh id."""
    return [{"index": index, "id": new_call_id(), "type": "function",
             "function": {"name": call.name, "arguments": arguments_text(call)}} for index, call in enumerate(calls)]


def new_call_id() -> str:
    """A fresh tool call id, ``call_`` and 24 hex digits."""
    return f"call_{uuid.uuid4().hex[:24]}"


def arguments_text(call: ToolCall) -> str:
    """A call's ``function.arguments``: its arguments' JSON text as the model wrote it (what a stream sent), else
    as ``json.dumps`` writes them."""
    return call.arguments_json if call.arguments_json is not None else json.dumps(call.arguments, ensure_ascii=False)


def call_opening(index: int, call_id: str, name: str) -> list[dict]:
    """The ``delta.tool_calls`` that opens a streamed call: ``[{"index", "id", "type": "function", "function":
    {"name", "arguments": ""}}]`` (fragments of its arguments follow, :func:`arguments_fragment`)."""
    return [{"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]


def arguments_fragment(index: int, text: str) -> list[dict]:
    """The ``delta.tool_calls`` that carries the next ``text`` of call ``index``'s arguments."""
    return [{"index": index, "function": {"arguments": text}}]


def usage(stats: GenerationStats) -> dict:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens`` counts the prompt tokens the KV cache
    already held (not prefilled again)."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.new_tokens,
        "total_tokens": stats.prompt_tokens + stats.new_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.reused_tokens},
    }


def stats_object(stats: GenerationStats) -> dict:
    """The response's ``specchat`` field: the reply's statistics.

    Keys: ``ttft_ms`` (prefill + first token, ms), ``tokens_per_s`` (decode rate after the first token),
    ``acceptance_rate`` (accepted / drafted, null without drafts), ``drafted``, ``accepted``, ``discarded_tokens``
    and ``rolls`` (rolling context), ``prefilled_tokens`` and ``prompt_tokens`` (computed / whole prompt),
    ``mode`` (``auto``/``ar``/``spec``), ``drafter`` (``head``/``model``/``lookup``/null; for Auto the one of most
    steps), ``final_k``, ``fallback_tokens`` (tokens of the plain steps Auto chose), ``drafters`` (per drafter, and
    ``plain``: ``steps``, ``drafted``, ``accepted``, ``k_max``), ``k_steps`` (steps per K, ``"0"`` plain),
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
        **stats.usage(),
        "stop_reason": stats.stop_reason,
    }


def step_object(step: StepStats) -> dict:
    """One decode step in a content chunk's ``specchat.steps``."""
    return {"drafted": step.drafted, "accepted": step.accepted, "emitted": step.emitted, "k": step.k,
            "drafter": step.drafter}


def sse(data: dict | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line (``[DONE]`` is sent as is)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
