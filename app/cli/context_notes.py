"""What the command line says of a reply's context: a prompt cut to fit n_ctx and a system prompt the rolls dropped,
in the window's footer's words (``app.counts``) with the options that would keep the rest."""

from __future__ import annotations

from app.counts import cut_cause, cut_text
from inference.chat import ChatSession
from inference.events import PromptOverflow


def system_prompt_dropped_notice(system_tokens: int, n_ctx: int) -> str:
    """Said after a reply whose rolls or cut dropped part of the system prompt (``GenerationStats.system_prompt_dropped``),
    with the numbers a user needs: the rendered system prompt's length in tokens (``system_tokens``,
    ``GenerationStats.system_prompt_tokens``), the --n-ctx at which --n-keep auto pins it whole (twice its length),
    and the --n-keep that pins it at this n_ctx where one below n_ctx can (and what that leaves to the rest); where
    n_ctx is twice its length already, only an --n-keep below its length drops it (a trial read "--n-ctx 38 or more
    keeps it" at --n-ctx 256 --n-keep 4)."""
    head = (f"the context was full and part of the system prompt ({system_tokens} tokens) was dropped with it, so the "
            "model no longer reads all of it: ")
    if n_ctx >= 2 * system_tokens:
        return f"{head}--n-keep auto (or {system_tokens} or more) keeps it"
    at_this = (
        f", or --n-keep {system_tokens} keeps it at this --n-ctx, leaving {n_ctx - system_tokens} tokens to the rest"
        if system_tokens < n_ctx - 1 else ""
    )
    return (f"{head}--n-ctx {2 * system_tokens} or more keeps it (--n-keep auto keeps a system prompt of up to half "
            f"of n_ctx){at_this}")


def cut_of(session: ChatSession, event: PromptOverflow) -> tuple[int, str]:
    """The rendered system prompt's length in tokens (``event.system_prompt_tokens``, what the engine was given)
    and why the ``session``'s prompt was cut (``app.counts.cut_cause``: its last message, the turns before it, or a
    system prompt longer than a chat's first message), for :func:`overflow_notice`."""
    users = [i for i, message in enumerate(session.messages) if message.get("role") == "user"]
    last = session.messages[users[-1]].get("content") or "" if users else ""
    earlier = bool(users) and users[-1] > 0
    return event.system_prompt_tokens, cut_cause(event.message_tokens, earlier, len(session.system_prompt) > len(last))


def overflow_notice(event: PromptOverflow, system_tokens: int = 0, cause: str = "") -> str:
    """What a prompt longer than n_ctx loses, said before its prefill starts in the window's footer's words
    (``app.counts.cut_text``: why, with ``cause``, and what the model reads, naming the system prompt of
    ``system_tokens`` it keeps; a trial read "keeps its first 48 (the last message's first 24 among them)" here and
    "the system prompt's 24 tokens, your message's first 24" in the window), with what would keep the rest: a larger
    --n-ctx while the prompt fits under the model's limit (``event.max_n_ctx``), else a shorter prompt. What the
    model skips counts what earlier replies' rolls dropped: the statistics line says what this reply discarded (a
    trial read "discards the 242" then "discarded 0" for the same reply)."""
    if event.max_n_ctx is None or event.prompt_tokens < event.max_n_ctx:
        advice = "raise --n-ctx to keep the rest"
    else:
        advice = f"the model reads at most {event.max_n_ctx:,} tokens, so no --n-ctx keeps the rest: shorten the prompt"
    read = cut_text(event.head_tokens + event.message_tokens, event.tail_tokens, event.prompt_tokens, cause,
                    system_tokens, event.message_tokens)
    return f"{read}; {advice}"
