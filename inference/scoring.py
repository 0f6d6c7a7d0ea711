"""Scoring text with the target model: each token's log-probability given the ones before it, under the rolling
context (perplexity, the StreamingLLM experiment, an OpenAI completion's ``echo`` with ``logprobs``).

It borrows the engine's target KV cache (``Engine.emptied_cache``), so the engine's caches are empty before and
after; it decodes nothing.
"""

from __future__ import annotations

import threading
from typing import Iterator, Sequence

import numpy as np

from .engine import Engine
from .events import TokenLogprob
from .model import check_can_roll, check_window
from .sampling import most_likely
from .settings import ContextSettings
from .vocabulary import vocabulary

# Most tokens per scoring pass (``score`` needs the logits of every position: [chunk, vocab] float32).
SCORE_CHUNK = 512


def score(engine: Engine, token_ids: Sequence[int], context: ContextSettings, chunk: int = SCORE_CHUNK) -> np.ndarray:
    """Log-probability of each token given the ones before it, under the rolling-context policy.

    Tokens are fed in chunks; the cache rolls exactly where autoregressive decoding would (when it holds n_ctx
    tokens), so every token sees the same context as it would in a chat. Used for perplexity and the StreamingLLM
    experiment (Xiao et al., arXiv 2309.17453, section 4.1). The engine's KV caches are reset before and after.

    Args:
        engine: whose target model scores.
        token_ids: the text's ids, length N >= 2.
        context: n_ctx / n_keep / n_discard (``"auto"`` keeps the minimum, there being no system prompt).
        chunk: most tokens per forward pass.

    Returns:
        float64 ``[N - 1]``: ``log p(token[i + 1] | tokens[.. i])`` in nats.

    Raises:
        ValueError: fewer than 2 tokens, or an invalid context setting.
    """
    if len(token_ids) < 2:
        raise ValueError("scoring needs at least 2 tokens")
    tokens = list(map(int, token_ids))
    scores = np.empty(len(tokens) - 1)
    for done, log_probs in _scored_passes(engine, tokens, context, chunk):
        targets = tokens[done + 1 : done + 1 + len(log_probs)]
        scores[done : done + len(log_probs)] = log_probs[np.arange(len(log_probs)), targets]
    return scores


def prompt_logprobs(
    engine: Engine,
    token_ids: Sequence[int],
    context: ContextSettings,
    top: int,
    chunk: int = SCORE_CHUNK,
    cancel: threading.Event | None = None,
) -> list[tuple[TokenLogprob, tuple[TokenLogprob, ...]]]:
    """Each token's log-probability given the ones before it, and the ``top`` most likely tokens there (an OpenAI
    completion's ``echo`` with ``logprobs``): the model's own distribution, without penalties or temperature, under
    the rolling context as ``score`` computes it. The engine's KV caches are reset before and after.

    Args:
        engine: whose target model scores.
        token_ids: the prompt's ids; context: as for ``score``; top: alternatives per token (0-20).
        cancel: set it from any thread to stop; checked before each pass of at most ``chunk`` tokens.

    Returns:
        For tokens 1 .. N-1 (none for a one-token prompt): ``(the token's TokenLogprob, its alternatives, most
        likely first)``; when cancelled, those of the passes done.

    Raises:
        ValueError: an invalid context setting; VocabularyError: an unknown detokenizer.
    """
    tokens = list(map(int, token_ids))
    pieces = vocabulary(engine.target).pieces
    out = []
    for done, log_probs in _scored_passes(engine, tokens, context, chunk):
        if cancel is not None and cancel.is_set():
            break
        for row, token in zip(log_probs, tokens[done + 1 : done + 1 + len(log_probs)]):
            alternatives = tuple(TokenLogprob(int(i), pieces[i], float(row[i])) for i in most_likely(row, top))
            out.append((TokenLogprob(token, pieces[token], float(row[token])), alternatives))
    return out


def _scored_passes(
    engine: Engine, tokens: list[int], context: ContextSettings, chunk: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Feed ``tokens`` but the last in passes of at most ``chunk``, rolling as autoregressive decoding would;
    yields ``(start, log_probs)``: float64 ``[n, vocab]`` log-softmax rows scoring tokens ``start + 1 ..``."""
    context.validate(engine.target.max_position_embeddings)
    check_window(context.n_ctx, [engine.target])
    n_keep, n_discard = context.resolve()
    with engine.emptied_cache() as cache:
        done = 0
        while done < len(tokens) - 1:
            if len(cache) >= context.n_ctx:
                check_can_roll([engine.target])
                cache.roll(n_keep, n_discard)
            part = tokens[done : done + min(chunk, context.n_ctx - len(cache), len(tokens) - 1 - done)]
            logits = cache.forward(part, context.n_ctx).astype(np.float64)
            peak = logits.max(axis=-1, keepdims=True)
            yield done, logits - (peak + np.log(np.exp(logits - peak).sum(axis=-1, keepdims=True)))
            done += len(part)
