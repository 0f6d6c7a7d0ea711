"""The engine on the default model: rolls, prefix reuse, cancellation, stop strings, sampling, Auto decoding."""

import threading

import numpy as np
import pytest
from helpers import PROMPTS, assert_same_or_near_tie, chat_ids, require_native, settings

from inference.chat import ChatSession
from inference.engine import Engine
from inference.events import ContextRolled, DrafterUse, Finished, PromptOverflow, StepStats, TextDelta
from inference.model import load_model
from inference.precision import PrecisionSettings
from inference.scoring import score
from inference.settings import MAX_K

# Exact arithmetic, and no fast-prefill copy, so that every key below is computed by the same f32 kernels.
EXACT = PrecisionSettings(inference="f32", kv_cache="f32", dynamic_quantization="off", fast_prefill="off")
BF16 = PrecisionSettings(inference="bf16", kv_cache="f32", dynamic_quantization="off", fast_prefill="off")
# Rolled keys vs a fresh prefill's, f32 KV cache. f32 compute: measured within 5e-5 at any age (AVX2 and AMX),
# so 1e-3 absolute. bf16 compute: a key's two rotate-half components are each rounded to bf16 (8 significant
# bits) before the roll rotates them into each other, so an element may move by up to two bf16 steps of the
# larger magnitude in its head vector (measured: 26 of 9,408 keys off by one step, 0.0625 at ~10).
KEY_ATOL = 1e-3
BF16_STEP = 2.0**-7  # spacing of bf16 values relative to their magnitude


@pytest.fixture(scope="module")
def engine(target):
    return Engine(target)


@pytest.fixture(scope="module")
def f32_engine(int4_dir):
    return Engine(load_model(int4_dir, "CPU", EXACT))


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_roll_keys_equal_a_fresh_prefill_of_the_kept_tokens(int4_dir, precision):
    require_native(precision)
    settings_ = EXACT if precision == "f32" else BF16
    rolled = Engine(load_model(int4_dir, "CPU", settings_))
    assert rolled.target.precision.inference == precision and rolled.target.precision.kv_cache == "f32"
    ids = chat_ids(rolled.target, PROMPTS[0])
    events = list(rolled.generate(ids, settings("ar", max_new_tokens=40, n_ctx=64, n_keep=4, n_discard=20), roll_long_prompt=True))
    rolls = [e for e in events if isinstance(e, ContextRolled)]
    assert rolls and all(r.discarded_tokens == 20 for r in rolls)
    rolled_keys = rolled.layer_keys(0)
    kept_tokens = list(rolled._cache.tokens)
    fresh = Engine(load_model(int4_dir, "CPU", settings_))
    fresh._cache.forward(kept_tokens)
    fresh_keys = fresh.layer_keys(0)
    assert rolled_keys.shape == fresh_keys.shape == (1, 3, len(kept_tokens), 64)
    assert np.abs(fresh_keys).max() > 5  # real keys, not zeros
    tolerance = KEY_ATOL
    if precision == "bf16":
        tolerance = KEY_ATOL + 2 * BF16_STEP * np.abs(fresh_keys).max(axis=-1, keepdims=True)
    excess = np.abs(rolled_keys - fresh_keys) - tolerance
    assert excess.max() <= 0, f"{(excess > 0).sum()} keys off by up to {excess.max():.4f} beyond the {precision} tolerance"


def test_unrotated_shift_would_be_wrong(f32_engine):
    """Control for the test above: the keys after the sinks really were moved (rotation matters)."""
    f32_engine.reset()
    list(f32_engine.generate(chat_ids(f32_engine.target, PROMPTS[0]), settings("ar", max_new_tokens=40, n_ctx=64, n_discard=20)))
    keys = f32_engine.layer_keys(0)
    rope = f32_engine.target.rope
    assert np.abs(rope.shift_keys(keys[:, :, 4:], 20) - keys[:, :, 4:]).max() > 1.0


