"""Prompt lookup's n-gram index proposes what a scan of the whole history proposes, on real chat histories (the
committed training corpus), after rejected drafts are rolled back, after the context rolls, and across the replies
of a conversation (``PromptLookupDrafter.follow``)."""

from pathlib import Path

import numpy as np
import pytest

from inference.drafting import MAX_MATCH_LENGTH, PromptLookupDrafter

SHARD = Path(__file__).resolve().parent.parent / "tools" / "draft_head" / "conversations" / "shard-00000.npz"


def _scan(history: list[int], pending: int, k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], int]:
    """The search the index replaces: for n from max_ngram down, the latest occurrence of the last n tokens of
    history + [pending] that ends before pending, its continuation, and the match extended backwards."""
    tokens = np.asarray(history + [pending], dtype=np.int64)
    size = tokens.shape[0]
    for n in range(min(max_ngram, size - 1), min(min_ngram, max_ngram) - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: size - 1], n)
        hits = np.flatnonzero((windows == tokens[size - n :]).all(axis=1))
        if hits.size:
            start = int(hits[-1])
            match = n
            while (match < MAX_MATCH_LENGTH and start - 1 - (match - n) >= 0
                   and tokens[start - 1 - (match - n)] == tokens[size - n - 1 - (match - n)]):
                match += 1
            return [int(t) for t in tokens[start + n : start + n + k]], match
    return [], 0


def _conversations(count: int) -> list[list[int]]:
    shard = np.load(SHARD)
    tokens, offsets = shard["tokens"].astype(np.int64), shard["offsets"]
    return [tokens[offsets[i] : offsets[i + 1]].tolist() for i in range(count)]


@pytest.mark.parametrize("max_ngram, min_ngram", [(3, 2), (4, 1), (1, 1)])
def test_the_index_proposes_what_the_scan_proposes_as_a_reply_grows_with_rejected_drafts(max_ngram, min_ngram):
    """A history of real conversations decoded step by step: each step the target caches 1 to 4 tokens (what
    verification kept; the rejected drafts never reach the history) and the drafter is asked with a pending token
    that sometimes continues the text and sometimes does not; now and then the history is cut back (a regenerated
    turn) and continues with text seen earlier, whose n-grams the cut must have unindexed."""
    rng = np.random.default_rng(0)
    text = [t for conversation in _conversations(6) for t in conversation]
    lookup = PromptLookupDrafter(max_ngram, min_ngram)
    cached, checked, matched = [], 0, 0
    position = 0
    while position + 5 < len(text) and checked < 1500:
        if rng.random() < 0.05:  # a turn regenerated: the history cut back, then another text follows
            cut = int(rng.integers(1, 40))
            cached = cached[:-cut]
            lookup.follow(cached, len(cached))
            position = max(0, position - int(rng.integers(0, 60)))
        step = int(rng.integers(1, 5))
        cached.extend(text[position : position + step])
        position += step
        pending = text[position] if rng.random() < 0.8 else int(rng.integers(0, 49152))
        k = int(rng.integers(1, 9))
        drafts = lookup.offer(cached, pending, k)
        expected, match = _scan(cached, pending, k, max_ngram, min_ngram)
        assert (drafts, lookup.match_length) == (expected, match), f"at {len(cached)} tokens"
        checked += 1
        matched += bool(expected)
    assert lookup.history == cached
    assert checked > 300 and matched > checked // 10  # the comparison saw many matches, not only misses


def test_the_index_follows_cuts_rolls_and_the_turns_of_a_conversation():
    """A cut (a turn that shares only a prefix), a roll (the rolled-out tokens stay searchable), a reply that did
    not tell the drafter (autoregressive: ``follow`` catches up), a regenerated reply (``follow`` cuts the old one)
    and a reset: after each, proposals equal the scan of the history the engine keeps."""
    first, second, third = _conversations(3)
    lookup = PromptLookupDrafter(3)
    seen = first[:400]
    lookup.follow(seen, len(seen))
    for end in range(401, len(first)):  # a reply: the target caches one token per step
        assert lookup.offer(first[:end - 1], first[end - 1], 4) == _scan(first[:end - 1], first[end - 1], 4, 3, 2)[0]
    seen = first[:-1]
    lookup.truncate(300)  # the target's cache cut to 300 tokens: the history too
    assert lookup.history == first[:300]
    seen = first[:300] + second
    lookup.follow(seen, len(seen))
    assert lookup.history == seen
    lookup.roll(n_keep=4, n_discard=200, target_tokens_before=seen)  # rolled-out tokens stay in the history
    cache = seen[:4] + seen[204:]
    for pending in second[:50]:
        assert lookup.offer(cache, pending, 3) == _scan(seen, pending, 3, 3, 2)[0]
        cache, seen = cache + [pending], seen + [pending]
    seen = seen + third  # a reply decoded without the drafter
    lookup.follow(seen, len(seen))
    assert lookup.history == seen
    seen = seen[:-100] + first[:60]  # the last reply regenerated, then decoded step by step
    lookup.follow(seen[:-50], len(seen) - 50)
    assert lookup.history == seen[:-50]
    for end in range(len(seen) - 50, len(seen)):
        assert lookup.offer(seen[:end], seen[end], 4) == _scan(seen[:end], seen[end], 4, 3, 2)[0]
    lookup.follow([], 0)
    assert lookup.history == [] and lookup.offer([], 7, 3) == []
    lookup.follow(second, len(second))  # rebuilt from nothing: the index holds nothing of before
    assert lookup.offer(second[:-1], second[-1], 3) == _scan(second[:-1], second[-1], 3, 3, 2)[0]


def test_a_long_match_is_measured_and_capped():
    """A context copying 40 tokens: the match extends backwards to MAX_MATCH_LENGTH; a fresh 2-gram match is 2."""
    block = list(range(100, 140))
    lookup = PromptLookupDrafter(3)
    history = [1, 2, 3] + block + [5, 6] + block[:-1]
    assert lookup.offer(history, block[-1], 2) == [5, 6]
    assert lookup.match_length == MAX_MATCH_LENGTH
    lookup.follow([], 0)
    assert lookup.offer([1, 2, 3, 9, 2], 3, 2) == [9, 2] and lookup.match_length == 2
