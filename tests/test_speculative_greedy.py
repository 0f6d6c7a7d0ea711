"""Greedy speculative decoding on the default model gives the autoregressive tokens, with and without rolls of the
context, with and without penalties, at the exact default precision and at the device's own defaults.

With exact settings (f32 compute and KV cache, no dynamic quantization) a one-token decode pass and a
multi-token verification pass agree within ~1e-4 logits, so the outputs must be identical unless the target's
two best logits are that close. At the device's defaults (a u8 KV cache everywhere, bf16 compute on CPUs with
AVX512_BF16/AMX) the argmax can flip where the two best logits are nearly equal. Either way a divergence is
accepted only where ``exactness.first_difference`` finds the top-2 gap within the noise it measures there
between the two modes' ways of computing the same tokens. Only the first divergence can be checked: after it the texts have different contexts.

Sampled speculative replies, and greedy ones under penalties on a tiny model: ``test_speculative_equivalence``.
"""

import pytest
from helpers import PROMPTS, assert_same_or_near_tie, chat_ids, settings

from inference.engine import Engine
from inference.exactness import first_difference
from inference.model import load_model

#: Reply length: 64 tokens still roll the rolling context >= 3 times (asserted) and reach the first difference that a
#: planted cache bug (a rejected draft's key kept) or a drafting past n_ctx makes (tokens 6-41, measured 2026-12-07);
#: the one case that bug left passing (prompt 0, exact, no roll: a short reply) passed at 128 too, which took twice the
#: time (this test was the suite's largest total on a slow AVX2 CPU).
NEW_TOKENS = 64
K_TURNS = (1, 3, 8)  # the Ks the greedy test rotates through, one per prompt and decoding
#: The prompts (of ``PROMPTS``) the greedy test runs: as many as K_TURNS, so that the rotation runs each (decoding, K)
#: pair once in each context and precision (prompts 3 and 4 ran the pairs of prompts 0 and 1 again: the same code
#: paths at 40% of the test's time), on a rewrite (prompt lookup's long matches), a story and code.
GREEDY_PROMPTS = range(len(K_TURNS))
ROLLING = {"n_ctx": 32, "n_keep": 4}  # each roll drops 14 tokens: prompts of 40-70 tokens + replies roll >= 3 times


@pytest.fixture(scope="module", params=["exact", "device-defaults"])
def engine(request, target, draft, int4_dir):
    if request.param == "exact":
        return Engine(target, draft)
    return Engine(load_model(int4_dir, "CPU"), draft)


@pytest.mark.slow
@pytest.mark.parametrize("context", [{}, ROLLING], ids=["no-roll", "rolling"])
@pytest.mark.parametrize("prompt", GREEDY_PROMPTS)
def test_greedy_speculative_equals_autoregressive(engine, target, prompt, context):
    """Each speculative decoding at each K against plain decoding, ``NEW_TOKENS`` tokens, with and without rolls,
    on both precisions. Every (decoding, K) pair runs on one prompt of each context and engine, not on every prompt:
    prompt i's draft-model reply drafts ``K_TURNS[i]`` tokens a step and its lookup reply ``K_TURNS[(i + 1) % 3]``,
    which cuts the test from 7 replies a prompt to 3 (it was about a fifth of the suite's time on a slow AVX2 CPU)."""
    ids = chat_ids(target, PROMPTS[prompt])
    engine.reset()
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=NEW_TOKENS, **context))
    if context:
        assert reference.rolls >= 3, reference.rolls
    for decoding, k in (("spec_model", K_TURNS[prompt % 3]), ("spec_lookup", K_TURNS[(prompt + 1) % 3])):
        engine.reset()
        candidate = engine.generate_text(ids, settings(decoding, max_new_tokens=NEW_TOKENS, k=k, **context))
        if context and candidate.token_ids == reference.token_ids:
            assert candidate.rolls == reference.rolls
            assert candidate.discarded_tokens == reference.discarded_tokens
        label = f"{engine.target.precision.describe()}, {decoding} K={k}"
        assert_same_or_near_tie(engine, ids, reference, candidate, context, label, k)


def test_the_greedy_test_covers_every_decoding_and_k_in_each_context():
    """The rotation above leaves no (decoding, K) pair out: each context runs every prompt of GREEDY_PROMPTS."""
    model_ks = {K_TURNS[prompt % 3] for prompt in GREEDY_PROMPTS}
    lookup_ks = {K_TURNS[(prompt + 1) % 3] for prompt in GREEDY_PROMPTS}
    assert model_ks == lookup_ks == set(K_TURNS)


#: Penalties of the greedy test below; the repetition window does not reach back into the prompt (a rewrite, whose
#: phrases prompt lookup finds).
PENALTIES = {"repetition_penalty": 1.3, "repeat_last_n": 8, "presence_penalty": 0.2, "frequency_penalty": 0.1}


@pytest.fixture(scope="module")
def penalized_reference(engine, target):
    """The prompt ids and the greedy autoregressive reply with ``PENALTIES`` on this module's engine, computed once for
    both decodings of the test below; the penalties must change the reply."""
    ids = chat_ids(target, PROMPTS[0])
    engine.reset()
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=64, **PENALTIES))
    plain = engine.generate_text(ids, settings("ar", max_new_tokens=64))
    assert plain.token_ids != reference.token_ids, "the penalties change the reply"
    return ids, reference


@pytest.mark.parametrize("decoding", ["spec_model", "spec_lookup"])
def test_greedy_with_penalties_speculative_equals_autoregressive_on_the_default_model(engine, penalized_reference,
                                                                                      decoding):
    ids, reference = penalized_reference
    engine.reset()
    candidate = engine.generate_text(ids, settings(decoding, max_new_tokens=64, k=4, **PENALTIES))
    assert candidate.drafted > 0
    sampling = settings("ar", **PENALTIES).sampling
    difference = first_difference(engine, ids, reference.token_ids, candidate.token_ids, k=4, sampling=sampling)
    assert difference is None or difference.near_tie, difference.describe()
