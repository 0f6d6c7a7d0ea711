"""What the requests of ``specchat serve``'s generation endpoints share: the body read and validated
(:func:`parse`), the fields both completions take (:class:`GenerationFields`), ``response_format``, the bounds of
one request, and the engine settings they map to (:func:`generation_settings`). Each endpoint's own fields and
mapping are in ``chat_request``, ``completion_request`` and ``responses``.

Shapes follow OpenAI's API reference (https://platform.openai.com/docs/api-reference/chat and
``/completions``). SpecChat adds one documented request field, ``specchat``: ``{"mode": "auto"|"ar"|"spec_model"|
"spec_lookup", "k", "adaptive_k", "n_ctx", "n_keep", "n_discard"}``, every key optional (``k``: a fixed mode's K;
Auto chooses its own, in a seeded sampled reply from preset costs and its own drafts, so that the same seed gives
the same reply; the server's defaults, from ``specchat serve``'s flags, fill the rest). An option the request's
decoding does not use (``k`` with Auto, say) is not refused, as clients send one ``k`` whatever the mode (the
window's remote model does): the response's ``specchat.unused`` names it and why (:func:`unused_options`), as the
command line notes the flags a mode does not use; so are the sampling fields greedy decoding does not use (``top_p``
with temperature 0, say).

A request's omitted sampling fields take the server's defaults (``defaults.sampling``): the model's recommended
sampling (its ``generation_config.json`` over ``inference.generation_config.CHAT_DEFAULTS``), or what ``specchat
serve``'s flags say, as Ollama, llama-server and LM Studio apply their own, never OpenAI's cloud defaults
(temperature 1, top_p 1), with which a small local model writes gibberish.

Everything a client can get wrong is refused as an :class:`APIError` (HTTP 400, ``param`` naming the field), never
passed on to the engine as something it would fail on. What one request may cost is bounded: its JSON nests at
most :data:`MAX_JSON_DEPTH` deep, it asks for at most :data:`MAX_STOP_STRINGS` stop strings of
:data:`MAX_STOP_CHARS` characters (OpenAI's bound on their number), no larger ``specchat.n_ctx`` than the server's,
and no more new tokens than the server's cap (a larger ``max_tokens`` is lowered to it, as llama-server's ``-n``);
it gives at most :data:`MAX_TOOLS` tools and :data:`MAX_SCHEMA_BYTES` of JSON schemas (``app.server.grammars``
compiles them off the event loop, within a time bound).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from app import bounded_json
from inference.constraints import GrammarError, json_object_grammar, json_schema_grammar
from inference.settings import (
    GREEDY_UNUSED,
    GREEDY_WHY,
    MAX_K,
    ContextSettings,
    Decoding,
    GenerationSettings,
    OutputSettings,
    SettingError,
    SpeculativeSettings,
    top_k_given,
)

from .errors import APIError, setting_error

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


class Strict(BaseModel):
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


class StreamOptions(Strict):
    include_usage: bool = False


class GenerationFields(Strict):
    """Fields both endpoints take."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # llama-server's and vLLM's extension (0 or -1 = off)
    min_p: float | None = None  # llama-server's and vLLM's extension
    stop: str | list[str] | None = None
    seed: int | None = None  # -1: a random seed, as llama-server and the command line read it
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
    held = json_value(details[0]["input"])
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


def json_value(value: Any) -> str:
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


def refuse_unsupported(request: BaseModel, fields: tuple[str, ...]) -> None:
    for name in fields:
        if not asks_for_nothing(getattr(request, name)):
            raise APIError(400, f"{name} is not supported by SpecChat's server: leave it out", param=name, code="unsupported")


def unused_options(body: BaseModel, settings: GenerationSettings) -> dict[str, str]:
    """The options a request ``body`` gave that its decoding (``settings``, the server's defaults filled in) does not
    use, each with why: the sampling fields of ``GREEDY_UNUSED`` (``top_p``, ``top_k``, ``min_p``, ``seed``, those
    the body's endpoint takes) with greedy decoding (temperature 0, the request's or the server's default); of its
    ``specchat`` options, ``k`` with Auto or ``ar``, or with ``adaptive_k``, and ``adaptive_k`` true with Auto or
    ``ar``. Empty when every option given is used (for the response's ``specchat.unused``)."""
    notes = {}
    if settings.sampling.greedy:
        why = f"greedy decoding ({GREEDY_WHY}) does not sample: send temperature above 0 to use it"
        notes = {name: why for name in GREEDY_UNUSED if getattr(body, name, None) is not None}
    options = body.specchat
    if options is None:
        return notes
    decoding = settings.decoding
    if decoding is Decoding.AUTOREGRESSIVE:
        why = "autoregressive decoding (mode ar) drafts nothing: send mode spec_lookup or spec_model to use it"
        notes |= {name: why for name, given in (("k", options.k is not None), ("adaptive_k", options.adaptive_k))
                  if given}
    elif decoding is Decoding.AUTO:
        if options.k is not None:
            notes["k"] = (f"Auto chooses K per step (0 to {MAX_K}): k is the K of mode spec_lookup or spec_model, "
                          "send one of them to use it")
        if options.adaptive_k:
            notes["adaptive_k"] = "Auto always chooses K per step: adaptive_k applies to mode spec_lookup or spec_model"
    elif settings.speculative.adaptive and options.k is not None:
        notes["k"] = "adaptive_k chooses K per step, as Auto does: k is the K of a fixed mode, without adaptive_k"
    return notes


