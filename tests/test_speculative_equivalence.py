"""Greedy speculative decoding gives the autoregressive tokens, with and without rolls of the context, at the
exact default precision and at the device's own defaults.

With exact settings (f32 compute and KV cache, no dynamic quantization) a one-token decode pass and a
multi-token verification pass agree within ~1e-4 logits, so the outputs must be identical unless the target's
two best logits are that close. At the device's defaults (a u8 KV cache everywhere, bf16 compute on CPUs with
AVX512_BF16/AMX) the argmax can flip where the two best logits are nearly equal. Either way a divergence is
accepted only where ``exactness.first_difference`` finds the top-2 gap within the noise it measures there
between the two modes' ways of computing the same tokens. Only the first divergence can be checked: after it the texts have different contexts.
"""

import pytest
from helpers import PROMPTS, assert_same_or_near_tie, chat_ids, settings

from inference.engine import Engine
from inference.model import load_model

NEW_TOKENS = 128
ROLLING = {"n_ctx": 32, "n_keep": 4}  # each roll drops 14 tokens: prompts of 40-70 tokens + replies roll >= 3 times


@pytest.fixture(scope="module", params=["exact", "device-defaults"])
def engine(request, target, draft, int4_dir):
    if request.param == "exact":
        return Engine(target, draft)
    return Engine(load_model(int4_dir, "CPU"), draft)


@pytest.mark.slow
@pytest.mark.parametrize("context", [{}, ROLLING], ids=["no-roll", "rolling"])
@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_greedy_speculative_equals_autoregressive(engine, target, prompt, context):
    ids = chat_ids(target, PROMPTS[prompt])
    engine.reset()
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=NEW_TOKENS, **context))
    if context:
        assert reference.rolls >= 3, reference.rolls
    for decoding in ("spec_model", "spec_lookup"):
        for k in (1, 3, 8):
            engine.reset()
            candidate = engine.generate_text(ids, settings(decoding, max_new_tokens=NEW_TOKENS, k=k, **context))
            if context and candidate.token_ids == reference.token_ids:
                assert candidate.rolls == reference.rolls
                assert candidate.discarded_tokens == reference.discarded_tokens
            label = f"{engine.target.precision.describe()}, {decoding} K={k}"
            assert_same_or_near_tie(engine, ids, reference, candidate, context, label, k)