@pytest.mark.parametrize("decoding", ["ar", "spec_lookup"])
def test_generation_of_three_windows_keeps_the_cache_bounded(engine, target, decoding):
    n_ctx = 96
    engine.reset()
    lengths, physical = [], []
    for event in engine.generate(chat_ids(target, PROMPTS[1]), settings(decoding, max_new_tokens=3 * n_ctx, n_ctx=n_ctx, ignore_eos=True)):
        if isinstance(event, StepStats):
            lengths.append(event.cache_len)
            physical.append(engine.cache_physical_length)
        if isinstance(event, Finished):
            stats = event.stats
    assert stats.new_tokens == 3 * n_ctx
    assert max(lengths) <= n_ctx
    assert max(physical) <= n_ctx + 64
    assert stats.rolls >= 3


def test_prompt_longer_than_n_ctx_is_rolled_through_when_asked(engine, target):
    ids = chat_ids(target, " ".join(PROMPTS * 3))
    assert len(ids) > 200
    engine.reset()
    events = list(engine.generate(ids, settings("ar", max_new_tokens=8, n_ctx=64), roll_long_prompt=True))
    stats = events[-1].stats
    assert stats.rolls >= 3 and stats.new_tokens >= 1
    assert engine.cache_length <= 64


def _genesis_ids(target, tokens: int) -> list[int]:
    """A chat prompt of at least ``tokens`` tokens (Genesis, KJV)."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    ids = chat_ids(target, "Summarize this text in one sentence:\n\n" + text[: tokens * 6])
    assert len(ids) >= tokens
    return ids


def _fed_by_prefill(engine) -> list[int]:
    """Record the size of every prefill pass of ``engine`` from now on (a list it appends to)."""
    fed, original = [], engine._cache.prefill

    def counting(token_ids, *args, **kwargs):
        fed.append(len(token_ids))
        return original(token_ids, *args, **kwargs)

    engine._cache.prefill = counting
    return fed


@pytest.mark.parametrize("decoding", ["ar", "spec_lookup"])
def test_a_prompt_of_ten_n_ctx_is_cut_in_the_middle_before_its_prefill(f32_engine, target, decoding):
    """The middle of the prompt is never prefilled: its first tokens (no message given: the prompt's own first
    (128 - 24) // 8 = 13) and the last that fit with room for the 24-token reply are, and the reply equals a fresh
    run's on exactly those tokens (so the TTFT is an n_ctx prompt's at most, not ten rolls')."""
    engine, n_ctx = f32_engine, 128
    ids = _genesis_ids(target, 10 * n_ctx)
    engine.reset()
    fed = _fed_by_prefill(engine)
    try:
        events = list(engine.generate(ids, settings(decoding, max_new_tokens=24, n_ctx=n_ctx, n_discard=32)))
    finally:
        del engine._cache.prefill
    overflow, stats = events[0], events[-1].stats
    assert isinstance(overflow, PromptOverflow) and overflow.discarded_tokens == stats.discarded_tokens
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert not [e for e in events[:first_text] if isinstance(e, ContextRolled)]
    kept = ids[:13] + ids[len(ids) - 91 :]  # 104 kept: 24 left for the reply
    assert (overflow.head_tokens, overflow.message_tokens, overflow.tail_tokens) == (4, 9, 91)
    assert overflow.discarded_tokens == len(ids) - len(kept) and engine._cache.tokens[: len(kept)] == kept
    assert sum(fed) == len(kept) and len(ids) > 10 * n_ctx
    assert (stats.prompt_tokens, stats.reused_tokens, stats.prefilled_tokens) == (len(ids), 0, len(kept))  # computed
    engine.reset()
    reference = engine.generate_text(kept, settings("ar", max_new_tokens=24, n_ctx=n_ctx, n_discard=32))
    if decoding == "ar":
        assert stats.token_ids == reference.token_ids  # the same passes over the same tokens
    else:
        assert_same_or_near_tie(engine, kept, reference, stats, {"n_ctx": n_ctx, "n_discard": 32}, decoding)


def test_a_long_paste_in_a_second_turn_rolls_the_first_away_and_the_third_turn_reuses_the_cache(f32_engine, target):
    engine, n_ctx = f32_engine, 128
    engine.reset()
    first = chat_ids(target, "Hi!")
    one = engine.generate_text(first, settings("ar", max_new_tokens=12, n_ctx=n_ctx))
    paste = _genesis_ids(target, 4 * n_ctx)
    second = first + one.token_ids + paste[1:]  # (the template's first token once)
    fed = _fed_by_prefill(engine)
    held = len(engine._cache)
    try:
        events = list(engine.generate(second, settings("ar", max_new_tokens=12, n_ctx=n_ctx)))
        two = events[-1].stats
        assert sum(fed) <= n_ctx and two.discarded_tokens > 3 * n_ctx
        assert held == len(first) + len(one.token_ids) and two.prefilled_tokens == sum(fed)  # turn 1 held in the cache
        assert two.reused_tokens == (128 - 12) // 8  # of which the cut keeps the prompt's first tokens
        first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
        rolls = [e.discarded_tokens for e in events[:first_text] if isinstance(e, ContextRolled)]
        assert rolls == [held - two.reused_tokens]  # turn 1 goes, but for the prompt's first tokens
        third = second + two.token_ids + chat_ids(target, "Thanks.")[1:]
        fed.clear()
        held = len(engine._cache)
        three = engine.generate_text(third, settings("ar", max_new_tokens=4, n_ctx=n_ctx))
        assert three.prefilled_tokens < 40 and sum(fed) == three.prefilled_tokens  # only the new turn
        assert three.reused_tokens == held  # the rest of the cache: nothing cut again (the paste's middle stays out)
    finally:
        del engine._cache.prefill


def test_a_long_paste_keeps_the_instruction_at_its_start_and_decodes_exactly(f32_engine, target):
    """Newcomer trial: "Summarize this text in two sentences:" then ~50 KB, longer than n_ctx. The cut keeps the
    chat's start, the message's first (512 - 16) // 8 = 62 tokens (the instruction among them) and its end; the
    notice's numbers add up to the prompt's; greedy decoding then equals a fresh run on exactly the kept tokens."""
    from pathlib import Path

    engine, n_ctx, instruction = f32_engine, 512, "Summarize this text in two sentences:"
    genesis = (Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    session = ChatSession(engine)
    session.messages.append({"role": "user", "content": f"{instruction}\n\n{genesis[:12_000]}"})
    ids = session.prompt_ids()
    turn_start, text_start = session.last_message(ids)
    assert 0 == turn_start < text_start < 40 and target.tokenizer.decode(ids[text_start:]).startswith(instruction)
    engine.reset()
    events = list(session.reply(settings("ar", max_new_tokens=16, n_ctx=n_ctx)))
    overflow, stats = events[0], events[-1].stats
    assert isinstance(overflow, PromptOverflow) and overflow.prompt_tokens == len(ids) > 5 * n_ctx
    assert (overflow.head_tokens, overflow.message_tokens) == (text_start, 62)
    assert overflow.tail_tokens == 512 - 16 - 62 - text_start
    assert overflow.head_tokens + overflow.message_tokens + overflow.tail_tokens + overflow.discarded_tokens == len(ids)
    assert stats.discarded_tokens == overflow.discarded_tokens and stats.prefilled_tokens == 512 - 16
    head = text_start + 62
    kept = ids[:head] + ids[len(ids) - overflow.tail_tokens :]
    cached = engine._cache.tokens  # the kept prompt, then the reply (all but its last token)
    assert cached[: len(kept)] == kept and cached[len(kept) :] == stats.token_ids[:-1]
    instruction_ids = target.encode(instruction)
    assert ids[text_start : text_start + len(instruction_ids)] == instruction_ids  # (tokenized alike in the chat)
    assert cached[text_start : text_start + len(instruction_ids)] == instruction_ids
    assert text_start + len(instruction_ids) < len(ids) - n_ctx  # a cut keeping n_keep and the end would lose it
    engine.reset()
    reference = engine.generate_text(kept, settings("ar", max_new_tokens=16, n_ctx=n_ctx))
    assert stats.token_ids == reference.token_ids and len(stats.token_ids) == 16


def test_a_long_paste_in_a_later_turn_keeps_n_keep_then_that_message_s_start(f32_engine, target):
    """The cut in a chat that has a turn before the paste: the cache keeps its pinned head (SmolLM2's default system
    message and the first user turn's role header: ``ChatSession.system_prompt_tokens``, more than n_keep 4; one roll
    drops the rest of the earlier turn), then the paste's first (256 - 16) // 8 = 30 tokens after that one header
    (``engine._repeats_pinned_header``: not a second one), then the end; greedy decoding equals a fresh run on exactly
    those tokens, or first differs at a near-tie (the passes differ)."""
    from pathlib import Path

    engine, n_ctx, instruction = f32_engine, 256, "Summarize this text in two sentences:"
    genesis = (Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    engine.reset()
    session = ChatSession(engine)
    list(session.send("Hi!", settings("ar", max_new_tokens=8, n_ctx=n_ctx)))
    session.messages.append({"role": "user", "content": f"{instruction}\n\n{genesis[:6_000]}"})
    ids = session.prompt_ids()
    turn_start, text_start = session.last_message(ids)
    assert 20 < turn_start < text_start == turn_start + 3 and len(ids) > 4 * n_ctx
    system = session.system_prompt_tokens()
    assert 4 < system < turn_start and ids[system - 3 : system] == ids[turn_start:text_start]  # one role header
    held = len(engine._cache)
    events = list(session.reply(settings("ar", max_new_tokens=16, n_ctx=n_ctx)))
    overflow, stats = events[0], events[-1].stats
    tail = 240 - system - 30
    assert (overflow.head_tokens, overflow.message_tokens, overflow.tail_tokens) == (system, 30, tail)
    assert overflow.system_prompt_tokens == system  # (the front ends name the start kept as the system prompt)
    assert overflow.discarded_tokens == len(ids) - 240 == stats.discarded_tokens
    rolls = [e for e in events if isinstance(e, ContextRolled)]
    assert [(r.n_keep, r.discarded_tokens) for r in rolls] == [(system, held - system)]  # the first turn goes
    assert stats.reused_tokens == system  # the cached tokens the cut keeps
    kept = ids[:system] + ids[text_start : text_start + 30] + ids[len(ids) - tail :]
    assert engine._cache.tokens[:240] == kept and stats.prefilled_tokens == 240 - system
    assert not stats.system_prompt_dropped
    engine.reset()
    reference = engine.generate_text(kept, settings("ar", max_new_tokens=16, n_ctx=n_ctx))
    assert_same_or_near_tie(engine, kept, reference, stats, {"n_ctx": n_ctx}, "a later turn's cut", 1)


def test_a_second_long_paste_whose_cut_reaches_into_the_cache_keeps_its_instruction(f32_engine, target):
    """Newcomer trial: a 20 KB paste that fitted n_ctx = 4,096, then another in the same chat (6,686 tokens in all).
    The cut's end reached into the cached first paste, so the prompt rolled through instead, two rolls of n_discard
    (half of n_ctx) that dropped the new message's start with its instruction ("keeps the first 4 tokens and the last
    2,590"), and the reply ignored it. Rolling through is kept for what keeps the last message whole (a long chat of
    short turns); here the cut is made: n_keep, then the new message's turn with its instruction, then the end,
    greedy decoding equal to a fresh run on exactly those tokens up to a near-tie."""
    from pathlib import Path

    engine, n_ctx, instruction = f32_engine, 256, "Summarize this text in two sentences:"
    genesis = (Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    engine.reset()
    session = ChatSession(engine)
    list(session.send(f"{instruction}\n\n{genesis[:700]}", settings("ar", max_new_tokens=8, n_ctx=n_ctx)))
    assert session.messages[-1]["role"] == "assistant" and len(engine._cache) < n_ctx  # the first paste fitted
    session.messages.append({"role": "user", "content": f"{instruction}\n\n{genesis[1000:1700]}"})
    ids = session.prompt_ids()
    turn_start, text_start = session.last_message(ids)
    assert n_ctx < len(ids) < n_ctx + turn_start and len(ids) - turn_start < n_ctx - 16  # the message fits n_ctx
    events = list(session.reply(settings("ar", max_new_tokens=16, n_ctx=n_ctx)))
    overflow, stats = next(e for e in events if isinstance(e, PromptOverflow)), events[-1].stats
    assert overflow.head_tokens + overflow.message_tokens + overflow.tail_tokens + overflow.discarded_tokens == len(ids)
    kept_from = len(ids) - overflow.tail_tokens - overflow.message_tokens
    # the pinned head (SmolLM2's default system message, more than n_keep 4), then the whole last message
    pinned = session.system_prompt_tokens()
    assert overflow.head_tokens == pinned > 4 and kept_from <= text_start
    instruction_ids = target.encode(instruction)
    assert ids[text_start : text_start + len(instruction_ids)] == instruction_ids
    kept = ids[:pinned] + ids[kept_from:]
    cached = engine._cache.tokens
    assert cached[: len(kept)] == kept and cached[len(kept) :] == stats.token_ids[:-1]
    assert stats.discarded_tokens == overflow.discarded_tokens == len(ids) - len(kept)
    engine.reset()
    reference = engine.generate_text(kept, settings("ar", max_new_tokens=16, n_ctx=n_ctx))
    assert_same_or_near_tie(engine, kept, reference, stats, {"n_ctx": n_ctx}, "a cut into the cache", 1)


def test_a_one_token_reply_to_a_long_prompt_leaves_the_next_reply_as_a_fresh_run_s(engine, target):
    """Newcomer trial (server, max_tokens 1 after a 257-token prompt, then "Hi"): the first token came from the
    prefill's logits with no decode pass after it, so the states stayed in the fast prefill copy, and the next
    request's prefill read the old prompt's masked tokens there ("Thetaipelekos:"). Greedy "Hi" after it is a fresh
    run's reply (where this CPU has no fast prefill copy, both are the exact path's)."""
    long_prompt = chat_ids(target, "Summarise this. " + " ".join(PROMPTS) * 3)
    hi = chat_ids(target, "Hi")
    assert len(long_prompt) > 200
    engine.reset()
    one = engine.generate_text(long_prompt, settings("ar", max_new_tokens=1))
    assert len(one.token_ids) == 1
    after = engine.generate_text(hi, settings("ar", max_new_tokens=12))
    engine.reset()
    fresh = engine.generate_text(hi, settings("ar", max_new_tokens=12))
    assert after.token_ids == fresh.token_ids and after.fast_prefilled_tokens == fresh.fast_prefilled_tokens == 0


def test_follow_up_turn_prefills_only_its_new_tokens_and_matches_a_fresh_run(f32_engine):
    """Without the fast prefill: where the CPU has bf16, a prompt of 64+ tokens prefilled in one piece is computed
    in bf16, the same tokens prefilled turn by turn are not, and a near-tie may then go either way."""
    engine = f32_engine
    engine.reset()
    session = ChatSession(engine, system_prompt="You are a concise assistant.")
    first = [e for e in session.send("Name three colours.", settings("ar", max_new_tokens=24)) if isinstance(e, Finished)][0]
    second = [e for e in session.send("Now name three animals.", settings("ar", max_new_tokens=24)) if isinstance(e, Finished)][0]
    full_prompt = session.prompt_ids()
    assert first.stats.prefilled_tokens == first.stats.prompt_tokens
    assert second.stats.prefilled_tokens < second.stats.prompt_tokens // 2
    replay = Engine(engine.target)
    history = ChatSession(replay, session.system_prompt, session.messages[:3])
    fresh = replay.generate_text(history.prompt_ids(), settings("ar", max_new_tokens=24))
    assert fresh.token_ids == second.stats.token_ids
    assert len(full_prompt) > second.stats.prompt_tokens


def test_cancel_from_another_thread_returns_the_partial_reply(engine, target):
    engine.reset()
    cancel = threading.Event()
    texts = []
    for event in engine.generate(chat_ids(target, PROMPTS[1]), settings("ar", max_new_tokens=500), cancel=cancel):
        if isinstance(event, TextDelta):
            texts.append(event.text)
            if len(texts) == 10:
                threading.Thread(target=cancel.set).start()
        if isinstance(event, Finished):
            stats = event.stats
    assert stats.stop_reason == "cancelled"
    assert 10 <= stats.new_tokens < 500
    assert stats.text == "".join(texts)


def test_stop_string_cuts_the_reply_before_it(engine, target):
    engine.reset()
    free = engine.generate_text(chat_ids(target, PROMPTS[3]), settings("ar", max_new_tokens=60))
    stop = free.text[20:26]
    engine.reset()
    stopped = engine.generate_text(chat_ids(target, PROMPTS[3]), settings("ar", max_new_tokens=60, stop_strings=(stop,)))
    assert stopped.stop_reason == "stop_string"
    assert stopped.text == free.text[: free.text.find(stop)]


def test_sampling_is_reproducible_with_a_seed_and_varies_without(engine, target, draft):
    """The seed is SpecChat's, end to end: a sampled reply is a function of the prompt, the settings and the seed,
    whatever the engine generated before and in a fresh engine, in every decoding mode (the draft model samples its
    proposals from the same seeded generator); another seed gives another reply."""
    ids = chat_ids(target, PROMPTS[1])

    def reply(on: Engine, decoding: str, seed: int | None) -> list[int]:
        on.reset()
        return on.generate_text(ids, settings(decoding, max_new_tokens=32, temperature=0.9, top_p=0.95, seed=seed)).token_ids

    first = reply(engine, "ar", 7)
    assert len(first) == 32
    reply(engine, "ar", None)  # an unseeded reply in between changes nothing
    assert reply(engine, "ar", 7) == first
    assert reply(Engine(target), "ar", 7) == first  # nor does a new engine
    assert reply(engine, "ar", 8) != first
    lookup = reply(engine, "spec_lookup", 7)
    assert reply(engine, "spec_lookup", 7) == lookup and reply(engine, "spec_lookup", 8) != lookup
    with_draft = Engine(target, draft)
    drafted = reply(with_draft, "spec_model", 7)
    assert reply(with_draft, "spec_model", 7) == drafted and reply(with_draft, "spec_model", 8) != drafted
    auto = reply(engine, "auto", 7)  # Auto plans a seeded reply from preset costs and its own drafts
    engine.generate_text(ids, settings("auto", max_new_tokens=32))  # a greedy Auto reply measures costs between
    assert reply(engine, "auto", 7) == auto and reply(Engine(target), "auto", 7) == auto
    assert reply(engine, "auto", 8) != auto


def test_auto_is_greedy_exact_and_reports_every_step_by_drafter_and_k(engine, target):
    """Auto on the rewrite prompt (prompt lookup finds its phrases): the reply is plain decoding's, and its
    statistics account for every step: per drafter, per K, the drafts and acceptance summed."""
    ids = chat_ids(target, PROMPTS[0])
    engine.reset()
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=64))
    engine.reset()
    events = list(engine.generate(ids, settings("auto", max_new_tokens=64)))
    stats = events[-1].stats
    assert_same_or_near_tie(engine, ids, reference, stats, {}, "Auto")
    steps = [e for e in events if isinstance(e, StepStats)]
    assert stats.mode == "auto" and set(stats.by_drafter) <= {"plain", "lookup"} and stats.by_drafter["plain"].steps
    assert sum(use.steps for use in stats.by_drafter.values()) == sum(stats.k_steps.values()) == len(steps)
    assert sum(use.drafted for use in stats.by_drafter.values()) == stats.drafted == sum(s.drafted for s in steps)
    assert sum(use.accepted for use in stats.by_drafter.values()) == stats.accepted == sum(s.accepted for s in steps)
    assert {s.drafter for s in steps} == set(stats.by_drafter)
    assert stats.fallback_tokens == sum(s.emitted for s in steps if not s.drafted)
    assert stats.drafter == stats.most_accepted_drafter() == ("lookup" if stats.accepted else None)


def test_auto_takes_plain_steps_when_the_draft_model_costs_as_much_as_the_target(target, draft):
    """The 8-bit draft is as large as the 4-bit target: a K = 1 step costs two passes for at most two tokens, so
    after measuring it Auto decodes plainly (re-measuring the draft now and then), and stays exact."""
    engine = Engine(target, draft)
    ids = chat_ids(target, PROMPTS[1])
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=96))
    engine.reset()
    stats = engine.generate_text(ids, settings("auto", max_new_tokens=96))
    assert stats.by_drafter["plain"].steps > 2 * stats.by_drafter.get("model", DrafterUse()).steps, stats.by_drafter
    assert_same_or_near_tie(engine, ids, reference, stats, {}, "Auto with a costly draft")


