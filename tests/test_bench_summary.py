"""The benchmark's bookkeeping (bench/speed.py): quick-run repetitions filed per repetition, long-run windows,
and the medians / ratios / speedups the report's headline is made of, on synthetic runs with known values."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from speed import _long_window_stats, long_window, repeated_name, speed_markdown, split_repetitions, summarize  # noqa: E402


def test_split_repetitions_inverts_repeated_name():
    runs = {repeated_name(name, rep): {"value": (name, rep)} for rep in range(3) for name in ("in32_out32", "a@b")}
    split = split_repetitions(runs, 3)
    assert split == [{name: {"value": (name, rep)} for name in ("in32_out32", "a@b")} for rep in range(3)]


def test_split_repetitions_keeps_a_missing_repetition_empty():
    assert split_repetitions({repeated_name("w", 2): {"error": "x"}}, 3) == [{}, {}, {"w": {"error": "x"}}]


@pytest.mark.parametrize(("tokens", "window"), [(20_000, 1000), (2_000, 1000), (1_500, 750), (1_000, 500), (300, 250)])
def test_long_window(tokens, window):
    assert long_window(tokens) == window


def test_long_window_stats_from_samples():
    # 250-token samples; the first 500 tokens at 50 tokens/s, the last 500 at 25 tokens/s, RSS growing 1 MB/sample
    samples, elapsed = [{"generated": 0, "elapsed_s": 0.0, "rss_mb": 500.0}], 0.0
    for i, generated in enumerate(range(250, 1_251, 250), start=1):
        elapsed += 250 / (50 if generated <= 750 else 25)
        samples.append({"generated": generated, "elapsed_s": elapsed, "rss_mb": 500.0 + i})
    stats = _long_window_stats(samples, 500)
    assert stats["window"] == 500
    assert stats["first_tokens_per_s"] == pytest.approx(50.0)  # 250 -> 750: no prefill in the window
    assert stats["last_tokens_per_s"] == pytest.approx(25.0)  # 750 -> 1,250
    assert stats["last_vs_first_tokens_per_s"] == pytest.approx(0.5)
    assert stats["rss_growth_mb"] == pytest.approx(5.0 - 3.0)


def _run(tps, ttft, ids):
    return {"decode_tokens_per_s": tps, "ttft_ms": ttft, "tpot_ms": 1e3 / tps, "new_tokens": len(ids), "token_ids": ids}


def _results():
    """Three repetitions; SpecChat AR 30/33/36 tokens/s vs openvino-genai 40/30/36, SpecChat lookup 2x its AR."""
    reps = []
    for ours, theirs in ((30.0, 40.0), (33.0, 30.0), (36.0, 36.0)):
        reps.append({
            "specchat": {
                "ar": {"workers": [{"ru_maxrss_mb": 500.0}], "runs": {"w": _run(ours, 100.0, [1, 2, 3, 4])}},
                "lookup": {"workers": [], "runs": {"w": _run(2 * ours, 100.0, [1, 2, 9, 9])}},
            },
            "genai": {
                "ar": {"workers": [{"ru_maxrss_mb": 400.0}], "runs": {"w": _run(theirs, 50.0, [1, 2, 3, 5])}},
                "lookup": {"workers": [], "runs": {"w": {"error": "RuntimeError: boom"}}},
            },
        })
    return {"config": {"engines": ["specchat", "genai"], "workloads": [{"name": "w", "input": 32, "output": 4}],
                       "quick": True, "reps": 3, "k": 4, "max_ngram": 3, "target_model": "t", "draft_model": "d"},
            "machine": {"cpu": "cpu", "cpu_count": 2, "isa": [], "memory_gb": 1, "platform": "p", "python": "3",
                        "versions": {}},
            "reps": reps, "long_run": {}}


def test_summarize_medians_ratios_speedups_and_agreement():
    s = summarize(_results())
    # medians of the per-repetition ratios 0.75, 1.1, 1.0 (not the ratio of medians, 33 / 36)
    assert s["ratios"]["genai"]["ar"]["w"]["tokens_per_s_ratio"] == pytest.approx(1.0)
    assert s["ratios"]["genai"]["ar"]["w"]["ttft_ratio"] == pytest.approx(2.0)
    assert s["ratios"]["genai"]["ar"]["w"]["n"] == 3
    assert s["speculative_speedup"]["specchat"]["lookup"]["w"] == {"speedup": pytest.approx(2.0), "n": 3}
    assert "lookup" not in s["speculative_speedup"].get("genai", {})
    assert s["tokens_identical_to_own_ar"]["specchat"]["lookup"]["w"] == 2
    assert s["tokens_identical_to_specchat_ar"]["genai"]["w"] == 3
    assert s["table"]["specchat"]["ar"]["w"]["decode_tokens_per_s"] == pytest.approx(33.0)
    assert (s["table"]["genai"]["lookup"]["w"]["ok_runs"], s["table"]["genai"]["lookup"]["w"]["failed_runs"]) == (0, 3)
    assert [e["rep"] for e in s["errors"]] == [0, 1, 2]
    assert s["worker_peak_rss_mb"] == {"specchat": {"ar": 500.0}, "genai": {"ar": 400.0}}


def test_quick_report_states_its_plan():
    markdown = speed_markdown(_results())
    # the plan is read from what was measured (openvino-genai's failed lookup still names its workload)
    assert "quick run (`bench/run.py` without `--full`) of SpecChat, openvino-genai: ar on w; lookup on w, " in markdown
    assert "| openvino-genai | ar | 1.00x tok/s, 2.00x TTFT |" in markdown
    assert "| SpecChat | lookup | 2.00x (same 2) |" in markdown


def test_each_tokens_per_s_is_shown_against_the_machines_limit():
    results = _results()
    # 10 GB/s over 90 MB of weights + the KV cache at the mean context 32 + 4 / 2 = 34 tokens
    shape = {"weight_bytes": 90_000_000, "matmul_weights": 1, "layers": 30, "kv_heads": 3, "heads": 9, "head_dim": 64}
    results["limits"] = {"bandwidth_gbs": 10.0, "gemm_gflops": 1e9, "shape": shape}
    kv_f32 = 2 * 30 * 3 * 64 * 34 * 4.0
    limit = 10e9 / (90e6 + kv_f32)
    markdown = speed_markdown(results)
    assert f"| SpecChat | ar | w | 100.0 | 30.30 | 33.0 | {limit:.0f} | {33.0 / limit * 100:.0f}% |" in markdown
    kv_u8 = 2 * 30 * 3 * 64 * 34 * (1 + 8 / 64)
    assert f"| {10e9 / (90e6 + kv_u8):.0f} |" in markdown.split("| openvino-genai | ar | w |")[1].splitlines()[0]
    results["limits"]["gemm_gflops"] = 1e-3  # arithmetic slower than memory: the compute limit binds
    flops = 2 * 1 + 4 * 30 * 9 * 64 * 34
    assert f"| 33.0 | {1e6 / flops:.0f} |" in speed_markdown(results)


def test_a_report_without_limits_still_renders():
    assert "| SpecChat | ar | w | 100.0 | 30.30 | 33.0 | — | — |" in speed_markdown(_results())
