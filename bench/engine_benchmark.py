"""Engine benchmark: ratios measured side by side in one process on the same IR and prompts.

Run: ``make bench`` (or ``.venv/bin/python bench/engine_benchmark.py [--reps 3] [--json out.json]``).

Rows (targets from the engine issue):
1. autoregressive decode tokens/s, this engine / openvino-genai LLMPipeline (target >= 0.95x)
2. speculative / autoregressive decode tokens/s on a "rewrite this paragraph" prompt, prompt lookup
   (target >= 1.5x) and a model draft (the 8-bit variant of the same model: it verifies the machinery,
   it cannot be faster than the target since it is not smaller)
3. one context roll vs re-prefilling the kept tokens (target: roll >= 10x cheaper)
4. speculative per-step engine overhead (step wall time minus the target's verification pass) with 200 vs
   2,000 cached tokens (target: within 10%)

Absolute numbers depend on the machine and its load; each ratio compares runs interleaved in one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openvino as ov  # noqa: E402
import openvino_genai  # noqa: E402

from inference.chat import ChatSession  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.events import StepStats  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings  # noqa: E402

PARAGRAPH = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of salt and wind. "
    "Every evening the keeper climbed the narrow stairs, lit the great lamp, and watched the ships pass safely "
    "through the dark water. When the town finally replaced the lamp with an automatic beacon, the keeper stayed "
    "on anyway, because he could not imagine a night without the climb."
)
REWRITE_PROMPT = f"Copy-edit this paragraph. Return the full corrected paragraph only.\n\n{PARAGRAPH}"
AR_PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a bicycle gear system works.",
    "List five tips for staying productive when working from home.",
]


def _settings(decoding: str, max_new_tokens: int, k: int = 4, n_ctx: int = 4096) -> GenerationSettings:
    return GenerationSettings(
        decoding=Decoding(decoding),
        sampling=SamplingSettings(max_new_tokens=max_new_tokens),
        context=ContextSettings(n_ctx=n_ctx),
        speculative=SpeculativeSettings(k=k),
    )


def _chat_ids(engine: Engine, text: str) -> list[int]:
    return ChatSession(engine, messages=[{"role": "user", "content": text}]).prompt_ids()


def _ours(engine: Engine, ids, settings):
    engine.reset()
    return engine.generate_text(ids, settings)


def bench_ar_vs_genai(engine: Engine, folder: Path, reps: int, new_tokens: int) -> dict:
    pipeline = openvino_genai.LLMPipeline(str(folder), "CPU")
    config = openvino_genai.GenerationConfig()
    config.max_new_tokens = new_tokens
    ratios, ours_rates, genai_rates = [], [], []
    for _ in range(reps):
        for prompt in AR_PROMPTS:
            ids = _chat_ids(engine, prompt)
            ours = _ours(engine, ids, _settings("ar", new_tokens))
            result = pipeline.generate(ov.Tensor(np.asarray([ids], dtype=np.int64)), config)
            theirs = result.perf_metrics.get_throughput().mean
            ours_rates.append(ours.decode_tokens_per_s)
            genai_rates.append(theirs)
            ratios.append(ours.decode_tokens_per_s / theirs)
    del pipeline
    return {
        "engine_tokens_per_s": statistics.median(ours_rates),
        "genai_tokens_per_s": statistics.median(genai_rates),
        "ratio": statistics.median(ratios),
    }


def _near_tie_gap(engine: Engine, ids, reference: list[int], candidate: list[int], max_new_tokens: int) -> dict | None:
    """Where two greedy outputs first differ, the gap between the target's two best logits (None if equal)."""
    if reference == candidate:
        return None
    first = next((i for i, (a, b) in enumerate(zip(reference, candidate)) if a != b), min(len(reference), len(candidate)))
    engine.reset()
    engine.generate_text(ids, _settings("ar", min(first + 1, max_new_tokens)))
    top = np.sort(engine.last_logits)[-2:]
    return {"first_difference": first, "top2_logit_gap": float(top[1] - top[0])}


