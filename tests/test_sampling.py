"""The speculative accept/resample step reproduces the target distribution (chi-square), warping and the
repetition/presence/frequency penalties are exact."""

import numpy as np
import pytest
from scipy.stats import chisquare

from inference.penalties import ReplyPenalties, penalize
from inference.sampling import (
    accept_greedy,
    accept_sampled,
    first_draft_acceptance,
    logprobs,
    next_token,
    next_token_with_probability,
    warp,
)
from inference.settings import SamplingSettings, SettingError

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


def _per_position_counts(target_probs, draft_probs, rng, accept=accept_sampled, trials=TRIALS):
    """Counts of the token each step emits at every position (accepted drafts, then the resampled or bonus token),
    ``[k + 1, VOCAB]``: with rows independent of the tokens before them, position i of an emitted sequence that
    reaches i is distributed as ``target_probs[i]`` (the single-step argument of Leviathan et al., Theorem 1,
    applies at i given that every earlier draft was accepted)."""
    k = draft_probs.shape[0]
    counts = np.zeros((k + 1, VOCAB))
    for _ in range(trials):
        drafts = [int(rng.choice(VOCAB, p=draft_probs[i])) for i in range(k)]
        accepted, token = accept(target_probs, draft_probs, drafts, rng)
        for position, emitted in enumerate(drafts[:accepted] + [token]):
            counts[position, emitted] += 1
    return counts


def _per_position_pvalues(counts, target_probs):
    pvalues = []
    for position in range(counts.shape[0]):
        total = counts[position].sum()
        support = target_probs[position] > 0
        assert counts[position, ~support].sum() == 0, f"position {position} emitted a token the target cannot"
        pvalues.append(chisquare(counts[position, support], total * target_probs[position, support]).pvalue)
    return pvalues


def _pruned_draft(target_logits: np.ndarray, seed: int, settings: SamplingSettings, kept: int) -> np.ndarray:
    """Draft distributions near the target's (its logits plus noise) and 0 outside the first ``kept`` tokens, as a
    draft head's are outside its vocabulary."""
    logits = target_logits + np.random.default_rng(seed).normal(0.0, 0.6, size=target_logits.shape).astype(np.float32)
    logits[:, kept:] = -np.inf
    return warp(logits, settings)


@pytest.mark.parametrize("kept", [VOCAB, 5])
def test_speculative_sampling_is_exact_at_every_position_resample_and_bonus_included(kept):
    """Every position of a step, not only the first: accepted drafts at i > 0, the resampled token after a rejection
    at i > 0, and the bonus token after k acceptances all follow the target (drafts that differ from it; ``kept=5``:
    a draft with probability 0 on some tokens, as the draft head's pruned vocabulary has)."""
    settings = SamplingSettings(temperature=0.9, top_p=0.95)
    k = 3
    target_logits = _synthetic_logits(21, k + 1)
    target = warp(target_logits, settings)
    draft = _pruned_draft(target_logits[:k], 22, settings, kept)
    counts = _per_position_counts(target, draft, np.random.default_rng(23))
    assert counts[k].sum() >= 2000, "too few steps reached the bonus token to test it"
    assert counts[1:k].sum() > 0 and counts[1:].sum() < k * TRIALS, "rejections must happen at positions > 0 too"
    pvalues = _per_position_pvalues(counts, target)
    assert min(pvalues) > 1e-3, pvalues


def test_the_per_position_test_catches_an_acceptance_that_reads_the_wrong_draft_row():
    """Negative control: accepting every position against draft row 0 (a plausible indexing bug) passes the
    first-token test but fails at a later position."""
    settings = SamplingSettings(temperature=0.9, top_p=0.95)
    k = 3
    target_logits = _synthetic_logits(21, k + 1)
    target = warp(target_logits, settings)
    draft = _pruned_draft(target_logits[:k], 22, settings, VOCAB)

    def row_zero_bug(target_probs, draft_probs, drafts, rng):
        return accept_sampled(target_probs, np.repeat(draft_probs[:1], len(drafts), axis=0), drafts, rng)

    counts = _per_position_counts(target, draft, np.random.default_rng(23), accept=row_zero_bug)
    pvalues = _per_position_pvalues(counts, target)
    assert pvalues[0] > 1e-3, "position 0 is right even with the bug"
    assert min(pvalues[1:]) < 1e-6, pvalues


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


