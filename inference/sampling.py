"""Turning logits into tokens: temperature/top-k/top-p/min-p warping, sampling, and the speculative accept step.

The accept/resample rule is Algorithm 1 of Leviathan et al. (arXiv 2211.17192, section 2.3) / Algorithm 2 of
Chen et al. (arXiv 2302.01318): draft token x with draft probability q(x) is accepted with probability
min(1, p(x) / q(x)), p being the target's probability; on the first rejection the replacement is sampled
from normalize(max(0, p - q)); if all K drafts are accepted a bonus token is sampled from the target's next
distribution. Both p and q are the *warped* distributions (temperature, top-k, top-p, min-p applied), so the output
is distributed exactly as plain sampling from the warped target.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .settings import SamplingSettings


def warp(logits: np.ndarray, settings: SamplingSettings) -> np.ndarray:
    """Probability distributions after temperature, top-k, top-p and min-p (in that order, as transformers' and
    vLLM's warpers apply them).

    The float64 result is the only array of the vocabulary's size it allocates (each row is warped in place): one of
    49k float64 is above the C heap's ``heap.LARGE_BLOCK``, so each such array is a fresh mapping whose ~100 pages
    fault in when first written (~0.2 ms). Written with temporaries, a row cost 0.84 ms, 0.29 without them (default
    model's vocabulary, temperature 0.7, top-p 0.9, Xeon with AMX, quiet; 10% of a decode step at the chat defaults).

    Args:
        logits: float32 ``[n, vocab]`` (or ``[vocab]``), raw model outputs.
        settings: sampling settings; ``temperature`` must be > 0.

    Returns:
        float64 array of the same shape; each row sums to 1, tokens cut by top-k/top-p/min-p have probability 0.
    """
    rows = np.atleast_2d(logits)
    probs = rows.astype(np.float64)
    probs /= settings.temperature
    for row, source in zip(probs, rows):
        _warp_row(row, source, settings.top_k, settings.top_p, settings.min_p)
    return probs[0] if logits.ndim == 1 else probs


def _warp_row(row: np.ndarray, logits: np.ndarray, top_k: int, top_p: float, min_p: float) -> None:
    """Turn ``row`` (float64 ``[vocab]``, ``logits`` over the temperature) into its warped distribution, in place."""
    vocab = row.shape[0]
    keep = vocab if top_k <= 0 else min(top_k, vocab)
    if keep < vocab:
        # the cutoff is found among the float32 logits (dividing by the temperature keeps distinct float32 values
        # distinct and in order, so the same tokens are kept), and among the allowed tokens only: a grammar's or a
        # draft vocabulary's mask leaves most of the row -inf, on which np.partition is ~10x slower (12 ms against
        # 1.2 ms on 49k tokens, Zen 5)
        allowed = logits[logits > -np.inf]
        if keep < allowed.shape[0]:
            cutoff = np.partition(allowed, allowed.shape[0] - keep)[allowed.shape[0] - keep]
            row[logits < cutoff] = -np.inf
    np.subtract(row, row.max(), out=row)
    np.exp(row, out=row)
    row /= row.sum()
    if top_p < 1.0:
        _nucleus(row, top_p)
    if min_p > 0.0:
        row[row < min_p * row.max()] = 0.0
        row /= row.sum()


#: ``_nucleus`` first sorts the tokens at least this fraction as likely as the most likely one, then a thousand
#: times less likely, and so on, until those sorted hold ``top_p`` of the mass.
NUCLEUS_FIRST_FRACTION = 1e-3


def _nucleus(probs: np.ndarray, top_p: float) -> None:
    """Cut ``probs`` (float64 ``[vocab]``, summing to 1) to its smallest top set with mass >= top_p and renormalize,
    in place (Holtzman et al., arXiv 1904.09751, section 3.1).

    Sorts only the tokens at least ``NUCLEUS_FIRST_FRACTION`` as likely as the most likely one (lowering the bar a
    thousandfold until they hold ``top_p`` of the mass): exact, since every token left unsorted is less likely than
    every sorted one, so the nucleus, a prefix of the descending order, lies among those sorted; and cheaper than
    sorting or partitioning a 50k-token vocabulary (on the default model's replies at temperature 0.7 the nucleus
    of top-p 0.9 held 1-52 tokens).
    """
    peak = probs.max()
    bar = peak * NUCLEUS_FIRST_FRACTION
    while True:
        candidates = np.flatnonzero(probs >= bar) if bar > 0 else np.arange(probs.shape[0])
        order = candidates[np.argsort(-probs[candidates], kind="stable")]
        cumulative = np.cumsum(probs[order])
        if cumulative[-1] >= top_p or bar == 0:
            kept = order[: int(np.searchsorted(cumulative, top_p)) + 1]
            values = probs[kept]
            probs.fill(0.0)
            probs[kept] = values
            probs /= probs.sum()
            return
        bar = bar * NUCLEUS_FIRST_FRACTION if bar > peak * 1e-12 else 0.0


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a float64 distribution ``[vocab]`` (inverse CDF on one uniform draw).

    The CDF is summed over the tokens of nonzero probability only when top-k, top-p or min-p left fewer than half
    (a 50k-token cumulative sum costs ~0.3 ms on a Xeon): adding zeros changes no partial sum, so the token drawn
    for a given uniform is the same either way.
    """
    support = np.flatnonzero(probs) if np.count_nonzero(probs) < probs.shape[0] // 2 else None
    cdf = np.cumsum(probs if support is None else probs[support])
    index = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), cdf.shape[0] - 1)
    return index if support is None else int(support[index])


