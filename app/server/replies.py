"""The responses of ``specchat serve``'s chat and text completions in OpenAI's shapes: a whole response and the
stream's chunks (:class:`Reply`), log-probabilities, tool calls (whole and streamed), usage, and server-sent events.

SpecChat adds one documented response field, ``specchat``: the reply's statistics (:func:`stats_object`), in a
non-streamed response and in the stream's chunk that carries ``finish_reason`` (and in the usage chunk, when asked
for); a text completion of several prompts has one choice per prompt, each with its own ``specchat`` (in the
response's choice, or in the stream's chunk that ends it), and their usage summed. Streamed content chunks carry ``specchat.from_draft`` (per token) and ``specchat.steps`` (the decode steps that
ended there).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from inference.events import GenerationStats, StepStats, TokenLogprob, ToolCall, ToolCallDelta, ToolCalls

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    """Identity of one response: ``id`` (``chatcmpl-...`` or ``cmpl-...``), ``created`` (Unix seconds),
    ``model`` (the served model's id), ``chat`` (chat completion, else text completion), ``unused`` (the
    options the request gave that its decoding does not use, ``specchat`` or sampling ones, with why:
    ``request_common.unused_options``)."""

    id: str
    created: int
    model: str
    chat: bool
    unused: dict[str, str] = field(default_factory=dict)

    @classmethod
    def new(cls, model: str, chat: bool, unused: dict[str, str] | None = None) -> "Reply":
        """A fresh id, created now."""
        return cls(f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time()), model, chat,
                   unused or {})

    def stats(self, stats: GenerationStats) -> dict:
        """The response's ``specchat`` field: :func:`stats_object`, with ``unused`` where the request gave options
        its decoding does not use."""
        return stats_object(stats, self.unused)

    def _head(self, streamed: bool) -> dict:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "system_fingerprint": None}

    def response(self, stats: GenerationStats, text: str, logprobs: dict | None = None,
                 calls: tuple[ToolCall, ...] | None = None) -> dict:
        """The non-streamed response of a finished reply: its ``text`` (the content; a completion's, echo
        included), ``logprobs`` (:func:`chat_logprobs` or :func:`completion_logprobs`; None when not asked) and
        tool ``calls`` (None: the reply wrote none; empty: it was cut in its first). Content is null when the calls
        are all the reply says, a cut one included (OpenAI's shape for a message without text)."""
        if self.chat:
            message = {"role": "assistant", "content": text or (None if calls is not None else text)}
            if calls:
                message["tool_calls"] = tool_calls(calls)
            choice = {"index": 0, "message": message}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=logprobs, finish_reason=finish_reason(stats, bool(calls)))
        return {**self._head(False), "choices": [choice], "usage": usage(stats), "specchat": self.stats(stats)}

    def several(self, replies: list[tuple[GenerationStats, str, dict | None]]) -> dict:
        """The non-streamed response of a text completion of several prompts, from each prompt's finished reply
        ``(stats, text, logprobs)`` in order: a choice each (``index`` its prompt's place, its own ``specchat``
        statistics), the usage summed."""
        choices = [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason(stats),
                    "specchat": self.stats(stats)} for index, (stats, text, logprobs) in enumerate(replies)]
        return {**self._head(False), "choices": choices, "usage": usage(*(stats for stats, _, _ in replies))}

    def chunk(self, text: str | None, *, role: bool = False, finish: str | None = None, extension: dict | None = None,
              include_usage: bool = False, logprobs: dict | None = None, calls: list[dict] | None = None,
              index: int = 0) -> dict:
        """One stream chunk of choice ``index`` (a text completion's prompt; 0 otherwise): ``text`` as the delta
        (None: no content), ``role`` announces the assistant (first chunk), ``finish`` its finish_reason;
        ``extension`` its ``specchat`` field; ``logprobs`` those of its tokens; ``calls`` its ``delta.tool_calls``
        (:func:`call_opening`, :func:`arguments_fragment`). With ``include_usage`` the chunk carries ``"usage": null``
        (OpenAI's shape when the client asked for a usage chunk)."""
        if self.chat:
            delta = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            if calls:
                delta["tool_calls"] = calls
            choice = {"index": index, "delta": delta}
        else:
            choice = {"index": index, "text": text or ""}
        choice.update(logprobs=logprobs, finish_reason=finish)
        chunk = {**self._head(True), "choices": [choice]}
        if include_usage:
            chunk["usage"] = None
        if extension:
            chunk["specchat"] = extension
        return chunk

    def usage_chunk(self, *stats: GenerationStats) -> dict:
        """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage and statistics of the
        reply (``stats``), or the usage summed over a text completion's several prompts (each one's statistics came
        with its finish chunk)."""
        extension = {"specchat": self.stats(stats[0])} if len(stats) == 1 else {}
        return {**self._head(True), "choices": [], "usage": usage(*stats), **extension}


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
    """OpenAI's finish_reason: ``length`` when max_tokens ended the reply (its calls too: those written whole are
    returned, the one cut is not), else ``tool_calls`` when it ``called`` tools, else ``stop``."""
    if stats.stop_reason == "max_new_tokens":
        return "length"
    return "tool_calls" if called else "stop"


