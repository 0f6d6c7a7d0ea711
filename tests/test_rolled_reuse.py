"""A reply asked again after the context rolled (the window's Regenerate, an edited last message, a client retrying)
reuses the rolled KV cache up to where the two prompts part, instead of prefilling the whole conversation again
(noticed in the server trial of 2026-12-07: a repeated request after a roll read ``cached_tokens`` 0 and prefilled
every token; at n_ctx 4,096 on an AVX2 CPU that is ~30 s before the first token).

The reused cache is the rolled one: the model reads what it read when the reply was first asked, minus what the rolls
dropped, as the turn after a roll does; its logits are those of the prompt prefilled once more and rolled as the reply rolled it.
"""

import numpy as np
import pytest
from helpers import settings

from inference.chat import ChatSession
from inference.engine import Engine
from inference.events import ContextRolled, PromptOverflow
from inference.model import load_model
from inference.precision import PrecisionSettings

EXACT = PrecisionSettings(inference="f32", kv_cache="f32", dynamic_quantization="off", fast_prefill="off")
N_CTX = 160
CONTEXT = {"n_ctx": N_CTX, "n_keep": "auto", "n_discard": 16}  # rolls of 16 tokens: the first turns go first


@pytest.fixture(scope="module")
def engine(int4_dir):
    return Engine(load_model(int4_dir, "CPU", EXACT))


def _rolled_chat(engine: Engine) -> tuple[ChatSession, list[int], list[ContextRolled]]:
    """A chat whose third reply rolled the first turns out of the cache; returns it, the third turn's prompt and the
    reply's rolls."""
    engine.reset()
    session = ChatSession(engine, system_prompt="You are a terse assistant.")
    for question in ("What is 2+2?", "Name a fruit."):
        list(session.send(question, settings("ar", max_new_tokens=12, **CONTEXT)))
    session.messages.append({"role": "user", "content": "Tell me a long story about a lighthouse keeper."})
    prompt = session.prompt_ids()
    events = list(session.reply(settings("ar", max_new_tokens=100, ignore_eos=True, **CONTEXT)))
    rolls = [e for e in events if isinstance(e, ContextRolled)]
    assert rolls and events[-1].stats.prefilled_tokens < len(prompt)  # it rolled, and was a follow-up turn
    return session, prompt, rolls


def test_a_reply_asked_again_after_a_roll_prefills_only_its_last_token_from_the_rolled_cache(engine):
    _, prompt, rolls = _rolled_chat(engine)
    dropped = len(engine._seen) - len(engine._cache)  # what the rolls took out of the cache
    assert dropped == sum(r.discarded_tokens for r in rolls) and prompt == engine._seen[: len(prompt)]
    events = list(engine.generate(prompt, settings("ar", max_new_tokens=16, **CONTEXT)))
    stats = events[-1].stats
    assert (stats.prefilled_tokens, stats.reused_tokens) == (1, len(prompt) - 1 - dropped)  # the last token, again
    overflow = next(e for e in events if isinstance(e, PromptOverflow))
    assert overflow.discarded_tokens == dropped  # the turn says what the model no longer reads, as before

    # The cache it read is the one the prompt had once rolled as the reply did: the prompt but its last token
    # prefilled, then the same rolls (a rolled cache is no fresh prefill of its tokens: they were computed with the
    # dropped ones before them). Each pass computes its rows alike, so the logits agree to f32 rounding (1e-4).
    fed = [prompt[-1], *stats.token_ids[:-1]]
    assert engine._reuse_prefix(prompt, N_CTX) == len(prompt) - 1
    reused = engine._cache.forward(fed, N_CTX)
    engine.reset()
    engine._cache.prefill(prompt[:-1], N_CTX, len(prompt) - 1)
    for roll in rolls:
        engine._cache.roll(roll.n_keep, roll.discarded_tokens)
    rolled_again = engine._cache.forward(fed, N_CTX)
    assert np.abs(reused - rolled_again).max() <= 1e-4
    assert list(reused.argmax(axis=1)) == stats.token_ids  # and the reply is the greedy one of that cache


def test_an_edit_that_parts_from_the_chat_where_the_rolls_dropped_it_starts_from_an_empty_cache(engine):
    session, prompt, _ = _rolled_chat(engine)
    pinned = session.system_prompt_tokens()
    dropped = len(engine._seen) - len(engine._cache)
    assert engine._cache.tokens[:pinned] == prompt[:pinned] and pinned + 1 < pinned + dropped < len(prompt)
    edited = list(prompt)
    edited[pinned + 1] += 1  # the first question changed: the cache no longer holds that chat after its system prompt
    stats = list(engine.generate(edited, settings("ar", max_new_tokens=4, **CONTEXT)))[-1].stats
    assert (stats.reused_tokens, stats.prefilled_tokens) == (0, len(edited))  # computed again, as before

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
