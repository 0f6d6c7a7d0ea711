"""Counts and outcomes in words, said alike by the window (``app.gui``) and the command line (``app.cli``); no Qt."""

from __future__ import annotations

#: A reply the model ended at its first token: no text to show (a trial's window showed an empty bubble).
NOTHING_GENERATED = "The model ended its reply at once (nothing generated)"


def tokens_text(count: int) -> str:
    """``1 token``, ``24 tokens``, ``1,024 tokens``."""
    return f"{count:,} token{'' if count == 1 else 's'}"


def ended_at_once(new_tokens: object, stop_reason: object) -> bool:
    """Whether a reply is empty because the model ended it at once: no token, its end the model's own (an end of
    reply token), not a stop, a failure or a length limit."""
    return new_tokens == 0 and not isinstance(new_tokens, bool) and stop_reason == "eos"


def nothing_generated_text(cut: bool, larger_context: str, again: str) -> str:
    """:data:`NOTHING_GENERATED`, with what can help: where the prompt was cut to fit the context length (a trial's
    631-token paste at n_ctx 256), a larger one (``larger_context``: the window's "Context length in the settings",
    the command line's "--n-ctx") or a shorter message; else ``again`` (the window's "Regenerate, or rephrase your
    message")."""
    if cut:
        return (f"{NOTHING_GENERATED}: it read only part of a conversation longer than the context length; raise "
                f"{larger_context}, or send a shorter message")
    return f"{NOTHING_GENERATED}: {again}"


#: Why a conversation was cut to fit the context length (:func:`cut_cause`; the window's ``stats["prompt_cut"]``), in
#: the words that start the footer's, the live line's and the command line's notes: both of the window's said
#: "conversation cut to fit the context length", and a newcomer could not tell whether to shorten the message or
#: start a new chat.
CUT_CAUSES = {"message": "your message is too long", "earlier_turns": "earlier turns no longer fit",
              "system_prompt": "your system prompt is too long"}


def cut_cause(message_tokens: int, earlier_turns: bool, system_outweighs: bool) -> str:
    """Why a prompt was cut to fit the context length (``PromptOverflow``), a key of :data:`CUT_CAUSES`: ``message``
    where the cut took the start of the message answered (the engine pinned its first ``message_tokens``: it is
    longer than the end kept) or the chat has no ``earlier_turns`` to leave out; ``earlier_turns`` where the message
    lies whole in what is kept (a chat grown past the context length, or whose earlier replies' rolls dropped its
    start); ``system_prompt`` where a chat's first message was not cut and the system prompt ``outweighs`` it (a
    trial's 6-token "Hello, who are you?" under a 330-token system prompt at n_ctx 256 read "your message is too
    long")."""
    if message_tokens <= 0 and not earlier_turns and system_outweighs:
        return "system_prompt"
    return "message" if message_tokens > 0 or not earlier_turns else "earlier_turns"


def kept_parts(first: int, last: int, system: int = 0, message: int = 0) -> str:
    """The parts of a prompt cut to fit that the model reads, in words: ``the first 30 and the last 18``, or where
    the ``first`` tokens, less the ``message``'s first tokens kept after them, are the ``system`` prompt's: ``the
    system prompt's 25 tokens and the last 3,412``, ``the system prompt's 24 tokens, your message's first 256 and
    the last 3,304`` (:func:`cut_text`, and the window's line while the prompt is read)."""
    if system > 0 and first - message == system:
        among = f", your message's first {message:,}" if message > 0 else ""
        return f"the system prompt's {system:,} tokens{among} and the last {last:,}"
    return f"the first {first:,} and the last {last:,}"


def cut_text(first: int, last: int, prompt_tokens: int, cause: str = "", system: int = 0, message: int = 0) -> str:
    """A prompt longer than the context length cut to fit before the reply (``PromptOverflow``), in words, with why
    (``cause``, a key of :data:`CUT_CAUSES`): ``your message is too long: the model read 48 of the conversation's
    1,124 tokens (the first 30 and the last 18)``, ``earlier turns no longer fit: …``; a reply stored before the
    cause was (``cause`` ""): ``conversation cut to fit the context length: the model read 48 of its 1,124 tokens
    (…)``. Where the first tokens kept, less the ``message``'s first tokens kept after them, are the ``system``
    prompt's (``GenerationStats.system_prompt_tokens``), they are named so (a trial read "the first 25" as the chat's
    text): ``(the system prompt's 25 tokens and the last 3,412)``, ``(the system prompt's 24 tokens, your message's
    first 256 and the last 3,304)``."""
    kept = f"({kept_parts(first, last, system, message)})"
    if cause in CUT_CAUSES:
        return f"{CUT_CAUSES[cause]}: the model read {first + last:,} of the conversation's {prompt_tokens:,} tokens {kept}"
    return f"conversation cut to fit the context length: the model read {first + last:,} of its {prompt_tokens:,} tokens {kept}"
