"""bench/quality.py's perplexity in llama.cpp's windows: how the text is cut, which tokens count, and the table."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from quality import quality_markdown, second_half_perplexity, windows  # noqa: E402


def test_windows_are_whole_and_disjoint():
    cut = windows(list(range(2500)), window=1000)
    assert [w[0] for w in cut] == [0, 1000] and all(len(w) == 1000 for w in cut)  # the 500-token tail is dropped


def test_only_each_windows_second_half_counts():
    # window of 5 tokens -> 4 scores; the first two (little context) are ignored
    first = np.log([0.01, 0.01, 0.5, 0.5])
    second = np.log([0.01, 0.01, 0.25, 0.25])
    expected = np.exp(-np.mean(np.log([0.5, 0.5, 0.25, 0.25])))
    assert second_half_perplexity([first, second]) == pytest.approx(expected)


def test_the_table_reads_the_irs_against_llama_cpp_and_shows_a_failed_reference():
    results = {
        "text": {"file": "bench/data/kjv_genesis.txt", "tokens": 2048},
        "perplexity_by_bits": {"4": {"perplexity": 10.0}},
        "perplexity_in_windows": {"windows": 2, "window": 1024, "rows": {
            "llama.cpp, Q4_1 GGUF": {"perplexity": 10.0}, "SpecChat, 4-bit IR": {"perplexity": 10.05}}},
        "streaming_llm": {"256": {"a": {"perplexity": 1.0}, "b": {"perplexity": 2.0}, "c": {"perplexity": 1.0}}},
        "greedy_identity": {},
    }
    markdown = quality_markdown(results)
    assert "| SpecChat, 4-bit IR | 10.050 | +0.50% |" in markdown
    results["perplexity_in_windows"]["rows"]["llama.cpp, Q4_1 GGUF"] = {"error": "ModuleNotFoundError: llama_cpp"}
    markdown = quality_markdown(results)
    assert "| llama.cpp, Q4_1 GGUF | failed: `ModuleNotFoundError: llama_cpp` | — |" in markdown
    assert "| SpecChat, 4-bit IR | 10.050 | — |" in markdown


def test_a_run_of_the_windows_alone_is_reported_alone():
    markdown = quality_markdown({"text": {"file": "t", "tokens": 2048}, "perplexity_in_windows": {
        "windows": 2, "window": 1024, "rows": {"SpecChat, 4-bit IR": {"perplexity": 10.0}}}})
    assert "| SpecChat, 4-bit IR | 10.000 | — |" in markdown
    assert "StreamingLLM" not in markdown and "by bit-width" not in markdown