def test_warp_top_k_on_a_masked_row_keeps_the_best_allowed_tokens():
    """Top-k is taken among the tokens a mask (a grammar's, a draft vocabulary's) leaves finite: the k best of them,
    ties at the cutoff kept, or all of them when fewer than k are allowed."""
    logits = np.full(1000, -np.inf, dtype=np.float32)
    logits[[7, 300, 512, 999]] = [1.0, 3.0, 2.0, 2.0]
    best = warp(logits, SamplingSettings(temperature=1.0, top_k=2))
    assert set(np.flatnonzero(best)) == {300, 512, 999}  # 3.0, then the tie at 2.0 kept whole
    few = warp(logits, SamplingSettings(temperature=1.0, top_k=6))
    expected = np.exp(np.array([1.0, 3.0, 2.0, 2.0]) - 3.0)
    np.testing.assert_allclose(few[[7, 300, 512, 999]], expected / expected.sum(), rtol=1e-6)
    assert np.count_nonzero(few) == 4


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


def test_nucleus_reaching_into_a_long_tail_of_unlikely_tokens_is_exact():
    """A peak holding half the mass over 49k tokens each far below a thousandth of it: the nucleus must lower its
    bar (``NUCLEUS_FIRST_FRACTION``) and still keep exactly the most likely tokens that reach top-p."""
    rng = np.random.default_rng(6)
    logits = rng.normal(0, 0.5, size=49152).astype(np.float32)
    logits[123] = np.log(np.exp(logits.astype(np.float64)).sum())  # the peak is as likely as all the rest together
    probs = warp(logits, SamplingSettings(temperature=1.0, top_p=0.9))
    full = np.exp(logits.astype(np.float64) - logits.max())
    full /= full.sum()
    assert 0.45 < full[123] < 0.55 and full[full < full[123]].max() < 1e-3 * full[123]
    order = np.argsort(-full, kind="stable")
    n = int(np.searchsorted(np.cumsum(full[order]), 0.9)) + 1
    assert n > 10_000 and set(np.flatnonzero(probs)) == set(order[:n])
    np.testing.assert_allclose(probs[order[:n]], full[order[:n]] / full[order[:n]].sum(), rtol=1e-12)


def test_warp_allocates_only_its_result():
    """Each row is warped in place: an array of the vocabulary's size in float64 is a fresh mapping of the C heap
    whose pages fault in when written (``heap.LARGE_BLOCK``), and the temporaries of an out-of-place warp cost 0.5 ms
    a row. Peak traced memory of a warp with top-p and min-p stays within its result and a boolean mask (top-k adds
    two float32 copies of the row for its partition, below ``heap.LARGE_BLOCK``)."""
    import tracemalloc

    rng = np.random.default_rng(7)
    logits = (rng.normal(0, 3, size=49152)).astype(np.float32)
    settings = SamplingSettings(temperature=0.7, top_p=0.9, min_p=0.01)
    warp(logits, settings)
    tracemalloc.start()
    try:
        probs = warp(logits, settings)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert probs.nbytes == 49152 * 8
    assert peak < probs.nbytes * 1.25, f"peak {peak} bytes for a {probs.nbytes}-byte result"


def test_next_token_with_probability_draws_next_token_s_token_with_its_warped_probability():
    logits = np.random.default_rng(3).standard_normal(500).astype(np.float32) * 3
    sampled = SamplingSettings(temperature=0.7, top_p=0.9)
    for seed in range(5):
        token, probability = next_token_with_probability(logits, sampled, np.random.default_rng(seed))
        assert token == next_token(logits, sampled, np.random.default_rng(seed))
        assert probability == warp(logits, sampled)[token] > 0
    assert next_token_with_probability(logits, SamplingSettings(temperature=0.0), None) == (int(np.argmax(logits)), 1.0)


