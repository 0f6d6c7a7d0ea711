"""Greedy speculative decoding gives the autoregressive tokens, with and without rolls of the context.

A one-token decode pass and a multi-token verification pass can round differently, so where the two top
target logits are almost equal the argmax may flip. A divergence is accepted only at such a measured
near-tie: the gap between the two largest autoregressive target logits at the first differing token must be
below NEAR_TIE (logit units), and there may be at most one divergence per comparison (the texts differ after
it, so the comparison stops there).
"""

import numpy as np
import pytest

from helpers import PROMPTS, chat_ids, settings
from inference.engine import Engine

NEAR_TIE = 0.1
NEW_TOKENS = 128
ROLLING = {"n_ctx": 32, "n_keep": 4}  # each roll drops 14 tokens: prompts of 40-70 tokens + replies roll >= 3 times


def _top_two_gap(engine: Engine, ids, first_difference: int, context: dict) -> float:
    engine.reset()
    engine.generate_text(ids, settings("ar", max_new_tokens=first_difference + 1, **context))
    top = np.sort(engine.last_logits)[-2:]
    return float(top[1] - top[0])


def _assert_same_or_near_tie(engine, ids, reference, candidate, context, label):
    ar, spec = reference.token_ids, candidate.token_ids
    if ar == spec:
        return
    first = next((i for i, (a, b) in enumerate(zip(ar, spec)) if a != b), min(len(ar), len(spec)))
    assert first < min(len(ar), len(spec)), f"{label}: one output is a prefix of the other ({len(ar)} vs {len(spec)})"
    gap = _top_two_gap(engine, ids, first, context)
    assert gap < NEAR_TIE, f"{label}: diverged at token {first} where the target's top-2 logit gap is {gap:.4f}"


@pytest.fixture(scope="module")
def engine(target, draft):
    return Engine(target, draft)


@pytest.mark.slow
@pytest.mark.parametrize("context", [{}, ROLLING], ids=["no-roll", "rolling"])
@pytest.mark.parametrize("prompt", range(len(PROMPTS)))
def test_greedy_speculative_equals_autoregressive(engine, target, prompt, context):
    ids = chat_ids(target, PROMPTS[prompt])
    engine.reset()
    reference = engine.generate_text(ids, settings("ar", max_new_tokens=NEW_TOKENS, **context))
    if context:
        assert reference.rolls >= 3, reference.rolls
    for drafter in ("model", "lookup"):
        for k in (1, 3, 8):
            engine.reset()
            candidate = engine.generate_text(ids, settings("spec", max_new_tokens=NEW_TOKENS, k=k, **context), drafter=drafter)
            if context and candidate.token_ids == reference.token_ids:
                assert candidate.rolls == reference.rolls
                assert candidate.discarded_tokens == reference.discarded_tokens
            _assert_same_or_near_tie(engine, ids, reference, candidate, context, f"{drafter} K={k}")
