"""A streamed reply's chunks read into the engine's events: each ``data:`` event's JSON checked against OpenAI's
chunk shape (:func:`parse_chunk`, :func:`chunk_choices`), its deltas timed on this side (:class:`ReplyClock`), and the
bounds a reply may not pass (:func:`reply_limits`); a whole JSON answer to a streamed request read as a one-event
stream (:func:`whole_reply`).

Rules:
- Every delta becomes a :class:`~inference.events.TextDelta` (``token_id`` -1: the API sends text, not ids) and a
  :class:`~inference.events.StepStats` timed here, so that the live graph shows client-side tokens/s; a SpecChat
  server's ``specchat`` extension adds its drafting (``steps``, or running ``drafted`` / ``accepted`` totals).
- The final :class:`~inference.events.GenerationStats` carries TTFT and decode tokens/s measured here, token
  counts from ``usage`` when the server sends it, and a SpecChat server's own statistics, what each drafter did
  among them (``drafters``, ``k_steps``), so that a remote Auto reply's footer names its drafters as a local one's
  does; its mode is the one a SpecChat server reports, else :data:`REMOTE_MODE` (llama-server, vLLM, Ollama... do
  not say how they decoded).
- JSON of another shape than OpenAI's is a :class:`~app.backends.remote_errors.RemoteError`, never a TypeError; a
  field of the wrong type in an extension is read as absent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from inference.auto_decoding import PLAIN
from inference.events import DrafterUse, Event, GenerationStats, StepStats, TextDelta
from inference.settings import MAX_K, Decoding

from .. import bounded_json
from .remote_errors import MAX_JSON_DEPTH, RemoteError
from .remote_io import read_body

#: Events (``data:`` lines) and characters a reply may hold beyond its ``max_new_tokens``: see :func:`reply_limits`.
EVENT_MARGIN = 64
CHARS_PER_TOKEN = 64
#: The ``GenerationStats.mode`` of a reply whose server did not say how it decoded (no ``specchat`` extension's
#: ``mode``): not ``ar``, a local mode the footer would name ("Plain decoding") though nothing here chose it.
REMOTE_MODE = "remote"
#: The drafters a SpecChat server's ``drafters`` statistics may name (``GenerationStats.by_drafter``'s keys): another
#: name is read as absent, so that no word of a server's reaches a footer unchecked.
DRAFTER_KEYS = ("head", "model", "lookup", PLAIN)
#: The stop reason of a remote reply whose stream was cut (the connection closed, a time-out, a chunk of another
#: shape, more than its max_tokens allow): kept as far as it came, said "Stream cut" under it.
REMOTE_CUT = "interrupted"


def reply_limits(max_new_tokens: int) -> tuple[int, int]:
    """``(events, characters)`` a streamed reply of at most ``max_new_tokens`` may hold: one ``data:`` event per token
    (twice over, for servers that send reasoning or empty deltas) plus :data:`EVENT_MARGIN`; :data:`CHARS_PER_TOKEN`
    characters per token (vocabularies' longest tokens are 16-128 bytes, their mean about 4). Past either the
    server ignores ``max_tokens``, and the reply is cut there."""
    return 2 * max_new_tokens + EVENT_MARGIN, CHARS_PER_TOKEN * max_new_tokens + CHARS_PER_TOKEN * EVENT_MARGIN


def too_long(max_new_tokens: int) -> str:
    """The message of a reply cut because the server sent more than ``max_new_tokens`` allow (:func:`reply_limits`)."""
    return (
        f"The server sent more than a reply of at most {max_new_tokens} new tokens can hold (the partial reply was "
        "kept): it does not respect max_tokens; check the server"
    )


def parse_chunk(data: str, url: str) -> dict:
    """The JSON object of one ``data:`` event sent by ``url``.

    Raises:
        RemoteError: it is not a JSON object, or nests deeper than :data:`~app.backends.remote_errors.MAX_JSON_DEPTH`.
    """
    try:
        chunk = bounded_json.loads(data, MAX_JSON_DEPTH)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise RemoteError(f"{url} sent something that is not an OpenAI stream ({data[:60]!r}): check the base URL")
    return chunk


async def whole_reply(response: httpx.Response, limit: int, cancel: threading.Event, url: str) -> AsyncIterator[str]:
    """The lines of a stream standing for a whole answer in JSON to a streamed request (a ``chat.completion``, as
    llama-server and some proxies send, or an error object): its body as one ``data:`` event, then ``[DONE]``; its
    choices' ``message`` is read as their ``delta`` (:func:`chunk_choices`).

    Raises:
        RemoteError: the body passes ``limit`` bytes, or is not a JSON object with ``choices`` or ``error``.
        Cancelled: ``cancel`` was set.
    """
    body = (await read_body(response, limit, cancel, f"{url} sent a reply")).decode("utf-8", "replace")
    answer = parse_chunk(body, url)
    if "choices" not in answer and "error" not in answer:
        raise RemoteError(f"{url} answered with JSON that is not a chat completion ({body[:60]!r}): check the base URL")
    yield f"data: {body}"
    yield "data: [DONE]"


def chunk_choices(chunk: dict, url: str) -> list[tuple[str, str | None]]:
    """``(content, finish_reason)`` of each choice of a stream chunk ("" for no content); a choice with a
    ``message`` and no ``delta`` (a whole completion's: :func:`whole_reply`) is read from its message.

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
        delta = choice.get("delta") if "delta" in choice else choice.get("message")
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


class ReplyClock:
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

    def stats(self, extension: dict, usage: dict, stop_reason: str) -> GenerationStats:
        """The reply's statistics: timing measured here, token counts from ``usage`` (else those counted here), and
        a SpecChat server's ``extension`` (its mode, drafter, drafted and accepted tokens, rolls, what each drafter
        did: :func:`_by_drafter`, :func:`_k_steps`); mode :data:`REMOTE_MODE` where the extension names none of
        SpecChat's modes, and no drafter where it names none of :data:`DRAFTER_KEYS` (not the one the request asked for:
        the footer says what the server reported, and no word of a server's reaches it unchecked)."""
        mode = extension.get("mode")
        if mode in {d.value for d in Decoding}:  # the extension may name the request's mode value
            mode = Decoding(mode).mode
        if mode not in {d.mode for d in Decoding}:  # no word of a server's reaches a footer unchecked
            mode = REMOTE_MODE
        drafter = extension.get("drafter")
        new_tokens = _int(usage.get("completion_tokens"), self.generated)
        span = (self.last - self.first) if self.first is not None else 0.0
        rate = (new_tokens - 1) / span if new_tokens > 1 and span > 0 else 0.0
        return GenerationStats(
            mode=mode,
            drafter=drafter if drafter in DRAFTER_KEYS and drafter != PLAIN else None,
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
            system_prompt_tokens=_int(extension.get("system_prompt_tokens"), 0),
            system_prompt_dropped=extension.get("system_prompt_dropped") is True,
            fallback_tokens=_int(extension.get("fallback_tokens"), 0),
            final_k=_int(extension.get("final_k"), 0),
            by_drafter=_by_drafter(extension.get("drafters")),
            k_steps=_k_steps(extension.get("k_steps")),
            stop_reason=stop_reason,
            text=self.text,
        )


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _by_drafter(value: Any) -> dict[str, DrafterUse]:
    """A SpecChat server's ``drafters`` (``{name: {"steps", "drafted", "accepted", "k_max"}}``, as
    ``GenerationStats.usage`` writes them) read back: names of :data:`DRAFTER_KEYS` only, a count that is not a
    whole number of at least 0 read as 0."""
    return {
        name: DrafterUse(**{key: max(_int(use.get(key), 0), 0) for key in ("steps", "drafted", "accepted", "k_max")})
        for name, use in _dict(value).items()
        if name in DRAFTER_KEYS and isinstance(use, dict)
    }


def _k_steps(value: Any) -> dict[int, int]:
    """A SpecChat server's ``k_steps`` (``{"K": steps}``, K 0 to ``MAX_K``) read back; other keys, and counts that
    are not whole numbers above 0, are left out."""
    ks = {str(k): k for k in range(MAX_K + 1)}
    return {ks[key]: count for key, count in _dict(value).items() if key in ks and _int(count, 0) > 0}