@pytest.mark.parametrize("temperature, top_p", [(0.7, 0.9), (1.0, 1.0)])
def test_a_first_draft_s_acceptance_estimated_from_the_target_s_tokens_is_unbiased(temperature, top_p):
    """E_{y~p}[min(1, q(y) / p(y))] = sum min(p, q), the rate at which a draft x ~ q is accepted (Leviathan et al.,
    arXiv 2211.17192, section 3.1): the mean of 40,000 estimates is within 4 standard errors of it."""
    rng = np.random.default_rng(7)
    vocab_size, draws = 60, 40_000
    target_row = rng.standard_normal(vocab_size).astype(np.float32) * 2
    draft_vocab = rng.permutation(vocab_size)[:35]  # a pruned vocabulary, not sorted
    draft_logits = (target_row[draft_vocab] + 0.5 * rng.standard_normal(35)).astype(np.float32)
    sampled = SamplingSettings(temperature=temperature, top_p=top_p)
    p = warp(target_row, sampled)
    full_draft_row = np.full(vocab_size, -np.inf, dtype=np.float32)
    full_draft_row[draft_vocab] = draft_logits
    acceptance = np.minimum(p, warp(full_draft_row, sampled)).sum()
    tokens = rng.choice(vocab_size, size=draws, p=p)
    estimates = first_draft_acceptance(np.repeat(draft_logits[None], draws, axis=0), draft_vocab, tokens, p[tokens],
                                       sampled)
    assert 0.2 < acceptance < 0.9
    assert abs(estimates.mean() - acceptance) < 4 * estimates.std() / np.sqrt(draws), (estimates.mean(), acceptance)
    outside_tokens = np.setdiff1d(np.arange(vocab_size), draft_vocab)
    outside = outside_tokens[np.argmax(p[outside_tokens])]  # a token the target may choose and the drafter never
    assert p[outside] > 0
    assert first_draft_acceptance(draft_logits[None], draft_vocab, [outside], [p[outside]], sampled)[0] == 0.0


def test_a_greedy_first_draft_s_estimate_is_whether_its_argmax_is_the_target_s_token():
    draft_vocab = np.array([5, 2, 9, 7])
    draft_logits = np.array([[0.1, 3.0, 0.2, 0.0], [2.0, 1.0, 0.0, 0.5]], dtype=np.float32)  # argmax 2, then 5
    greedy = SamplingSettings(temperature=0.0)
    assert list(first_draft_acceptance(draft_logits, draft_vocab, [2, 9], [1.0, 1.0], greedy)) == [1.0, 0.0]


def test_greedy_acceptance():
    """(A seed's reproducibility is the engine's: tests/test_engine.py samples whole replies with seeds.)"""
    logits = np.array([[0, 5, 1], [4, 0, 0], [0, 0, 9]], dtype=np.float32)
    assert accept_greedy(logits, [1, 0]) == (2, 2)
    assert accept_greedy(logits, [1, 2]) == (1, 0)
    assert accept_greedy(logits, [0, 0]) == (0, 1)


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_recent_tokens():
    logits = np.array([2.0, -1.0, 0.5, 3.0, -2.0], dtype=np.float32)
    settings = SamplingSettings(repetition_penalty=2.0)
    out = penalize(logits, settings, recent=[0, 1, 1, 4], generated=[])
    np.testing.assert_allclose(out, [1.0, -2.0, 0.5, 3.0, -4.0])  # once per distinct token, however often it occurs
    np.testing.assert_array_equal(logits, [2.0, -1.0, 0.5, 3.0, -2.0])  # the input is not modified


def test_presence_and_frequency_penalties_follow_the_openai_definition():
    logits = np.array([1.0, 1.0, 1.0, 1.0], dtype=np.float32)
    settings = SamplingSettings(presence_penalty=0.5, frequency_penalty=0.25)
    out = penalize(logits, settings, recent=[3, 3], generated=[0, 2, 2, 2])
    # mu[j] - c[j] * frequency - (c[j] > 0) * presence; token 3 is only in the prompt window: not counted
    np.testing.assert_allclose(out, [1.0 - 0.25 - 0.5, 1.0, 1.0 - 0.75 - 0.5, 1.0])


def test_repetition_penalty_is_applied_before_the_subtraction():
    logits = np.array([3.0, -3.0], dtype=np.float32)
    settings = SamplingSettings(repetition_penalty=1.5, presence_penalty=1.0, frequency_penalty=1.0)
    out = penalize(logits, settings, recent=[0, 1], generated=[0, 1, 1])
    np.testing.assert_allclose(out, [3.0 / 1.5 - 1.0 - 1.0, -3.0 * 1.5 - 2.0 - 1.0])