def tool_calls(calls: tuple[ToolCall, ...]) -> list[dict]:
    """A non-streamed message's ``tool_calls`` in OpenAI's shape: ``[{"id", "type": "function", "function":
    {"name", "arguments": a JSON string}}]``, each with a fresh id (no ``index``: only a stream's deltas have one,
    :func:`call_opening`)."""
    return [{"id": new_call_id(), "type": "function", "function": {"name": call.name, "arguments": arguments_text(call)}}
            for call in calls]


def new_call_id() -> str:
    """A fresh tool call id, ``call_`` and 24 hex digits."""
    return f"call_{uuid.uuid4().hex[:24]}"


def arguments_text(call: ToolCall) -> str:
    """A call's ``function.arguments``: its arguments' JSON text as the model wrote it (what a stream sent), else
    as ``json.dumps`` writes them."""
    return call.arguments_json if call.arguments_json is not None else json.dumps(call.arguments, ensure_ascii=False)


class StreamedCalls:
    """A reply's tool calls as a stream sends them, for both streaming endpoints (chat completions, the Responses
    API): the arguments text each call opened has so far, and which of them the reply wrote whole.

    The calls are streamed as they are written (``ToolCallDelta``); the reply's ``ToolCalls`` then says which were
    written whole: the first :attr:`whole` of them. A call after those was cut (by the length limit, a stop string)
    or did not read as a call: an endpoint never returns it as a call, whatever it streamed of it.
    """

    def __init__(self) -> None:
        self.arguments: list[str] = []  # per call opened, in the reply's order: its arguments text so far
        self.whole = 0

    def deltas(self, event: ToolCallDelta | ToolCalls) -> list[ToolCallDelta]:
        """What the stream sends for a call event, as deltas (a ``name`` opens call ``index``): a delta as it
        came; for the reply's whole calls, what was not sent yet: a call not streamed (opened with all its
        arguments), the rest of a call's arguments. A call whose whole arguments do not extend what was sent (not
        expected: deltas and calls are read from one text) sends nothing more, and its arguments become the whole
        text."""
        if isinstance(event, ToolCallDelta):
            if event.name is not None:
                self.arguments.append("")
            self.arguments[event.index] += event.arguments
            return [event]
        self.whole = len(event.calls)
        deltas = []
        for index, call in enumerate(event.calls):
            whole = arguments_text(call)
            if index >= len(self.arguments):
                self.arguments.append("")
                deltas.append(ToolCallDelta(index, call.name, whole))
            elif whole.startswith(self.arguments[index]):
                if len(whole) > len(self.arguments[index]):
                    deltas.append(ToolCallDelta(index, None, whole[len(self.arguments[index]):]))
            else:
                logger.warning("tool call %d streamed arguments %r, read as %r", index, self.arguments[index], whole)
            self.arguments[index] = whole
        return deltas

    def is_whole(self, index: int) -> bool:
        """Call ``index`` (in the reply's order) was written whole: a client may read it as a call."""
        return index < self.whole


