"""The speculative accept/resample step reproduces the target distribution (chi-square), warping is exact."""

import numpy as np
import pytest
from scipy.stats import chisquare

from inference.sampling import accept_greedy, accept_sampled, next_token, warp
from inference.settings import SamplingSettings

VOCAB = 8
TRIALS = 40_000


def _synthetic_logits(seed: int, rows: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.5, size=(rows, VOCAB)).astype(np.float32)


def _first_token_counts(target_probs, draft_probs, k, rng, deterministic_draft=None):
    counts = np.zeros(VOCAB)
    for _ in range(TRIALS):
        if deterministic_draft is None:
            drafts = [int(rng.choice(VOCAB, p=draft_probs[i])) for i in range(k)]
            accepted, token = accept_sampled(target_probs, draft_probs, drafts, rng)
        else:
            drafts = deterministic_draft
            accepted, token = accept_sampled(target_probs, None, drafts, rng)
        counts[drafts[0] if accepted > 0 else token] += 1
    return counts


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 0.8, 5)])
@pytest.mark.parametrize("k", [1, 3])
def test_speculative_sampling_matches_target_distribution(temperature, top_p, top_k, k):
    settings = SamplingSettings(temperature=temperature, top_p=top_p, top_k=top_k)
    target = warp(_synthetic_logits(1, k + 1), settings)
    draft = warp(_synthetic_logits(2, k), settings)
    counts = _first_token_counts(target, draft, k, np.random.default_rng(7))
    support = target[0] > 0
    assert counts[~support].sum() == 0, "a token cut by top-k/top-p was emitted"
    result = chisquare(counts[support], TRIALS * target[0][support])
    assert result.pvalue > 1e-3, (counts, TRIALS * target[0])


@pytest.mark.parametrize("draft_token", [0, 3])
def test_deterministic_draft_prompt_lookup_is_lossless(draft_token):
    settings = SamplingSettings(temperature=0.8, top_p=0.95)
    target = warp(_synthetic_logits(3, 3), settings)
    counts = _first_token_counts(target, None, 2, np.random.default_rng(11), deterministic_draft=[draft_token, 1])
    support = target[0] > 0
    result = chisquare(counts[support], TRIALS * target[0][support])
    assert result.pvalue > 1e-3


def test_a_draft_identical_to_the_target_is_always_accepted():
    settings = SamplingSettings(temperature=1.0)
    probs = warp(_synthetic_logits(4, 4), settings)
    rng = np.random.default_rng(0)
    for _ in range(200):
        drafts = [int(rng.choice(VOCAB, p=probs[i])) for i in range(3)]
        accepted, _ = accept_sampled(probs, probs[:3], drafts, rng)
        assert accepted == 3


def test_warp_top_k_and_top_p_keep_exact_sets():
    logits = np.log(np.array([0.4, 0.3, 0.15, 0.1, 0.05], dtype=np.float32))
    top_p = warp(logits, SamplingSettings(temperature=1.0, top_p=0.8))
    np.testing.assert_allclose(top_p, [0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0], rtol=1e-6)
    top_k = warp(logits, SamplingSettings(temperature=1.0, top_k=2))
    np.testing.assert_allclose(top_k, [0.4 / 0.7, 0.3 / 0.7, 0, 0, 0], rtol=1e-6)
    hot = warp(logits, SamplingSettings(temperature=0.5))
    np.testing.assert_allclose(hot, np.array([0.4, 0.3, 0.15, 0.1, 0.05]) ** 2 / np.sum(np.array([0.4, 0.3, 0.15, 0.1, 0.05]) ** 2), rtol=1e-6)


def test_nucleus_beyond_the_first_sorted_head_is_exact():
    rng = np.random.default_rng(5)
    logits = rng.normal(0, 0.01, size=5000).astype(np.float32)  # almost flat: the nucleus spans thousands
    probs = warp(logits, SamplingSettings(temperature=1.0, top_p=0.9))
    full = np.exp(logits - logits.max()).astype(np.float64)
    full /= full.sum()
    order = np.argsort(-full, kind="stable")
    n = int(np.searchsorted(np.cumsum(full[order]), 0.9)) + 1
    assert np.count_nonzero(probs) == n
    assert set(np.flatnonzero(probs)) == set(order[:n])


def test_greedy_acceptance_and_seeded_sampling():
    logits = np.array([[0, 5, 1], [4, 0, 0], [0, 0, 9]], dtype=np.float32)
    assert accept_greedy(logits, [1, 0]) == (2, 2)
    assert accept_greedy(logits, [1, 2]) == (1, 0)
    assert accept_greedy(logits, [0, 0]) == (0, 1)
    settings = SamplingSettings(temperature=1.0, seed=3)
    draws = [next_token(logits[0], settings, np.random.default_rng(3)) for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
