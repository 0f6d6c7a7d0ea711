"""Drafters: what proposes the K tokens that the target verifies in one pass.

Design rules:

* **One interface.** Every drafter implements ``Drafter`` (``reset``, ``feed``, ``truncate``, ``roll``, ``propose``);
  the engine picks the drafters of a reply from ``GenerationSettings.decoding`` and calls only these methods, so it never
  asks which kind of drafter it holds.
* **The target's cache is the truth.** A drafter is told every change of the target's KV cache that it must
  follow: ``feed`` after a prefill chunk, ``roll`` before the target's roll is applied to it, ``truncate`` when the
  target's cache was cut (a new turn sharing only a prefix; a roll during a reply the drafter did not draft in:
  its positions after n_keep are stale then), ``reset`` when the target's cache was emptied, and ``propose`` receives the target's cached tokens themselves. Rejected drafts are
  never fed: the next ``propose`` shows what the target kept.
* **Draft through the reply's rules.** A drafter that scores the vocabulary passes the logits of draft i through
  ``penalties.apply(logits, drafts_before_i)`` before choosing from them (argmax, or ``warp`` and ``sample``, whose
  distribution it returns): the repetition, presence and frequency penalties and a structured-output grammar
  (-inf on what the grammar forbids) then shape its drafts as they shape the target's row i, and its q is the
  distribution it really sampled from. A full-vocabulary row always keeps a finite logit (the grammar allows EOS at
  worst); a drafter with a pruned vocabulary must stop drafting where none of its tokens is left finite. The engine also cuts every proposal at the first token the grammar
  forbids (``ReplyPenalties.allowed_drafts``), so a drafter that cannot score (prompt lookup) needs nothing.

Drafters:

* ``ModelDrafter``: a small draft model with its own KV cache (Leviathan et al., arXiv 2211.17192, section 3).
* ``HeadDrafter``: a draft head reading the target's own hidden states (EAGLE, Li et al., arXiv 2401.15077), with
  its own one-layer KV cache; its drafts range over a frequent-token vocabulary (``draft_head``).
* ``PromptLookupDrafter``: no model; copies the continuation of the latest earlier occurrence of the last
  n-gram of the conversation (Saxena, "Prompt Lookup Decoding", 2023; llama.cpp's ``lookup`` example).
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from .draft_head import DRAFT_HIDDEN, LoadedHead
from .kv_cache import KVCache
from .model import LoadedModel
from .penalties import ReplyPenalties
from .sampling import sample, warp
from .settings import SamplingSettings


class Drafter(Protocol):
    """What the engine needs from a drafter (one protocol, several classes)."""

    def reset(self) -> None:
        """Forget everything: the target's KV cache was emptied."""

    def feed(self, target_tokens: list[int], n_ctx: int) -> None:
        """Catch up with the target's cached tokens ``target_tokens`` (called after each prefill chunk)."""

    def truncate(self, length: int) -> None:
        """The target's cache was cut to its first ``length`` tokens (a turn that shares only them with the last, or
        a roll this drafter did not follow: then ``length`` is n_keep): forget what was computed after them."""

    def roll(self, n_keep: int, n_discard: int, target_tokens_before: list[int]) -> None:
        """Follow the target's attention-sink roll (StreamingLLM, arXiv 2309.17453, section 3.2).

        Args:
            n_keep: tokens the target keeps at the start.
            n_discard: tokens the target actually dropped after them (``KVCache.roll``'s return value).
            target_tokens_before: the target's cached tokens before its roll.
        """

    def propose(
        self,
        context: list[int],
        k: int,
        n_ctx: int,
        sampling: SamplingSettings,
        rng: np.random.Generator,
        penalties: ReplyPenalties,
    ) -> tuple[list[int], np.ndarray | None]:
        """Draft up to ``k`` tokens after ``context``.

        Args:
            context: the target's cached tokens followed by the pending token (chosen, not yet cached).
            k: most tokens to draft (>= 1).
            n_ctx: rolling-context size (the caller guarantees ``len(context) + k - 1 <= n_ctx``).
            sampling: the reply's sampling settings.
            rng: random generator shared with the acceptance test.
            penalties: the reply's penalties and grammar; draft i is chosen from ``penalties.apply(logits, drafts
                before it)``, as the target's verification row i is; stop where that leaves no finite logit.

        Returns:
            ``(tokens, probs)``: at most k token ids (possibly none), and the float64 ``[len(tokens), vocab]``
            distributions they were sampled from, or None when the drafts are deterministic (greedy, or a lookup:
            ``sampling.accept_sampled`` then treats each draft as certain).
        """