#: How to give ``specchat serve`` a larger n_ctx, for a request that asks more than the server's.
SERVE_N_CTX_ADVICE = "start the server with a larger --n-ctx"


#: The values of ``specchat serve --tool-choice-default``: OpenAI's ``auto``, or ``call-then-answer`` for clients that
#: cannot send ``tool_choice`` (``chat_request.omitted_tool_choice``).
TOOL_CHOICE_DEFAULTS = ("auto", "call-then-answer")


@dataclass(frozen=True)
class ServerLimits:
    """What the server sets for every request it maps to an engine request (``create_app``'s arguments).

    Attributes:
        defaults: the server's settings: decoding, K, the rolling context, sampling, and the new tokens of a
            request that asks none (``sampling.max_new_tokens``). Its ``context.n_ctx`` is the largest
            ``specchat.n_ctx`` a request may ask (the server's ``--n-ctx``, or the window's Context length).
        max_context: the model's largest n_ctx (None = unknown).
        max_tokens: the most new tokens one reply may generate (None = no cap): a request asking more gets this
            many, and its reply ends with ``finish_reason`` ``length``.
        schema_grammar: compiles a JSON schema (``json_schema_grammar``, or a cache of it:
            ``GrammarCompiler.schema_grammar``).
        n_ctx_advice: how to give this server a larger n_ctx, told to a request that asks more than its own
            (default: ``specchat serve``'s flag; the window's server names its setting).
        tool_choice_default: what a request with tools that sends no ``tool_choice`` gets, one of
            :data:`TOOL_CHOICE_DEFAULTS` (``specchat serve --tool-choice-default``; see
            ``chat_request.omitted_tool_choice``).
    """

    defaults: GenerationSettings
    max_context: int | None = None
    max_tokens: int | None = None
    schema_grammar: Callable[[Any], str] = json_schema_grammar
    n_ctx_advice: str = SERVE_N_CTX_ADVICE
    tool_choice_default: str = "auto"


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
        missing = isinstance(value, dict) and "type" not in value
        raise APIError(400, "response_format must be an object with a type: text, json_object or json_schema",
                       param="response_format", code="missing_required_parameter" if missing else "invalid_type")
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
                           param="response_format.json_schema",
                           code="missing_required_parameter" if isinstance(spec, dict) else "invalid_type")
        schema, param = spec["schema"], "response_format.json_schema.schema"
    else:
        raise APIError(400, f"response_format.type is {kind!r}: use text, json_object or json_schema",
                       param="response_format.type", code="invalid_value")
    try:
        return schema_grammar(schema)
    except GrammarError as error:
        raise APIError(400, f"{param}: {error}", param=param, code="invalid_schema") from None


def check_bounds(response_format: Any, tools: Any) -> None:
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


def generation_settings(
    body: GenerationFields,
    asked_tokens: int | None,
    max_param: str,
    limits: ServerLimits,
    output: OutputSettings,
    logprobs_param: str,
) -> GenerationSettings:
    """The request's settings on top of the server's defaults (``limits.defaults``: every sampling field the
    request leaves out), validated.

    Args:
        body: the request; asked_tokens: its ``max_tokens`` (or ``max_completion_tokens``, then named by
            ``max_param``), None when left out.
        limits: what the server sets (:class:`ServerLimits`).
        output: the grammar and log-probabilities asked for; logprobs_param: the field that asked for its
            alternatives (``top_logprobs`` in a chat, ``logprobs`` in a completion).

    Raises:
        APIError: 400 naming the field: ``n`` other than 1, more than :data:`MAX_STOP_STRINGS` stop strings or one
            longer than :data:`MAX_STOP_CHARS`, ``specchat.n_ctx`` above the server's, a setting out of range (a
            ``top_k`` below -1 told that -1 is off too).
    """
    defaults, max_context, max_tokens = limits.defaults, limits.max_context, limits.max_tokens
    if body.n not in (None, 1):
        raise APIError(400, f"n must be 1 (SpecChat generates one choice per request), got {body.n}", param="n",
                       code="invalid_value")
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
            f"context keeps a longer conversation going), or {limits.n_ctx_advice}",
            param="specchat.n_ctx", code="invalid_value",
        )  # fmt: skip
    if asked_tokens is None:
        asked_tokens = defaults.sampling.max_new_tokens
    if max_tokens is not None:
        asked_tokens = min(asked_tokens, max_tokens)
    try:
        top_k = None if body.top_k is None else top_k_given(body.top_k)
    except SettingError as error:
        raise setting_error(error) from None
    sampling = replace(
        defaults.sampling,
        seed=None if body.seed == -1 else body.seed,
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