def next_token(logits: np.ndarray, settings: SamplingSettings, rng: np.random.Generator) -> int:
    """Choose the next token from float32 logits ``[vocab]``: argmax when greedy, else a warped sample."""
    return next_token_with_probability(logits, settings, rng)[0]


def next_token_with_probability(
    logits: np.ndarray, settings: SamplingSettings, rng: np.random.Generator
) -> tuple[int, float]:
    """``next_token`` and the probability p(token) of the warped distribution it was drawn from (1.0 when greedy:
    the argmax is certain). The same token for the same ``rng`` state as ``next_token``."""
    if settings.greedy:
        return int(np.argmax(logits)), 1.0
    probs = warp(logits, settings)
    token = sample(probs, rng)
    return token, float(probs[token])


def first_draft_acceptance(
    draft_logits: np.ndarray,
    vocab: np.ndarray,
    tokens: Sequence[int],
    target_probabilities: Sequence[float],
    settings: SamplingSettings,
) -> np.ndarray:
    """How likely a first draft would have been accepted at positions where the target chose a token without one.

    A draft x ~ q is accepted with probability beta = sum_x min(p(x), q(x)) (Leviathan et al., arXiv 2211.17192,
    section 3.1, Definition 3.1's alpha per position). Where the target drew y ~ p instead, min(1, q(y) / p(y)) is an
    unbiased estimate of it: E_{y~p}[min(1, q(y) / p(y))] = sum_y min(p(y), q(y)). Greedy: p and q are the one-hot
    argmaxes, and the estimate is whether the drafter's argmax is y (exactly what verification would decide).
    Penalties are not applied to q here (the drafts of a reply with a repetition penalty are drawn from penalized
    rows): an estimate for choosing, never an input of verification.

    Args:
        draft_logits: float32 ``[m, len(vocab)]``, the drafter's logits over its vocabulary at m positions.
        vocab: int ``[len(vocab)]``, the target's token id of each of its entries (a draft head's pruned vocabulary).
        tokens: the m tokens the target chose there.
        target_probabilities: the m probabilities p(y) the target's warped distributions gave them (> 0).
        settings: the reply's sampling settings; warping over ``vocab`` alone is warping the whole row with -inf
            outside it (top-k, top-p and min-p see the same probabilities).

    Returns:
        float64 ``[m]`` estimates in [0, 1].
    """
    rows = np.atleast_2d(draft_logits)
    tokens = np.asarray(tokens, dtype=np.int64)
    if settings.greedy:
        return (vocab[np.argmax(rows, axis=1)] == tokens).astype(np.float64)
    matches = vocab[np.newaxis, :] == tokens[:, np.newaxis]  # [m, len(vocab)]: where each token is, if anywhere
    q = warp(rows, settings)[np.arange(len(tokens)), matches.argmax(axis=1)] * matches.any(axis=1)
    return np.minimum(1.0, q / np.asarray(target_probabilities, dtype=np.float64))


def logprobs(
    logits: np.ndarray, tokens: Sequence[int], settings: SamplingSettings, top: int
) -> list[tuple[float, tuple[tuple[int, float], ...]]]:
    """Log-probabilities of chosen tokens, as the OpenAI API reports them: log-softmax of the logits divided by the
    temperature (1 when greedy), before top-k, top-p and min-p cut the distribution.

    Args:
        logits: float32 ``[n, vocab]``, the (penalized, grammar-masked) logits each token was chosen from.
        tokens: the n chosen token ids.
        settings: the reply's sampling settings (its temperature).
        top: how many most likely alternatives to list per token (0..20).

    Returns:
        Per token: ``(logprob, ((token_id, logprob), ...))``, alternatives most likely first, ties by token id.
    """
    temperature = settings.temperature if settings.temperature > 0 else 1.0
    out = []
    for row, token in zip(np.atleast_2d(logits), tokens):
        scaled = row.astype(np.float64) / temperature
        peak = scaled.max()
        log_probs = scaled - (peak + np.log(np.exp(scaled - peak).sum()))
        alternatives = tuple((int(i), float(log_probs[i])) for i in most_likely(log_probs, top))
        out.append((float(log_probs[int(token)]), alternatives))
    return out