def draft_tokens(
    logits: np.ndarray,
    next_logits: Callable[[int], np.ndarray],
    k: int,
    sampling: SamplingSettings,
    rng: np.random.Generator,
    penalties: ReplyPenalties,
    vocab: np.ndarray | None = None,
) -> tuple[list[int], np.ndarray | None]:
    """The drafting loop of a drafter that scores the vocabulary (the draft model, the draft head): up to ``k``
    drafts, each chosen from its row of logits passed through the reply's penalties and grammar with the drafts
    before it (``Drafter.propose``).

    Greedy sampling drafts the argmax of each penalized row; otherwise each draft is sampled from the warped
    penalized row, and those distributions are returned. A drafter with a pruned vocabulary has its rows warped
    over that vocabulary only (the rest has probability 0 either way): 8,192 of the default model's 49,152 tokens,
    0.13 ms a draft against 0.5-0.7 ms for the whole row (temperature 0.7, top-p 0.9, AMD EPYC Zen 4).

    Args:
        logits: float32 ``[vocab_size]``: the row the first draft is chosen from.
        next_logits: the row after a draft token (one pass of the drafter); called for every draft but the last.
        k: most drafts (>= 1).
        sampling, rng, penalties: as for ``Drafter.propose``.
        vocab: int64 ``[draft_vocab]``, ascending: the token ids the drafter can propose (a draft head's pruned
            vocabulary; -inf elsewhere in its rows), where drafting stops early when the grammar forbids all of
            them; None: the whole vocabulary, of which the grammar always leaves a token (EOS at worst,
            ``GrammarMask.allowed``). Ascending, a draft is the token the whole row's warp would draw with the
            same ``rng`` (``sample`` sums the same nonzero probabilities in the same order).

    Returns:
        ``(tokens, probs)``: at most k token ids, and the float64 ``[len(tokens), vocab_size]`` distributions they
        were sampled from (None when greedy, or when no token was drafted).
    """
    tokens: list[int] = []
    probs: list[np.ndarray] = []
    for i in range(k):
        row = penalties.apply(logits, tokens)
        if vocab is not None and not np.isfinite(row[vocab]).any():  # the grammar forbids every token it can draft
            break
        if sampling.greedy:
            token = int(np.argmax(row))
        elif vocab is None:
            dist = warp(row, sampling)
            token = sample(dist, rng)
            probs.append(dist)
        else:
            in_vocab = warp(row[vocab], sampling)
            token = int(vocab[sample(in_vocab, rng)])
            dist = np.zeros(row.shape[0])
            dist[vocab] = in_vocab
            probs.append(dist)
        tokens.append(token)
        if i + 1 < k:
            logits = next_logits(token)
    if len(probs) == 1:  # a view: a copy of a 49k float64 row is a fresh mapping of the C heap (sampling.warp)
        return tokens, probs[0][np.newaxis]
    return tokens, (np.stack(probs) if probs else None)


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the longest common prefix of two token sequences, given that their first ``start`` items agree."""
    common = min(start, len(a), len(b))
    limit = min(len(a), len(b))
    while common < limit and a[common] == b[common]:
        common += 1
    return common


class ModelDrafter:
    """Proposes tokens with a draft model that shares the target's tokenizer.

    The draft KV cache always holds a prefix of the target's cached tokens plus the drafts of the last step;
    each call first rolls it back to its longest prefix in common with the target's (a mask, see
    ``KVCache.truncate``) and feeds the tokens it has not seen yet.

    Args:
        model: the loaded draft model.
        slack: dead KV slots tolerated past n_ctx before they are squeezed out.
    """

    def __init__(self, model: LoadedModel, slack: int = 64):
        self.cache = KVCache(model.compiled, model.rope, slack, model.sliding_window)
        self._synced = 0  # tokens known to agree with the target's cache

    def reset(self) -> None:
        """Forget everything (the target's cache was reset)."""
        self.cache.reset()
        self._synced = 0

    def feed(self, target_tokens: list[int], n_ctx: int) -> None:
        """Bring the draft cache up to ``target_tokens`` (one pass over the tokens it lacks)."""
        self._feed(target_tokens, n_ctx)

    def truncate(self, length: int) -> None:
        """Keep the draft cache's first ``length`` tokens at most."""
        self.cache.truncate(min(length, len(self.cache)))
        self._synced = min(self._synced, length)

    def roll(self, n_keep: int, n_discard: int, target_tokens_before: list[int]) -> None:
        """Apply the target's roll to the draft cache (same tokens dropped, keys shifted the same way)."""
        self._sync(target_tokens_before)
        self.cache.roll(n_keep, n_discard)
        self._synced = 0

    def propose(
        self,
        context: list[int],
        k: int,
        n_ctx: int,
        sampling: SamplingSettings,
        rng: np.random.Generator,
        penalties: ReplyPenalties,
    ) -> tuple[list[int], np.ndarray | None]:
        """Draft exactly ``k`` tokens after ``context``, one draft-model pass each (see ``Drafter.propose``).

        Greedy sampling drafts the argmax of the penalized (and grammar-masked) logits; otherwise each draft is
        sampled from the warped penalized draft distribution, returned as float64 ``[k, vocab]`` (None when greedy).
        The grammar always leaves a full-vocabulary row a token (EOS at worst, ``GrammarMask.allowed``).
        """
        logits = self._feed(context, n_ctx)
        if logits is None:  # context already cached: recompute the last position
            self.cache.truncate(len(context) - 1)
            logits = self.cache.forward(context[-1:], n_ctx)[-1]
        drafts = draft_tokens(logits, lambda token: self.cache.forward([token], n_ctx)[-1], k, sampling, rng, penalties)
        self._synced = len(context)
        return drafts

    def _sync(self, target_tokens: list[int]) -> None:
        """Roll the draft cache back to its longest prefix in common with ``target_tokens``."""
        common = common_prefix(self.cache.tokens, target_tokens, self._synced)
        self.cache.truncate(common)
        self._synced = common

    def _feed(self, target_tokens: list[int], n_ctx: int) -> np.ndarray | None:
        """Sync, then feed the missing tokens; float32 ``[vocab]`` logits of the last one, or None if none."""
        self._sync(target_tokens)
        missing = target_tokens[len(self.cache) :]
        if not missing:
            return None
        logits = self.cache.forward(missing, n_ctx)
        self._synced = len(self.cache)
        return logits[-1]


class HeadDrafter:
    """Proposes tokens with a draft head that reads the target's hidden states (see ``draft_head``).

    Head position ``j`` is computed from the target's hidden state ``h_j`` and the token ``x_{j+1}`` after it
    (so the head's KV cache lists ``x_{j+1}`` as its token at ``j``), and predicts ``x_{j+2}`` and ``h_{j+1}``.
    To draft after the context ``x_0 .. x_n`` (``x_n`` the pending token) it first computes every position up to
    ``n - 1`` it lacks, from the target's cached hidden states (``KVCache.rows``); its output there drafts
    ``x_{n+1}``; each further draft feeds the head's own predicted hidden state and the previous draft at the next
    position. Those positions are rolled back (masked) before the next call, which recomputes them from the
    target's real hidden states once the target has cached them.

    A fused head (``LoadedHead.feature_layers``) also reads the target's layer features (``layer_features``) at the
    positions computed from the target's hidden states, kept by the target's cache beside them, and zeros at the
    positions of further drafts, as it was trained (``tools/draft_head/head.py``: EAGLE-3's later drafting steps
    have no target features).

    Drafts have probability 0 outside the head's vocabulary, so speculative sampling stays exact: a token there is
    never drafted, and the target's resampling distribution covers it (Leviathan et al., arXiv 2211.17192,
    section 3.3).

    Args:
        head: the loaded head.
        target_cache: the target's KV cache, which keeps its hidden states (``kept_outputs``), and a fused head's
            layer features too.
        vocab_size: the target's vocabulary size (width of the draft distributions).
        slack: dead KV slots tolerated past n_ctx before they are squeezed out.
    """

    def __init__(self, head: LoadedHead, target_cache: KVCache, vocab_size: int, slack: int = 64):
        self.cache = KVCache(head.compiled, head.rope, slack)
        self._target = target_cache
        self._head = head
        self._vocab_size = vocab_size
        self._valid = 0  # head positions computed from the target's hidden states (none from drafts)
        self._ascending_vocab = np.sort(head.vocab)

    @property
    def vocab(self) -> np.ndarray:
        """int64 ``[draft_vocab]``: the target token id of each entry of the head's vocabulary."""
        return self._head.vocab

    def reset(self) -> None:
        """Forget everything (the target's cache was reset)."""
        self.cache.reset()
        self._valid = 0

    def feed(self, target_tokens: list[int], n_ctx: int) -> None:
        """Compute the head positions the target's cached tokens allow (all but the last, whose next token is
        not known yet)."""
        self._catch_up(target_tokens, len(target_tokens) - 1, n_ctx)

    def truncate(self, length: int) -> None:
        """Keep the head positions the target's first ``length`` tokens determine (position j needs token j + 1)."""
        self._valid = min(self._valid, max(0, length - 1))
        self.cache.truncate(min(self._valid, len(self.cache)))

    def roll(self, n_keep: int, n_discard: int, target_tokens_before: list[int]) -> None:
        """Drop and shift the same positions as the target (StreamingLLM, arXiv 2309.17453, section 3.2).

        The head position ``n_keep - 1`` keeps the token that followed it before the roll; it is not recomputed
        (one stale entry in a draft's attention, never in the output)."""
        self.cache.truncate(self._valid)
        self.cache.roll(n_keep, n_discard)
        self._valid = len(self.cache)

    def propose(
        self,
        context: list[int],
        k: int,
        n_ctx: int,
        sampling: SamplingSettings,
        rng: np.random.Generator,
        penalties: ReplyPenalties,
    ) -> tuple[list[int], np.ndarray | None]:
        """Draft up to ``k`` tokens after ``context``, one head pass each (see ``Drafter.propose``).

        Greedy sampling drafts the argmax of the penalized (and grammar-masked) logits; otherwise each draft is
        sampled from the warped penalized distribution (0 outside the head's vocabulary), returned as float64
        ``[len(tokens), vocab]``. Drafting stops early where the grammar leaves no token of the head's vocabulary.
        """
        cached = len(context) - 1
        outputs = self._catch_up(context, cached, n_ctx)
        if outputs is None:  # position cached - 1 already computed: recompute it for its outputs
            self.cache.truncate(cached - 1)
            self._valid = cached - 1
            outputs = self._catch_up(context, cached, n_ctx)
        logits, hidden = outputs

        def next_row(token: int) -> np.ndarray:
            nonlocal hidden
            logits = self.cache.forward([token], n_ctx, inputs=self._head.further_draft_inputs(hidden))[-1]
            hidden = self.cache.output(DRAFT_HIDDEN)[-1]
            return self._full_row(logits)

        return draft_tokens(self._full_row(logits), next_row, k, sampling, rng, penalties, self._ascending_vocab)

    def first_draft_logits(self, context: list[int], n_ctx: int) -> tuple[int, np.ndarray] | None:
        """Catch up on the positions whose first draft the context already answers, for Auto's estimate of what
        drafting would have gained during plain steps (``sampling.first_draft_acceptance``).

        Computes head positions ``[valid, len(context) - 2)`` from the target's hidden states (the catch-up
        ``propose`` would run anyway; the position before the pending token's is left for it). Position j's row
        scores the first draft a step with pending token ``context[j + 1]`` would have made, which the target
        answered with ``context[j + 2]``.

        Returns:
            ``(start, logits)``: the first position computed and its float32 ``[m, draft_vocab]`` draft-vocabulary
            logits, row i for position start + i; None when there was nothing to compute.
        """
        start = min(self._valid, len(self.cache))
        found = self._catch_up(context, len(context) - 2, n_ctx, all_rows=True)
        if found is None:
            return None
        return start, found[0]

    def _full_row(self, logits: np.ndarray) -> np.ndarray:
        """The head's draft-vocabulary logits as a float32 ``[vocab_size]`` row of the target's vocabulary, -inf
        outside the head's."""
        full = np.full(self._vocab_size, -np.inf, dtype=np.float32)
        full[self._head.vocab] = logits
        return full

    def _catch_up(
        self, context: list[int], upto: int, n_ctx: int, all_rows: bool = False
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Compute head positions ``[valid, upto)`` from the target's hidden states (and a fused head's layer
        features) and the tokens after them; return the draft-vocabulary logits of position ``upto - 1`` (of every
        position computed, ``[m, draft_vocab]``, where ``all_rows``) and its predicted hidden state, or None when
        there was nothing to compute."""
        common = common_prefix(self.cache.tokens, context[1:], min(self._valid, len(self.cache)))
        self._valid = min(self._valid, common)
        self.cache.truncate(self._valid)
        start = self._valid
        if start >= upto:
            return None
        inputs = self._head.inputs_from_target(self._target, start, upto)
        logits = self.cache.forward(context[start + 1 : upto + 1], n_ctx, last_only=not all_rows, inputs=inputs)
        self._valid = upto
        return (logits if all_rows else logits[-1]), self.cache.output(DRAFT_HIDDEN)[-1]


#: Longest match ``PromptLookupDrafter.match_length`` measures (Auto only asks whether it reaches LONG_MATCH).
MAX_MATCH_LENGTH = 32


class PromptLookupDrafter:
    """Proposes the tokens that followed the latest earlier occurrence of the conversation's last n-gram; records
    how long that match is (``match_length``: the n-gram extended backwards while the tokens before both agree), which
    tells Auto decoding whether the context is copying.

    It searches the whole conversation since the target's last reset, tokens rolled out of the target's cache
    included: its history is what ``follow`` set (the engine's record of every token cached since the reset)
    followed by every token the target cached since, as ``feed``, ``roll`` and ``propose`` show them. Within a
    reply the target's cache only grows past what it held at the previous call (rejected drafts are rolled back
    before the next ``propose``), so catching up appends the new tail.

    The search costs O(1) per step whatever the history's length: an index maps every n-gram of the history
    (``min_ngram`` to ``max_ngram`` tokens) to the stack of its start positions, latest on top, kept up to date as
    tokens are appended (one push per n-gram size) and cut (one pop each), so a follow-up turn that shares the
    history indexes only its new tokens. The proposals are those of a scan of the whole history for the latest
    occurrence of the longest n-gram that has one (the n-gram ending with the pending token; an occurrence must end
    before it).

    Args:
        max_ngram: longest n-gram tried first (``SpeculativeSettings.lookup_max_ngram``, 1 to
            ``MAX_LOOKUP_NGRAM``); shorter ones down to ``min_ngram`` are tried next.
        min_ngram: shortest n-gram matched. The default 2 skips single-token matches ("the", ","), whose
            continuations are mostly wrong and cost verification time (measured on the rewrite benchmark:
            1.54x vs 1.34x speedup at K=4).
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        self.max_ngram = max_ngram
        self.min_ngram = min(min_ngram, max_ngram)
        self._history: list[int] = []
        self._starts: dict[tuple[int, ...], list[int]] = {}  # n-gram -> its start positions in the history, ascending
        self._cached = 0  # tokens of the target's cache already in the history
        self.match_length = 0  # tokens the last lookup matched (its n-gram extended backwards, <= MAX_MATCH_LENGTH)

    @property
    def history(self) -> list[int]:
        """The tokens searched (read only)."""
        return self._history

    def follow(self, history: Sequence[int], cached: int) -> None:
        """Make the history ``history`` (every token the target cached since its last reset, rolled-out ones
        included), of which the target's cache holds ``cached`` now: only what differs from the current history is
        cut and indexed (an equality test of the shared part, then the tail)."""
        kept = len(self._history)
        if kept > len(history) or history[:kept] != self._history:
            kept = common_prefix(self._history, history)
        self._cut(kept)
        self._append(history[kept:])
        self._cached = cached

    def reset(self) -> None:
        """Forget the history (the target's cache was reset)."""
        self._cut(0)
        self._cached = 0

    def feed(self, target_tokens: list[int], n_ctx: int) -> None:
        """Append the tokens the target cached since the last call to the history."""
        self._catch_up(target_tokens)

    def truncate(self, length: int) -> None:
        """Drop from the history the target's cached tokens after its first ``length``."""
        cut = self._cached - length
        if cut > 0:
            self._cut(len(self._history) - cut)
            self._cached = length

    def roll(self, n_keep: int, n_discard: int, target_tokens_before: list[int]) -> None:
        """Keep the rolled-out tokens in the history; only the count of the target's cached tokens shrinks."""
        self._catch_up(target_tokens_before)
        self._cached -= n_discard

    def propose(
        self,
        context: list[int],
        k: int,
        n_ctx: int,
        sampling: SamplingSettings,
        rng: np.random.Generator,
        penalties: ReplyPenalties,
    ) -> tuple[list[int], None]:
        """Up to ``k`` tokens continuing the last n-gram of the history and the pending token ``context[-1]``
        ([] without a match); deterministic whatever ``sampling`` says, so no distributions (``Drafter.propose``)."""
        return self.offer(context[:-1], context[-1], k), None

    def offer(self, cached_tokens: list[int], pending: int, k: int) -> list[int]:
        """``propose`` without copying the context: the target's cached tokens ``cached_tokens`` (only their tail
        past what the history holds is read) and the pending token."""
        self._catch_up(cached_tokens)
        return self.lookup(pending, k)

    def lookup(self, pending: int, k: int) -> list[int]:
        """Up to ``k`` token ids continuing the last n-gram of the history followed by ``pending``; [] if none.

        The n-gram of n tokens is the history's last n - 1 and ``pending``; its latest occurrence within the history
        starting at s is followed by history[s + n:] and then ``pending``. Sizes from ``max_ngram`` (at most the
        history's length) down to ``min_ngram`` are tried; ``match_length`` is set (0 without a match)."""
        history = self._history
        size = len(history)
        for n in range(min(self.max_ngram, size), self.min_ngram - 1, -1):
            starts = self._starts.get((*history[size - n + 1 :], pending))
            if starts:
                start = starts[-1] + n
                self.match_length = n + _common_suffix(history, starts[-1], size - n + 1, MAX_MATCH_LENGTH - n)
                drafts = history[start : start + k]
                return drafts + [pending] if len(drafts) < k else drafts  # the occurrence's continuation ends at pending
        self.match_length = 0
        return []

    def _append(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the history and index the n-grams that end in them."""
        history, starts = self._history, self._starts
        for token in tokens:
            history.append(token)
            end = len(history)
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                starts.setdefault(tuple(history[end - n :]), []).append(end - n)

    def _cut(self, length: int) -> None:
        """Keep the history's first ``length`` tokens; unindex the n-grams that end after them."""
        history, starts = self._history, self._starts
        if length == 0:
            history.clear()
            starts.clear()
            return
        for end in range(len(history), length, -1):
            for n in range(self.min_ngram, min(self.max_ngram, end) + 1):
                key = tuple(history[end - n : end])
                positions = starts[key]
                positions.pop()
                if not positions:
                    del starts[key]
        del history[length:]

    def _catch_up(self, target_tokens: list[int]) -> None:
        new = target_tokens[self._cached :]
        if new:
            self._append(new)
        self._cached = len(target_tokens)


def _common_suffix(tokens: list[int], a: int, b: int, most: int) -> int:
    """Length of the longest common suffix of ``tokens[:a]`` and ``tokens[:b]``, at most ``most``."""
    length = 0
    while length < most and length < a and length < b and tokens[a - 1 - length] == tokens[b - 1 - length]:
        length += 1
    return length
