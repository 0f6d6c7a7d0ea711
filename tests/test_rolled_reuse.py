"""A reply asked again after the context rolled (the window's Regenerate, an edited last message, a client retrying)
reuses the rolled KV cache up to where the two prompts part, instead of prefilling the whole conversation again
(noticed in the server trial of 2026-12-07: a repeated request after a roll read ``cached_tokens`` 0 and prefilled
every token; at n_ctx 4,096 on an AVX2 CPU that is ~30 s before the first token).

The reused cache is the rolled one: the model reads what it read when the reply was first asked, so a greedy reply is
the same again. A prompt that fits in n_ctx is read again whole instead: rereading costs less than a full context and
loses nothing.
"""

import pytest
from helpers import settings

from inference.chat import ChatSession
from inference.engine import Engine
from inference.events import PromptOverflow
from inference.model import load_model
from inference.precision import PrecisionSettings

EXACT = PrecisionSettings(inference="f32", kv_cache="f32", dynamic_quantization="off", fast_prefill="off")
N_CTX = 160
CONTEXT = {"n_ctx": N_CTX, "n_keep": "auto", "n_discard": 32}  # rolls of 32 tokens: the first turn goes first


@pytest.fixture(scope="module")
def engine(int4_dir):
    return Engine(load_model(int4_dir, "CPU", EXACT))


def _rolled_chat(engine: Engine) -> tuple[ChatSession, list[int], object]:
    """A chat whose second reply rolled the first turn out of the cache, then a short third turn longer than n_ctx
    in all, whose reply rolls nothing: returns it, the third turn's prompt and that reply's statistics."""
    engine.reset()
    session = ChatSession(engine, system_prompt="You are a terse assistant.")
    list(session.send("What is 2+2?", settings("ar", max_new_tokens=12, **CONTEXT)))
    second = list(session.send("Tell me a long story about a lighthouse keeper.",
                               settings("ar", max_new_tokens=106, ignore_eos=True, **CONTEXT)))
    assert second[-1].stats.rolls >= 1
    session.messages.append({"role": "user", "content": "Thanks."})
    prompt = session.prompt_ids()
    third = list(session.reply(settings("ar", max_new_tokens=6, **CONTEXT)))[-1].stats
    assert len(prompt) > N_CTX and third.rolls == 0 and third.prefilled_tokens < 20  # a follow-up of the rolled cache
    return session, prompt, third


def test_a_reply_asked_again_after_a_roll_prefills_only_its_last_token_and_says_the_same(engine):
    _, prompt, third = _rolled_chat(engine)
    dropped = len(engine._seen) - len(engine._cache)  # what the rolls took out of the cache
    assert dropped > 0 and prompt == engine._seen[: len(prompt)]
    events = list(engine.generate(prompt, settings("ar", max_new_tokens=6, **CONTEXT)))
    stats = events[-1].stats
    assert (stats.prefilled_tokens, stats.reused_tokens) == (1, len(prompt) - 1 - dropped)  # the last token, again
    overflow = next(e for e in events if isinstance(e, PromptOverflow))
    assert overflow.discarded_tokens == dropped  # the turn says what the model no longer reads, as before
    # The same cache as the first time, but for the last prompt token, fed again in a pass of its own: SpecChat's
    # kernels compute each row alike whatever the pass's width, so the greedy reply is the same.
    assert stats.token_ids == third.token_ids


def test_a_prompt_that_fits_in_n_ctx_after_a_roll_is_read_again_whole(engine):
    """Roll helper's trial: the second reply, regenerated after its own decoding rolled, read 110 of its 228 prompt
    tokens from the rolled cache at n_ctx 256, though all 228 fit; a prompt within n_ctx is prefilled again whole."""
    session, third, _ = _rolled_chat(engine)
    assert [m["role"] for m in session.messages] == ["user", "assistant"] * 3
    del session.messages[3:]  # back to the second question, to regenerate its reply
    prompt = session.prompt_ids()
    assert len(prompt) <= N_CTX < len(third) and engine._seen[: len(prompt)] == prompt
    events = list(engine.generate(prompt, settings("ar", max_new_tokens=4, **CONTEXT)))
    stats = events[-1].stats
    assert (stats.reused_tokens, stats.prefilled_tokens) == (0, len(prompt))
    assert not any(isinstance(e, PromptOverflow) for e in events)  # the model reads all of it


def test_an_edit_that_parts_from_the_chat_where_the_rolls_dropped_it_starts_from_an_empty_cache(engine):
    session, prompt, _ = _rolled_chat(engine)
    pinned = session.system_prompt_tokens()
    dropped = len(engine._seen) - len(engine._cache)
    assert engine._cache.tokens[:pinned] == prompt[:pinned] and pinned + 1 < pinned + dropped < len(prompt)
    edited = list(prompt)
    edited[pinned + 1] += 1  # the first question changed: the cache no longer holds that chat after its system prompt
    stats = list(engine.generate(edited, settings("ar", max_new_tokens=4, **CONTEXT)))[-1].stats
    assert stats.reused_tokens == 0  # computed again (cut to fit), as before

    _, prompt, _ = _rolled_chat(engine)
    edited = prompt[:-6] + [prompt[-6] + 1] + prompt[-5:]  # the last message edited: parts within the cached end
    dropped = len(engine._seen) - len(engine._cache)
    stats = list(engine.generate(edited, settings("ar", max_new_tokens=4, **CONTEXT)))[-1].stats
    assert (stats.reused_tokens, stats.prefilled_tokens) == (len(prompt) - 6 - dropped, 6)


def test_a_long_paste_asked_again_is_cut_again_and_said_alike(engine):
    """A cache a middle cut made keeps the message's first tokens between its start and its end, which read as part of
    the start when the same prompt comes again: reused, the reply was said to have read 232 of 616 tokens ("the
    system prompt's 24 tokens and the last 208") where the cut had read 252. It is cut again, and said alike."""
    engine.reset()
    session = ChatSession(engine)
    session.messages.append({"role": "user", "content": "Summarize this: " + "The lighthouse keeper counts ships. " * 60})
    prompt, message = session.prompt_ids(), session.last_message(session.prompt_ids())
    cut = settings("ar", max_new_tokens=4, n_ctx=256, n_keep="auto")
    first = list(engine.generate(prompt, cut, system_prompt_tokens=session.system_prompt_tokens(), message=message))
    again = list(engine.generate(prompt, cut, system_prompt_tokens=session.system_prompt_tokens(), message=message))
    said = [next(e for e in events if isinstance(e, PromptOverflow)) for events in (first, again)]
    assert said[0].message_tokens > 0 and said[1] == said[0]
    assert again[-1].stats.reused_tokens == 0 and again[-1].stats.token_ids == first[-1].stats.token_ids
