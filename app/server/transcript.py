"""The text and log-probabilities a chat or text completion's events add up to (:class:`Transcript`), for its
whole response or its stream's chunks; and its tool calls in OpenAI's streamed shape.

Rules:
- A token's log-probability goes with the chunk that carries its text: a token whose text is not out yet (part of a
  character, held back by a stop string) keeps it until one does.
- A text completion's ``echo`` puts the prompt first, with its tokens' log-probabilities when asked; a prompt of
  token ids is echoed as its scored tokens' text (its ``echo`` comes with ``logprobs``).
"""

from __future__ import annotations

from app.backends.protocol import GenerationRequest
from inference.events import Event, PromptScored, TextDelta, ToolCallDelta, ToolCalls

from .replies import (
    Reply,
    StreamedCalls,
    arguments_fragment,
    call_opening,
    chat_logprobs,
    completion_logprobs,
    new_call_id,
)


class Transcript:
    """The text and log-probabilities a reply's events add up to, for its response or its stream.

    A text completion's ``echo`` puts the prompt first (with its tokens' log-probabilities from ``PromptScored``
    when asked; a prompt of token ids as the text of ``PromptScored``'s tokens). A token whose text is not out yet
    (part of a character, held back by a stop string) keeps its log-probability until a chunk carries text
    (:meth:`pending`).
    """

    def __init__(self, reply: Reply, request: GenerationRequest):
        self._chat = reply.chat
        self.logprobs = request.settings.output.logprobs is not None
        echoed = request.echo and not reply.chat
        self._echo = request.prompt if echoed and isinstance(request.prompt, str) else None
        self._echo_scored = echoed and isinstance(request.prompt, tuple)  # a prompt of token ids: its scored tokens
        self._offset = 0  # characters of the completion's text so far (its text_offset)
        self._waiting: list = []
        self.called = False  # the reply called tools (its finish_reason is tool_calls)
        self._calls = StreamedCalls()
        self._ids: list[str] = []  # per call opened: its id

    def calls(self, event: ToolCallDelta | ToolCalls) -> list[list[dict]]:
        """The ``delta.tool_calls`` of the chunks that carry a call event, in OpenAI's streamed shape: a call opens
        with its index, id, type and name (:func:`call_opening`), then its arguments come in fragments as they are
        written. The reply's whole calls (``ToolCalls``) add what the stream did not send yet: the rest of a call's
        arguments, or a call not streamed at all (:class:`StreamedCalls`)."""
        chunks = []
        for delta in self._calls.deltas(event):
            if delta.name is not None:
                self._ids.append(new_call_id())
                chunks.append(call_opening(delta.index, self._ids[delta.index], delta.name))
            if delta.arguments:
                chunks.append(arguments_fragment(delta.index, delta.arguments))
        if isinstance(event, ToolCalls):
            self.called = self._calls.is_whole(0)
        return chunks

    def take(self, event: Event) -> tuple[str, list]:
        """The text an event adds (the echoed prompt before the first one) and its tokens' log-probability entries:
        ``(TokenLogprob, alternatives)`` for a chat, ``(bytes, logprob, alternatives)`` for a completion."""
        text, entries = "", []
        if self._echo is not None:
            text, self._echo = self._echo, None
        if isinstance(event, PromptScored) and not self._chat:
            entries = [(event.first, None, None)] + [(t.piece, t.logprob, top) for t, top in event.tokens]
            if self._echo_scored:
                text += b"".join(piece for piece, _, _ in entries).decode("utf-8", "replace")
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
        """The log-probabilities of a chunk: those waiting and ``entries`` (None when not asked for, or when there
        are none: OpenAI's ``"logprobs": null`` on a chunk without tokens, the finish chunk's as a rule)."""
        if not self.logprobs or not (self._waiting or entries):
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