def bench_speculative(engine: Engine, reps: int, new_tokens: int, k: int) -> dict:
    ids = _chat_ids(engine, REWRITE_PROMPT)
    drafters = ["lookup"] + (["model"] if engine.draft is not None else [])
    speedups: dict[str, list] = {name: [] for name in drafters}
    acceptance: dict[str, list] = {name: [] for name in drafters}
    divergences = {}
    for _ in range(reps):
        ar = _ours(engine, ids, _settings("ar", new_tokens))
        for drafter in drafters:
            decoding = Decoding.DRAFT_MODEL if drafter == "model" else Decoding.PROMPT_LOOKUP
            spec = _ours(engine, ids, _settings(decoding, new_tokens, k=k))
            speedups[drafter].append(spec.decode_tokens_per_s / ar.decode_tokens_per_s)
            acceptance[drafter].append(spec.acceptance_rate or 0.0)
            if drafter not in divergences:
                divergences[drafter] = _near_tie_gap(engine, ids, ar.token_ids, spec.token_ids, new_tokens)
    return {
        "new_tokens": new_tokens,
        "k": k,
        **{f"{name}_speedup": statistics.median(values) for name, values in speedups.items()},
        **{f"{name}_acceptance": statistics.median(values) for name, values in acceptance.items()},
        **{f"{name}_divergence_from_ar": value for name, value in divergences.items()},
    }


def bench_roll(engine: Engine, reps: int, cached: int = 1024, n_keep: int = 4) -> dict:
    """One attention-sink roll vs re-prefilling the kept tokens, on a KV cache of the engine's target model."""
    rng = np.random.default_rng(0)
    n_discard = (cached - n_keep) // 2
    target = engine.target
    cache = KVCache(target.compiled, target.rope, window=target.sliding_window)
    roll_ms, prefill_ms = [], []
    for _ in range(reps):
        tokens = [int(t) for t in rng.integers(100, 40000, cached)]
        cache.reset()
        cache.forward(tokens)
        start = time.perf_counter()
        cache.roll(n_keep, n_discard)
        roll_ms.append((time.perf_counter() - start) * 1e3)
        kept = list(cache.tokens)
        cache.reset()
        start = time.perf_counter()
        cache.forward(kept, last_only=True)
        prefill_ms.append((time.perf_counter() - start) * 1e3)
    cache.reset()
    roll, prefill = statistics.median(roll_ms), statistics.median(prefill_ms)
    return {"cached_tokens": cached, "kept_tokens": cached - n_discard, "roll_ms": roll, "reprefill_ms": prefill, "ratio": prefill / roll}


def bench_step_overhead(target_dir: Path, reps: int, k: int) -> dict:
    """Median engine time per speculative step outside the model passes, at two cache lengths.

    The draft is the target itself, so every draft token is accepted (up to near-ties) and each step has the
    same shape (K drafted, K+1 emitted) at both cache lengths. Overhead = ``step_ms - draft_ms - verify_ms``:
    acceptance, KV-cache rollback and draft-cache sync, sampling, detokenization, event emission.
    """
    engine = Engine.load(target_dir, "CPU", target_dir)
    words = engine.target.encode((PARAGRAPH + " ") * 40)
    out = {}
    for cached in (200, 2000):
        ids = _chat_ids(engine, engine.target.tokenizer.decode(words[: cached - 40]) + "\n\nSummarize.")
        overheads = []
        for _ in range(reps):
            engine.reset()
            for event in engine.generate(ids, _settings(Decoding.DRAFT_MODEL, 64, k=k)):
                if isinstance(event, StepStats) and event.drafted == event.accepted == k:
                    overheads.append(event.step_ms - event.draft_ms - event.verify_ms)
        out[f"cached_tokens_{cached}"] = len(ids)
        out[f"steps_{cached}"] = len(overheads)
        out[f"overhead_ms_per_step_{cached}"] = statistics.median(overheads)
    out["ratio_2000_vs_200"] = out["overhead_ms_per_step_2000"] / out["overhead_ms_per_step_200"]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    target_dir = ensure_default_model(4, progress=lambda m: print(m, file=sys.stderr))
    draft_dir = ensure_default_model(8, progress=lambda m: print(m, file=sys.stderr))
    engine = Engine.load(target_dir, "CPU", draft_dir)
    results = {
        "autoregressive_vs_openvino_genai": bench_ar_vs_genai(engine, target_dir, args.reps, args.new_tokens),
        "speculative_vs_autoregressive_rewrite": bench_speculative(engine, args.reps, args.new_tokens, args.k),
        "roll_vs_reprefill": bench_roll(engine, args.reps),
        "speculative_step_overhead": bench_step_overhead(target_dir, args.reps, args.k),
    }
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
