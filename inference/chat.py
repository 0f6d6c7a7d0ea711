"""A multi-turn conversation on top of the engine: chat template, system prompt, prefix reuse."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterator

from .drafting import common_prefix
from .engine import Engine
from .events import Event, Finished, TextDelta, ToolCalls
from .exactness import FirstDifference, first_difference
from .settings import GenerationSettings
from .tools import GENERIC, ToolCallReader, ToolUse, generic_conversation, tool_call_format


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: a surrogate pair held as two code points becomes the character it encodes, and a
    lone surrogate becomes U+FFFD (the replacement character).

    A Python string can hold lone surrogates, which no UTF-8 text contains and the tokenizer's chat template
    refuses (``RuntimeError ... surrogate``): a command-line argument with invalid UTF-8 bytes arrives so
    (``surrogateescape``), and so may text pasted or decoded carelessly elsewhere. Every message passes here on its
    way to the template, whichever front end sent it.
    """
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class ChatSession:
    """Messages of one conversation, rendered with the target's chat template (openvino-genai Tokenizer).

    Each ``send`` renders the whole history and hands it to ``Engine.generate``, which reuses the KV cache
    of the previous turns, so a follow-up only prefills its new tokens.

    With ``tools``, the template renders them (Qwen2.5, Llama 3.1+ and other templates that know tools), the reply
    follows the grammar of their calls (``inference.tools``) and its calls come as ``ToolCallDelta`` events while they
    are written and a ``ToolCalls`` event at the end, instead of text. A template that renders no tools (SmolLM2's)
    gets the generic format instead: the tools are described in the system prompt, and earlier calls and results are
    written into the messages (``inference.tools.generic_conversation``), with or without tools for this reply.

    Args:
        engine: the engine that generates replies.
        system_prompt: text of the system message ("" = none; the template may add its own default).
        messages: earlier messages as ``{"role": "user"|"assistant", "content": str}`` dicts; with tools also
            assistant messages with ``tool_calls`` (``{"id", "type", "function": {"name", "arguments": dict}}``)
            and ``{"role": "tool", "content", "tool_call_id"}`` results.
        tools: the tools the replies may call, or None.
    """

    def __init__(
        self, engine: Engine, system_prompt: str = "", messages: list[dict] | None = None, tools: ToolUse | None = None
    ):
        self.engine = engine
        self.system_prompt = system_prompt
        self.messages: list[dict] = list(messages or [])
        self.tools = tools
        # None: the template renders no tools, and the generic format stands in for its own
        self._template_format = tool_call_format(engine.target.tokenizer.chat_template)
        self._tool_format = None if tools is None else self._template_format or GENERIC

    def _rendered(self) -> tuple[str, list[dict]]:
        """The system prompt and messages as the template gets them (in the generic format without tool syntax)."""
        if self._template_format is None:
            return generic_conversation(self.system_prompt, self.messages, self.tools)
        return self.system_prompt, self.messages

    def _conversation(self) -> list[dict]:
        """The messages the chat template renders, their text made valid Unicode (``valid_text``)."""
        system_prompt, messages = self._rendered()
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return [{**message, "content": valid_text(message.get("content") or "")} for message in system + messages]

    def _render(self, conversation: list[dict], add_generation_prompt: bool = True) -> str:
        """``conversation`` through the chat template, with the tools where the template renders them."""
        tools = None
        if self.tools is not None and self._template_format is not None:
            tools = [dict(tool) for tool in self.tools.tools]
        return self.engine.target.tokenizer.apply_chat_template(
            conversation, add_generation_prompt=add_generation_prompt, tools=tools
        )

    def prompt_ids(self) -> list[int]:
        """Token ids of the rendered conversation, ending with the assistant turn's opening."""
        return self.engine.target.encode(self._render(self._conversation()))

    def last_message(self, ids: list[int]) -> tuple[int, int] | None:
        """Where the last user message starts in ``ids`` (a rendering of this conversation, ``prompt_ids``):
        ``(turn_start, text_start)``, the indices of its turn's first token (its role header) and of its text's; what
        the cut of a prompt longer than n_ctx keeps the start of (``Engine.generate``'s ``message``). None without a
        user message.

        Each is the length of the prefix ``ids`` shares with the conversation rendered up to that message (then with
        that message's text empty), so a token the template's boundary merges counts as the message's.
        """
        conversation = self._conversation()
        last = max((i for i, message in enumerate(conversation) if message["role"] == "user"), default=None)
        if last is None:
            return None
        encode = self.engine.target.encode
        before = encode(self._render(conversation[:last], add_generation_prompt=False)) if last else []
        empty = encode(self._render([*conversation[:last], {**conversation[last], "content": ""}], False))
        turn_start = common_prefix(before, ids)
        return turn_start, max(turn_start, common_prefix(empty, ids))

    def system_prompt_tokens(self) -> int:
        """Tokens that every rendering of this conversation starts with: its system message, the template's own
        default one where it has none (SmolLM2's "You are a helpful AI assistant named SmolLM…"), the tools a
        template renders there, and the first user turn's opening. What ``n_keep="auto"`` pins
        (``ContextSettings.resolve``) and the cut of a prompt longer than n_ctx keeps (``prefill.middle_cut``); 0 for a
        template whose rendering starts with the user's text.

        Measured as the prefix that the renderings of two different first messages share (counting only the given
        system message missed the default one, so that a roll cut through it and left a half template behind).
        """
        system_prompt = self._rendered()[0]
        system = [{"role": "system", "content": valid_text(system_prompt)}] if system_prompt else []
        first, other = (
            self.engine.target.encode(self._render([*system, {"role": "user", "content": text}], False))
            for text in ("a", "b")
        )
        return common_prefix(first, other)

    def send(
        self,
        user_text: str,
        settings: GenerationSettings,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Add a user message and stream the assistant's reply; the reply (partial if cancelled) is appended. A
        reply cancelled before its first token (during the prefill) leaves the history as it was, so that a long
        message stopped there is not prefilled again with the next one.

        Raises:
            ValueError: the message is empty or only whitespace, or a setting is out of range.
        """
        if not user_text.strip():
            raise ValueError("the message is empty: type something before sending")
        self.messages.append({"role": "user", "content": user_text})
        for event in self.reply(settings, cancel):
            if isinstance(event, Finished) and event.stats.stop_reason == "cancelled" and not event.stats.token_ids:
                del self.messages[-2:]
            yield event

    def reply(
        self,
        settings: GenerationSettings,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream an assistant reply to the history as it is (used by ``send`` and to regenerate).

        Raises:
            GrammarError: a tool's parameters are not a schema llguidance can enforce.
        """
        ids = self.prompt_ids()
        reader = None
        if self.tools is not None:
            reader = ToolCallReader(self._tool_format)
            if settings.output.grammar is None or self.tools.choice != "auto":
                settings = replace(settings, output=replace(settings.output, grammar=self._tool_format.grammar(self.tools)))
        message = self.last_message(ids) if len(ids) > settings.context.n_ctx else None  # (only a cut needs it)
        for event in self.engine.generate(ids, settings, self.system_prompt_tokens(), cancel, message=message):
            if reader is not None and isinstance(event, TextDelta):
                event = replace(event, text=reader.push(event.text))
                yield event
                yield from reader.deltas()
                continue
            if reader is not None and isinstance(event, Finished):
                rest, calls = reader.finish(cut=event.stats.stop_reason != "eos")
                if rest:
                    yield TextDelta(text=rest, token_id=-1, from_draft=False)
                if calls is not None:
                    yield ToolCalls(tuple(calls))
            if isinstance(event, Finished):
                self.messages.append({"role": "assistant", "content": event.stats.text})
            yield event

    def continue_reply(
        self,
        partial: str,
        settings: GenerationSettings,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream more of an assistant reply that stopped at its length limit: the conversation (ending with the
        user message) is rendered as for a new reply and ``partial`` follows it, as the model's own text; the
        events carry only the new text. ``partial`` is tokenized again, so its tokens may differ from the ones the
        model generated (as llama.cpp and LM Studio continue a reply).

        Raises:
            ValueError: ``partial`` is empty, or a setting is out of range.
        """
        if not partial:
            raise ValueError("there is no reply to continue")
        tokenizer = self.engine.target.tokenizer
        text = tokenizer.apply_chat_template(self._conversation(), add_generation_prompt=True) + valid_text(partial)
        ids = self.engine.target.encode(text)
        message = self.last_message(ids) if len(ids) > settings.context.n_ctx else None
        yield from self.engine.generate(ids, settings, self.system_prompt_tokens(), cancel, message=message)

    def first_difference(
        self, reference: list[int], candidate: list[int], settings: GenerationSettings, k: int | None = None
    ) -> FirstDifference | None:
        """Where two greedy replies to the conversation as it stands (ending with the user message) first differ,
        and whether the noise measured there explains it (``exactness.first_difference``, with the context of
        ``settings``, and ``k``: the largest K the candidate drafted, Auto's choice; None: ``settings``' K). Resets
        the engine's caches.

        Raises:
            ValueError: invalid context settings.
        """
        ids = self.prompt_ids()
        return first_difference(
            self.engine, ids, reference, candidate, settings.context, k or settings.speculative.k,
            self.system_prompt_tokens(), settings.sampling, self.last_message(ids),
        )

