"""The draft head's training prompts (``tools/draft_head/prompts.py``): never the benchmark's, well formed, varied."""

from __future__ import annotations

import collections

import numpy as np

from tools.draft_head.prompts import (
    EVERYDAY,
    BenchmarkFilter,
    everyday_prompt,
    read_bench_file,
    read_bench_prompts,
    seeded_prompt,
)


def test_the_filter_refuses_benchmark_prompts_and_six_word_overlaps():
    bench = BenchmarkFilter()
    prompts = read_bench_prompts()
    assert len(prompts) >= 50
    assert not any(bench.allows(prompt) for prompt in prompts)
    assert not bench.allows("Please, " + prompts[0].upper())  # case and punctuation do not hide a copy
    words = "Tell me a short story about a lighthouse keeper".split()
    assert not bench.allows("Now " + " ".join(words[:6]) + " sailor.")  # six words in a row
    assert bench.allows("Now " + " ".join(words[:5]) + " sailor.")  # five are allowed


def test_seeded_prompts_are_filled_and_mix_everyday_requests_with_topic_templates():
    rng = np.random.default_rng(0)
    kinds = collections.Counter()
    for _ in range(2000):
        kind, text = seeded_prompt(rng)
        assert "{" not in text and "}" not in text and text == text.strip(), text
        kinds[kind] += 1
    everyday = sum(count for kind, count in kinds.items() if kind in EVERYDAY)
    assert 0.45 < everyday / 2000 < 0.55
    assert set(EVERYDAY) <= set(kinds) and {"code", "arithmetic", "advice", "story"} <= set(kinds)


def test_everyday_requests_cover_the_benchmarks_kinds_without_its_texts():
    bench = BenchmarkFilter()
    bench_kinds = {kind for kind, _ in read_bench_file()}
    assert bench_kinds <= {kind.removeprefix("everyday-") for kind in EVERYDAY}
    rng = np.random.default_rng(1)
    drawn = [everyday_prompt(rng) for _ in range(4000)]
    refused = [text for _, text in drawn if not bench.allows(text)]
    assert len(refused) < 40, refused[:5]  # almost none wasted on the filter
    distinct = collections.defaultdict(set)
    for kind, text in drawn:
        distinct[kind].add(text)
    # varied enough that a data set's few thousand everyday prompts rarely repeat (a repeated greedy prompt
    # repeats its reply token for token)
    assert min(len(texts) for texts in distinct.values()) >= 150, {k: len(v) for k, v in distinct.items()}