def test_reply_penalties_window_spans_prompt_reply_and_earlier_drafts():
    settings = SamplingSettings(repetition_penalty=2.0, repeat_last_n=4, presence_penalty=1.0)
    reply = [5]
    penalties = ReplyPenalties(settings, prompt_ids=[1, 2, 3, 4], reply=reply)
    logits = np.full(8, 4.0, dtype=np.float32)
    # window: the last 4 of prompt [1, 2, 3, 4] + reply [5]: tokens 2..5; presence counts the reply only (5)
    np.testing.assert_allclose(penalties.apply(logits), [4, 4, 2, 2, 2, 2 - 1, 4, 4])
    reply.append(6)  # the list is followed, not copied
    rows = penalties.rows(np.stack([logits] * 3), drafts=[7, 1])
    np.testing.assert_allclose(rows[0], [4, 4, 4, 2, 2, 1, 1, 4])  # window 3, 4, 5, 6
    np.testing.assert_allclose(rows[1], [4, 4, 4, 4, 2, 1, 1, 1])  # after draft 7: window 4, 5, 6, 7
    np.testing.assert_allclose(rows[2], [4, 1, 4, 4, 4, 1, 1, 1])  # after drafts 7, 1: window 5, 6, 7, 1


def test_without_penalties_logits_pass_through_unchanged():
    logits = np.array([0.3, 0.1], dtype=np.float32)
    penalties = ReplyPenalties(SamplingSettings(), prompt_ids=[0, 1], reply=[1])
    assert penalties.apply(logits) is logits
    rows = logits[None]
    assert penalties.rows(rows, []) is rows


@pytest.mark.parametrize(
    "name,value",
    [("repetition_penalty", 0.0), ("repetition_penalty", 10.5), ("repeat_last_n", 0), ("presence_penalty", -2.5),
     ("frequency_penalty", 2.01)],
)
def test_penalty_settings_out_of_range_name_their_field(name, value):
    with pytest.raises(SettingError) as error:
        SamplingSettings(**{name: value}).validate()
    assert error.value.field == name


def test_speculative_sampling_with_penalised_rows_matches_the_penalised_target():
    """Accept/resample on penalized rows reproduces the penalized target distribution, not the raw one."""
    settings = SamplingSettings(temperature=1.0, repetition_penalty=1.8, presence_penalty=0.7, frequency_penalty=0.4)
    raw = _synthetic_logits(8, 3)
    penalties = ReplyPenalties(settings, prompt_ids=[0, 1], reply=[2, 2, 5])
    target = warp(penalties.rows(raw, [5, 2]), settings)
    draft = warp(penalties.rows(_synthetic_logits(9, 2), [5]), settings)
    counts = _first_token_counts(target, draft, 2, np.random.default_rng(13))
    assert chisquare(counts, TRIALS * target[0]).pvalue > 1e-3
    unpenalized = warp(raw, settings)[0]
    assert chisquare(counts, TRIALS * unpenalized).pvalue < 1e-6  # the penalties matter at this size


def test_min_p_drops_tokens_below_its_share_of_the_most_likely_one_after_temperature():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    probs = warp(logits, SamplingSettings(temperature=1.0, min_p=0.2))  # keeps p >= 0.1
    np.testing.assert_allclose(probs, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], rtol=1e-6)
    hot = warp(logits, SamplingSettings(temperature=2.0, min_p=0.2))  # flatter: 0.05 survives at temperature 2
    assert np.count_nonzero(hot) == 4
    with pytest.raises(SettingError) as error:
        SamplingSettings(min_p=1.5).validate()
    assert error.value.field == "min_p"


def test_logprobs_are_log_softmax_over_the_temperature_with_sorted_alternatives():
    logits = np.array([[2.0, 1.0, 0.0, -np.inf]], dtype=np.float32)
    ((chosen, top),) = logprobs(logits, [1], SamplingSettings(temperature=0.5), 3)
    scaled = np.array([4.0, 2.0, 0.0])
    expected = scaled - np.log(np.exp(scaled).sum())
    assert chosen == pytest.approx(expected[1])
    assert [t for t, _ in top] == [0, 1, 2] and [v for _, v in top] == pytest.approx(expected.tolist())
    ((greedy, none),) = logprobs(logits, [3], SamplingSettings(), 0)  # greedy reads temperature 1
    assert greedy == -np.inf and none == ()
