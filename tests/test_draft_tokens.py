"""``drafting.draft_tokens`` over a pruned draft vocabulary: warped over that vocabulary only, it drafts what the
whole row's warp drafts, from the same distributions."""

import numpy as np
import pytest

from inference.drafting import draft_tokens
from inference.penalties import ReplyPenalties
from inference.settings import SamplingSettings

VOCAB_SIZE = 4096
DRAFT_VOCAB = 512


def _rows(seed: int, vocab: np.ndarray, k: int) -> list[np.ndarray]:
    """k float32 ``[VOCAB_SIZE]`` rows, -inf outside ``vocab``, peaked like a model's (a few likely tokens)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(k):
        row = np.full(VOCAB_SIZE, -np.inf, dtype=np.float32)
        row[vocab] = rng.standard_t(2, vocab.shape[0]).astype(np.float32) * 2.5
        rows.append(row)
    return rows


def _draft(rows: list[np.ndarray], settings: SamplingSettings, seed: int, vocab: np.ndarray | None):
    following = iter(rows[1:])
    penalties = ReplyPenalties(settings, prompt_ids=[0, 1, 2], reply=[3])
    return draft_tokens(rows[0], lambda _token: next(following), len(rows), settings, np.random.default_rng(seed),
                        penalties, vocab)


@pytest.mark.parametrize(
    "settings",
    [
        SamplingSettings(temperature=0.7, top_p=0.9),
        SamplingSettings(temperature=1.0, top_k=40),
        SamplingSettings(temperature=0.5, min_p=0.05, repetition_penalty=1.3),
    ],
    ids=["chat-defaults", "top-k", "min-p-and-penalty"],
)
def test_a_pruned_vocabulary_drafts_what_the_whole_row_drafts(settings):
    vocab = np.sort(np.random.default_rng(7).choice(VOCAB_SIZE, DRAFT_VOCAB, replace=False)).astype(np.int64)
    for seed in range(200):
        rows = _rows(seed, vocab, k=3)
        tokens, probs = _draft(rows, settings, seed, vocab)
        whole_tokens, whole_probs = _draft(rows, settings, seed, None)
        assert tokens == whole_tokens
        assert probs.shape == (3, VOCAB_SIZE) and probs.dtype == np.float64
        np.testing.assert_allclose(probs, whole_probs, rtol=1e-12, atol=1e-15)
        outside = np.setdiff1d(np.arange(VOCAB_SIZE), vocab)
        assert not probs[:, outside].any()
        assert all(set(np.flatnonzero(row)) <= set(vocab.tolist()) for row in probs)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)


def test_a_vocabulary_out_of_order_draws_other_tokens_for_the_same_uniforms():
    """Why ``HeadDrafter`` passes its vocabulary ascending: the head's manifest lists it most frequent first, and
    over that order the inverse CDF maps a uniform to another token (the draws keep their distribution, not the
    whole row's tokens)."""
    settings = SamplingSettings(temperature=8.0)  # flat: no token takes most of the mass
    vocab = np.random.default_rng(7).choice(VOCAB_SIZE, DRAFT_VOCAB, replace=False).astype(np.int64)
    differing = 0
    for seed in range(50):
        rows = _rows(seed, np.sort(vocab), k=1)
        tokens, probs = _draft(rows, settings, seed, vocab)
        whole_tokens, whole_probs = _draft(rows, settings, seed, None)
        np.testing.assert_allclose(probs, whole_probs, rtol=1e-12, atol=1e-15)
        differing += tokens != whole_tokens
    assert differing >= 20  # 28 of these 50 seeds; the whole-row order draws them all alike
