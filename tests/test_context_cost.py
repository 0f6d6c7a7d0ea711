"""bench/context_cost.py: its line fit, the KV bytes of a cached token, and its prompts of exact lengths."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from context_cost import NEW_TOKENS, chatml_prompt, fit, kv_bytes_per_token  # noqa: E402
from speed import TokenClock  # noqa: E402


def test_the_fit_reads_the_step_without_cache_and_the_cost_per_1000_cached_tokens():
    lengths = [32, 512, 1024, 2048]
    tpot = [10.0 + 2.5 * (n + NEW_TOKENS / 2) / 1000 for n in lengths]
    intercept, slope = fit(lengths, tpot)
    assert intercept == pytest.approx(10.0) and slope == pytest.approx(2.5)


def test_a_cached_token_of_the_default_model_holds_45_kib_in_f32_and_a_quarter_in_u8(int4_dir):
    config = json.loads((int4_dir / "config.json").read_text())
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (30, 3)
    assert kv_bytes_per_token(config, "f32") == 2 * 30 * 3 * 64 * 4 == 46080
    assert kv_bytes_per_token(config, "u8") == 46080 // 4


@pytest.mark.parametrize("total", [32, 1024])
def test_prompts_have_exactly_the_asked_length_and_end_in_the_assistant_header(int4_dir, target, total):
    ids = chatml_prompt(str(int4_dir), total)
    header = [int(t) for t in target.tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False).input_ids.data[0]]
    assert len(ids) == total and ids[-len(header):] == header
    assert "Summarize:" in target.tokenizer.decode(ids)


def test_steady_decoding_leaves_out_the_first_decode_step():
    clock = TokenClock()
    clock.start = 0.0
    clock.times, clock.ids = [0.5, 0.7, 0.71, 0.72, 0.73], [1, 2, 3, 4, 5]  # first token, a slow step, three quick ones
    metrics = clock.metrics()
    assert metrics["tpot_ms"] == pytest.approx(1e3 * 0.23 / 4)
    assert metrics["steady_tpot_ms"] == pytest.approx(10.0)