def most_likely(scores: np.ndarray, top: int) -> np.ndarray:
    """The ids of the ``top`` highest of ``scores`` (``[vocab]``), highest first, ties by lower id; int64 ``[top]``."""
    if top <= 0:
        return np.zeros(0, dtype=np.int64)
    head = np.argpartition(-scores, top - 1)[:top]
    return head[np.lexsort((head, -scores[head]))]


def accept_greedy(target_logits: np.ndarray, draft_tokens: Sequence[int]) -> tuple[int, int]:
    """Greedy verification: accept drafts while they equal the target's argmax.

    Args:
        target_logits: float32 ``[k + 1, vocab]``; row i scores the token after draft i-1.
        draft_tokens: the k proposed token ids.

    Returns:
        ``(n_accepted, next_token)``: next_token is the target's argmax after the accepted prefix (the
        correction on a mismatch, the bonus token when all k match).
    """
    argmax = np.argmax(target_logits, axis=-1)
    for i, token in enumerate(draft_tokens):
        if int(argmax[i]) != int(token):
            return i, int(argmax[i])
    return len(draft_tokens), int(argmax[len(draft_tokens)])


def accept_sampled(
    target_probs: np.ndarray,
    draft_probs: np.ndarray | None,
    draft_tokens: Sequence[int],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Speculative sampling acceptance (Leviathan et al. Algorithm 1; Chen et al. Algorithm 2).

    Args:
        target_probs: float64 ``[k + 1, vocab]``, warped target distributions p (or any object whose item i is
            row i: ``accept_drafts`` warps each row when first read).
        draft_probs: float64 ``[k, vocab]``, warped draft distributions q the drafts were sampled from, or
            None for a deterministic drafter (prompt lookup), i.e. q = one-hot of the draft token.
        draft_tokens: the k proposed token ids.
        rng: random generator (one uniform per tested draft, one per resample).

    Returns:
        ``(n_accepted, next_token)`` where next_token is drawn from normalize(max(0, p - q)) at the first
        rejection, or from p at position k when all drafts are accepted.
    """
    for i, token in enumerate(draft_tokens):
        p = target_probs[i]
        q_token = 1.0 if draft_probs is None else draft_probs[i, token]
        if q_token > 0 and rng.random() * q_token < p[token]:
            continue
        if draft_probs is None:
            residual = p.copy()
            residual[token] = 0.0
        else:
            residual = np.subtract(p, draft_probs[i])
            np.maximum(residual, 0.0, out=residual)
        total = residual.sum()
        if total <= 0:
            return i, sample(p, rng)
        residual /= total
        return i, sample(residual, rng)
    return len(draft_tokens), sample(target_probs[len(draft_tokens)], rng)


def accept_drafts(
    target_logits: np.ndarray,
    draft_tokens: Sequence[int],
    draft_probs: np.ndarray | None,
    settings: SamplingSettings,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """One verification: how many drafts the target accepts, and the token it chooses after them.

    Without drafts this is a plain decode step (``next_token``); greedy settings use ``accept_greedy``, others
    ``accept_sampled`` on the warped target distributions.

    Args:
        target_logits: float32 ``[len(draft_tokens) + 1, vocab]``, the target pass over the pending token and the
            drafts; row i scores the token after draft i-1.
        draft_tokens: the proposed ids (possibly none).
        draft_probs: float64 ``[len(draft_tokens), vocab]`` draft distributions the drafts were sampled from, or
            None for deterministic drafts (greedy drafting, prompt lookup).
        settings: the reply's sampling settings.
        rng: random generator shared with the drafter.

    Returns:
        ``(n_accepted, next_token)`` as ``accept_greedy`` / ``accept_sampled`` define them.
    """
    if not draft_tokens:
        return 0, next_token(target_logits[-1], settings, rng)
    if settings.greedy:
        return accept_greedy(target_logits, draft_tokens)
    return accept_sampled(_WarpedRows(target_logits, settings), draft_probs, draft_tokens, rng)


class _WarpedRows:
    """``warp`` of each row of ``logits`` (float32 ``[n, vocab]``), computed when first read: a verification that
    rejects draft i never reads the rows after it (at K = 1 and acceptance ~0.45, half the steps)."""

    def __init__(self, logits: np.ndarray, settings: SamplingSettings) -> None:
        self._logits, self._settings, self._rows = logits, settings, {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self._rows:
            self._rows[i] = warp(self._logits[i], self._settings)
        return self._rows[i]
