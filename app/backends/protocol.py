"""The one contract of a reply source: what to generate (:class:`GenerationRequest`) and how its reply streams
(:class:`ReplySource`). The inference worker (``app.backends.worker``), a remote server (``app.backends.remote``) and
the worker seen from another loop (``app.backends.serve_in_thread.WorkerOnLoop``) implement it; the window's reply
controller and the OpenAI-compatible server (``app.server``) use nothing else of them to generate.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from inference.events import Event
from inference.settings import GenerationSettings
from inference.tools import ToolUse

#: Longest prompt a request with ``echo`` and log-probabilities may have scored, in tokens: 8,192 (two windows of the
#: default n_ctx; about 10 s of passes on 2 cores with the default model). The passes stop when the request is
#: cancelled (its client disconnected).
MAX_SCORED_PROMPT_TOKENS = 8192

@dataclass(frozen=True)
class GenerationRequest:
    """One reply to generate.

    Attributes:
        messages: the conversation so far (``{"role", "content"}`` dicts), ending with the user message.
        system_prompt: the conversation's system prompt ("" = none).
        settings: engine settings, the decoding choice included (already validated by the settings pane; the
            engine checks them again).
        fresh_cache: drop the KV cache first (comparisons prefill both modes from scratch for a fair TTFT).
        prompt: raw text to continue without the chat template (a server's ``/v1/completions``), or its token ids
            (an id past the model's vocabulary is refused: ``SettingError`` on ``prompt``); when given, ``messages``
            and ``system_prompt`` are unused. Its cached prefix is reused as a conversation's is.
        continue_text: the start of the assistant's reply to continue ("" = a new reply): a reply that stopped at
            its length limit, continued by the window's Continue, or a chat request's final assistant message (the
            server's assistant prefill) (``ChatSession.continue_reply``, without tools; the events carry
            the new text only).
        echo: with ``prompt`` and ``settings.output.logprobs``, score the prompt's tokens first (a ``PromptScored``
            event before the reply's; it costs a pass over the prompt and empties the KV cache): a prompt of more
            than :data:`MAX_SCORED_PROMPT_TOKENS` tokens is then refused (``SettingError`` on ``prompt``).
        echo_only: with ``echo``, generate nothing (an OpenAI completion's ``max_tokens`` 0): the events are the
            ``PromptScored`` one (when log-probabilities are asked) and a ``Finished`` whose stats count the prompt's
            tokens, no new ones, stop reason ``max_new_tokens`` (``settings.sampling.max_new_tokens`` is unused).
        tools: the tools the reply may call (``inference.tools``; its calls come as a ``ToolCalls`` event), or None.
    """

    messages: list[dict]
    system_prompt: str
    settings: GenerationSettings
    fresh_cache: bool = False
    prompt: str | tuple[int, ...] | None = None
    continue_text: str = ""
    echo: bool = False
    echo_only: bool = False
    tools: ToolUse | None = None


class ReplySource(Protocol):
    """Something that generates replies: the local inference worker, a remote server, the worker on another loop."""

    def generate(self, request: GenerationRequest, cancel: threading.Event) -> AsyncIterator[list[Event]]:
        """Batches of engine events of one reply, ending with ``Finished``; stops soon after ``cancel`` is set
        (the reply then ends with stop reason ``cancelled``).

        Raises:
            ValueError: the request cannot be generated (a setting out of range, no model loaded...).
            RuntimeError: the source failed (``app.backends.remote_errors.RemoteError`` for a server; its message
                says what to do).
        """
        ...

    async def check_prompt(self, request: GenerationRequest) -> None:
        """Refuse now, without generating, what :meth:`generate` would refuse of ``request``'s raw ``prompt`` (an id
        past the vocabulary, too many tokens to score): a server's completion of several prompts checks them all
        before it generates any. A request without a raw prompt passes.

        Raises:
            ValueError: as :meth:`generate` would for the prompt (``SettingError`` on ``prompt``).
        """
        ...

    def describe_answer(self) -> str:
        """Who writes (or wrote) the reply, for its footer: ``SmolLM2-135M-Instruct-int4 on CPU`` or
        ``qwen2.5-7b on gpu-box:8000 (remote)``."""
        ...