def call_opening(index: int, call_id: str, name: str) -> list[dict]:
    """The ``delta.tool_calls`` that opens a streamed call: ``[{"index", "id", "type": "function", "function":
    {"name", "arguments": ""}}]`` (fragments of its arguments follow, :func:`arguments_fragment`)."""
    return [{"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]


def arguments_fragment(index: int, text: str) -> list[dict]:
    """The ``delta.tool_calls`` that carries the next ``text`` of call ``index``'s arguments."""
    return [{"index": index, "function": {"arguments": text}}]


def usage(*stats: GenerationStats) -> dict:
    """OpenAI's usage object of a reply's ``stats``, or summed over several (a text completion's prompts);
    ``prompt_tokens_details.cached_tokens`` counts the prompt tokens read from the KV cache (not prefilled again;
    ``GenerationStats.reused_tokens``: after earlier rolls only what they left in it)."""
    prompt_tokens, new_tokens = sum(s.prompt_tokens for s in stats), sum(s.new_tokens for s in stats)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": new_tokens,
        "total_tokens": prompt_tokens + new_tokens,
        "prompt_tokens_details": {"cached_tokens": sum(s.reused_tokens for s in stats)},
    }


def stats_object(stats: GenerationStats, unused: dict[str, str] | None = None) -> dict:
    """The response's ``specchat`` field: the reply's statistics.

    Keys: ``ttft_ms`` (prefill + first token, ms), ``tokens_per_s`` (decode rate after the first token; null for a
    reply of fewer than two tokens, which has no rate),
    ``acceptance_rate`` (accepted / drafted, null without drafts), ``drafted``, ``accepted``, ``discarded_tokens``
    and ``rolls`` (what this reply's rolls and cut dropped), ``unread_prompt_tokens`` (the prompt's tokens the model
    did not read: a cut's, and those earlier replies' rolls dropped from the cache, which a turn that fits the
    rolled cache does not count in ``discarded_tokens``: what neither the cache served nor the prefill read), ``system_prompt_tokens`` (the rendered system prompt's, which ``n_keep`` auto
    pins up to half of n_ctx) and ``system_prompt_dropped`` (those rolls, or the cut of a prompt longer than n_ctx,
    dropped part of it: ``GenerationStats.system_prompt_dropped``), ``prefilled_tokens`` and ``prompt_tokens`` (computed / whole prompt),
    ``mode`` (``auto``/``ar``/``spec``), ``drafter`` (``head``/``model``/``lookup``/null; for Auto the one whose
    accepted drafts gave the most tokens, null when none was accepted), ``final_k`` (``GenerationStats.final_k``: a
    fixed K's K, Auto's last choice uncut by the room left), ``fallback_tokens`` (tokens of
    the steps that drafted nothing, in Auto or a fixed K: the ``plain`` steps of ``drafters``), ``drafters`` (per
    drafter, and ``plain``: ``steps``, ``drafted``, ``accepted``, ``k_max``), ``k_steps`` (steps per K, ``"0"``
    plain), ``stop_reason`` (``eos``, ``stop_string``, ``max_new_tokens``, ``cancelled``); ``unused``, only where
    the request gave options its decoding does not use (``specchat`` ones, or sampling ones with greedy decoding):
    ``{option: why}``
    (``request_common.unused_options``).
    """
    return {
        "ttft_ms": round(stats.ttft_ms, 3),
        "tokens_per_s": round(stats.decode_tokens_per_s, 3) if stats.decode_tokens_per_s > 0 else None,
        "acceptance_rate": stats.acceptance_rate,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "discarded_tokens": stats.discarded_tokens,
        "rolls": stats.rolls,
        "unread_prompt_tokens": max(0, stats.prompt_tokens - stats.reused_tokens - stats.prefilled_tokens),
        "system_prompt_tokens": stats.system_prompt_tokens,
        "system_prompt_dropped": stats.system_prompt_dropped,
        "prefilled_tokens": stats.prefilled_tokens,
        "prompt_tokens": stats.prompt_tokens,
        "mode": stats.mode,
        "drafter": stats.drafter,
        "final_k": stats.final_k,
        "fallback_tokens": stats.fallback_tokens,
        **stats.usage(),
        "stop_reason": stats.stop_reason,
        **({"unused": dict(unused)} if unused else {}),
    }


def step_object(step: StepStats) -> dict:
    """One decode step in a content chunk's ``specchat.steps``."""
    return {"drafted": step.drafted, "accepted": step.accepted, "emitted": step.emitted, "k": step.k,
            "drafter": step.drafter}


def sse(data: dict | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line (``[DONE]`` is sent as is)."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