def test_engine_imports_neither_qt_nor_torch_nor_the_model_store():
    import subprocess
    import sys

    code = (
        "import sys, inference.engine, inference.chat, inference.exactness; "
        "store = [m for m in sys.modules if m.startswith('inference.models')]; "
        "import inference.models.store, app.main; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'PySide6', 'optimum', 'transformers', 'nncf')]; "
        "print(store, bad); sys.exit(1 if store or bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_scoring_in_chunks_equals_one_pass_and_rolls_keep_perplexity_finite(f32_engine, target):
    """With exact precision, chunked scoring reproduces one pass (a u8 KV cache differs by up to ~0.25 nats, bf16
    compute by up to 0.27)."""
    engine = f32_engine
    text = open(__import__("pathlib").Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt", encoding="utf-8").read()
    ids = target.encode(text)[:300]
    from inference.settings import ContextSettings

    one_pass = score(engine, ids, ContextSettings(n_ctx=512), chunk=512)
    chunked = score(engine, ids, ContextSettings(n_ctx=512), chunk=37)
    np.testing.assert_allclose(chunked, one_pass, atol=2e-3)
    assert 1.5 < np.exp(-one_pass.mean()) < 60  # KJV English: a real, finite perplexity
    rolled = score(engine, ids, ContextSettings(n_ctx=64, n_keep=4))
    assert rolled.shape == one_pass.shape and np.isfinite(rolled).all()
    shuffled = score(engine, list(np.random.default_rng(0).permutation(ids)), ContextSettings(n_ctx=512))
    assert np.exp(-shuffled.mean()) > 3 * np.exp(-one_pass.mean())


def test_a_shift_rope_roll_equals_masking_the_dropped_tokens_at_every_layer(f32_engine, target):
    """Attention depends on relative positions only. A roll drops tokens and moves the tail back by n_discard,
    so the sinks end up n_discard positions closer to the tail. The same attention is obtained by keeping every
    cached key where it was, masking the dropped tokens out, and moving the *sinks* forward by n_discard. The
    reference below does that with its own RoPE code and its own key/value classification, and the two must
    give the same log-probabilities through all 30 layers (this caught value states being rotated as keys)."""
    import re

    import openvino as ov

    from inference.kv_cache import KVCache
    from inference.settings import ContextSettings

    text = open(__import__("pathlib").Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt", encoding="utf-8").read()
    ids = target.encode(text)[:160]
    n_ctx, n_keep, n_discard = 64, 4, 30
    rolled = score(f32_engine, ids, ContextSettings(n_ctx=n_ctx, n_keep=n_keep, n_discard=n_discard), chunk=16)

    inv_freq = 1.0 / 100000.0 ** (np.arange(0, 64, 2) / 64)

    def rotate(keys, delta):  # rotate-half RoPE by delta positions
        angle = delta * inv_freq
        cos, sin = np.cos(angle), np.sin(angle)
        x1, x2 = keys[..., :32], keys[..., 32:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(np.float32)

    masked = KVCache(f32_engine.target.compiled, None)
    live: list[int] = []  # physical slots still attended to
    scores = []
    done = 0
    while done < len(ids) - 1:
        if len(live) >= n_ctx:
            for slot in live[n_keep : n_keep + n_discard]:
                masked._alive[slot] = 0
            for state in masked._request.query_state():
                if re.match(r"past_key_values\.\d+\.key", state.name):
                    data = state.state.data.copy()
                    data[:, :, live[:n_keep]] = rotate(data[:, :, live[:n_keep]], n_discard)
                    state.state = ov.Tensor(data)
            live = live[:n_keep] + live[n_keep + n_discard :]
        part = ids[done : done + min(16, n_ctx - len(live), len(ids) - 1 - done)]
        live += list(range(masked.physical_length, masked.physical_length + len(part)))
        logits = masked.forward(part).astype(np.float64)
        log_norm = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        scores.extend(logits[np.arange(len(part)), ids[done + 1 : done + 1 + len(part)]] - log_norm)
        done += len(part)
    np.testing.assert_allclose(rolled, scores, atol=5e-3)
    assert np.abs(rolled[n_ctx:] - score(f32_engine, ids, ContextSettings(n_ctx=512), chunk=16)[n_ctx:]).max() > 0.1  # rolls mattered


def test_a_dropped_generator_leaves_the_engine_consistent(engine, target):
    ids = chat_ids(target, PROMPTS[0])
    engine.reset()
    reference = engine.generate_text(ids, settings("spec_lookup", max_new_tokens=24))
    events = engine.generate(ids, settings("spec_lookup", max_new_tokens=24))
    for _, _ in zip(range(5), events):
        pass
    events.close()  # e.g. the GUI went away mid-step
    again = engine.generate_text(ids, settings("spec_lookup", max_new_tokens=24))
    assert again.token_ids == reference.token_ids


def test_final_k_is_the_k_of_the_last_step_the_room_left_did_not_cut(engine, target):
    """A fixed K's final_k is that K, and Auto's the K it chose last, even where the reply's last steps had room for
    fewer drafts (max_new_tokens): a fixed K 4 reported final_k 0 for a reply of 50 tokens (its last step, with room
    for no draft, was plain) and 4 for another that ended on a full step."""
    ids = chat_ids(target, PROMPTS[1])  # a story: longer than 50 tokens
    for max_new_tokens in (50, 2):
        engine.reset()
        events = list(engine.generate(ids, settings("spec_lookup", max_new_tokens=max_new_tokens, k=4, temperature=0.0)))
        stats, last = events[-1].stats, [e for e in events if isinstance(e, StepStats)][-1]
        assert stats.stop_reason == "max_new_tokens" and last.k < 4  # the room cut the last step's K
        assert stats.final_k == 4, max_new_tokens
    engine.reset()
    events = list(engine.generate(ids, settings("auto", max_new_tokens=50, temperature=0.0)))
    stats, steps = events[-1].stats, [e for e in events if isinstance(e, StepStats)]
    assert stats.stop_reason == "max_new_tokens"

    def cut(step: StepStats) -> bool:  # the room (max_new_tokens; n_ctx is far) may have bounded Auto's choice
        room = 50 - (step.generated - step.emitted) - 1
        return step.k < MAX_K and step.k >= room

    assert cut(steps[-1])
    assert stats.final_k == [s.k for s in steps if not cut(s)][-1]


def test_a_turn_after_a_roll_says_what_the_model_no_longer_reads(engine):
    """Newcomer trial (n_ctx 256, replies of 64 tokens): the third reply rolled the context, 126 tokens dropped;
    the fourth turn ("What did I ask you first?") fitted into the rolled cache, so nothing rolled during it and its
    footer said nothing, while the model no longer read the chat's first question. The turn after a roll yields a
    ``PromptOverflow`` that counts the tokens earlier rolls dropped, and its numbers add up to the prompt's."""
    engine.reset()
    session = ChatSession(engine, system_prompt="You are a pirate.")
    first = list(session.send(PROMPTS[1], settings("ar", max_new_tokens=120, n_ctx=128, n_keep="auto", ignore_eos=True)))
    dropped = first[-1].stats.discarded_tokens
    held = len(engine._cache)
    assert dropped > 0 and held < 128 - 24  # it rolled, and the next short turn fits what is left
    second = list(session.send("Thanks.", settings("ar", max_new_tokens=4, n_ctx=128, n_keep="auto")))
    assert not any(isinstance(e, ContextRolled) for e in second)  # nothing rolls during this turn
    overflow, stats = next(e for e in second if isinstance(e, PromptOverflow)), second[-1].stats
    assert overflow.discarded_tokens == dropped and overflow.system_prompt_tokens == session.system_prompt_tokens()
    assert overflow.head_tokens + overflow.message_tokens + overflow.tail_tokens + dropped == stats.prompt_tokens
    assert stats.reused_tokens == held  # read from the cache: not the tokens the roll dropped (OpenAI's cached_tokens)
    assert overflow.head_tokens + overflow.tail_tokens == stats.reused_tokens + stats.prefilled_tokens


def test_a_reply_that_rolls_again_counts_as_reused_what_the_cache_held_at_its_start(engine):
    """Server trial (n_ctx 256): a turn after a roll, which rolled again itself, said ``cached_tokens`` 119 where
    240 were read from the cache (the server subtracted the reply's own drops from the engine's count, which included
    what earlier rolls dropped). ``reused_tokens`` counts what the cache held and kept at the reply's start, however
    the reply rolls afterwards."""
    engine.reset()
    session = ChatSession(engine, system_prompt="You are a pirate.")
    list(session.send(PROMPTS[1], settings("ar", max_new_tokens=120, n_ctx=128, n_keep="auto", ignore_eos=True)))
    held = len(engine._cache)
    events = list(session.send("Tell me more.", settings("ar", max_new_tokens=60, n_ctx=128, n_keep="auto",
                                                         ignore_eos=True)))
    stats = events[-1].stats
    assert held > 0 and stats.rolls >= 1  # its decoding rolled the cache it read
    assert stats.reused_tokens == held
