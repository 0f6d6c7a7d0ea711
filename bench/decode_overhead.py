"""Where a decode step's time goes, and what a prompt longer than n_ctx costs before its first token.

    .venv/bin/python bench/decode_overhead.py            # 3 repetitions (about 3 minutes on 2 cores)

1. **The step split**: autoregressive greedy replies of 128 tokens to three everyday questions on the default
   model (4-bit, exact precision); each decode step's wall time is split into the model pass (``KVCache._infer``:
   the input tensors, ``infer()`` and the copy of the last logits row) and everything else (penalties, sampling,
   detokenization, events, bookkeeping), in ms per token; medians over repetitions.
2. **A prompt of 10 x n_ctx** (n_ctx = 1,024; Genesis, KJV): TTFT against a prompt of n_ctx tokens, and how much of
   it the model's prefill passes take (the rest is the engine's own work), with the prompt's
   middle cut before the prefill (the default, ``Engine.generate``) and rolled through as before
   (``roll_long_prompt=True``); medians over repetitions, each from an empty cache, side by side in one run.

Writes ``bench/results/decode_overhead.json`` and ``bench/results/DECODE_OVERHEAD.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp  # noqa: E402

from inference.engine import Engine  # noqa: E402
from inference.events import Finished  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.model import load_model  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings  # noqa: E402

QUESTIONS = ("Give me three tips for better sleep.", "How do plants make food?", "Write a short poem about rain.")
N_CTX = 1024
GENESIS = HERE / "data" / "kjv_genesis.txt"


def chat(engine: Engine, text: str) -> list[int]:
    """Token ids of a one-message chat in the model's template."""
    rendered = engine.target.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return engine.target.encode(rendered)


@contextmanager
def model_passes() -> Iterator[list[float]]:
    """Within the block, every model pass (``KVCache._infer``) appends its wall time in seconds to the yielded list."""
    inside: list[float] = []
    original = KVCache._infer

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            inside.append(time.perf_counter() - start)

    KVCache._infer = timed
    try:
        yield inside
    finally:
        KVCache._infer = original


def step_split(engine: Engine) -> dict:
    """Decode ms per token inside the model pass and outside it, over the replies to QUESTIONS."""
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0, max_new_tokens=128, ignore_eos=True))
    decode_s, passes_s, tokens = 0.0, 0.0, 0
    with model_passes() as inside:
        for question in QUESTIONS:
            engine.reset()
            ids = chat(engine, question)
            inside.clear()
            stats = next(e for e in engine.generate(ids, settings) if isinstance(e, Finished)).stats
            decode_passes = inside[-(stats.new_tokens - 1):]  # the prefill's passes come first
            decode_s += (stats.new_tokens - 1) / stats.decode_tokens_per_s
            passes_s += sum(decode_passes)
            tokens += stats.new_tokens - 1
    return {"step_ms": 1e3 * decode_s / tokens, "pass_ms": 1e3 * passes_s / tokens, "outside_ms": 1e3 * (decode_s - passes_s) / tokens}


def ttft_ms(engine: Engine, ids: list[int], roll: bool) -> tuple[float, int, float]:
    """The TTFT of ``ids`` from an empty cache, how many of its tokens the context kept, and the milliseconds of it
    spent inside the model's passes (``KVCache._infer``, as in the step split; the rest is the engine's own work:
    the cut or the rolls, the fast-prefill hand-over, sampling the first token, detokenizing it)."""
    engine.reset()
    settings = GenerationSettings(
        sampling=SamplingSettings(temperature=0.0, max_new_tokens=1), context=ContextSettings(n_ctx=N_CTX)
    ).with_decoding(Decoding.AUTOREGRESSIVE)
    with model_passes() as inside:
        stats = next(e for e in engine.generate(ids, settings, roll_long_prompt=roll) if isinstance(e, Finished)).stats
    return stats.ttft_ms, len(ids) - stats.discarded_tokens, 1e3 * sum(inside)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    started = time.time()
    engine = Engine(load_model(ensure_default_model(4), "CPU", PrecisionSettings()))
    text = GENESIS.read_text(encoding="utf-8")
    long_ids = chat(engine, "Summarize:\n\n" + text)
    long_ids = long_ids[: 10 * N_CTX - 8] + long_ids[-8:]
    fits = long_ids[: N_CTX - 8] + long_ids[-8:]
    cases = {"n_ctx prompt": (fits, False), "10 x n_ctx, middle cut": (long_ids, False), "10 x n_ctx, rolled through": (long_ids, True)}
    splits, ttfts, passes, kept = [], {key: [] for key in cases}, {key: [] for key in cases}, {}
    for rep in range(args.reps):
        splits.append(step_split(engine))
        for key, (ids, roll) in cases.items():
            ms, kept[key], in_passes = ttft_ms(engine, ids, roll)
            ttfts[key].append(ms)
            passes[key].append(in_passes)
        print(f"rep {rep + 1}: {splits[-1]} {[round(v[-1]) for v in ttfts.values()]}", flush=True)
    split = {key: statistics.median(s[key] for s in splits) for key in splits[0]}
    ttft = {key: statistics.median(values) for key, values in ttfts.items()}
    in_passes = {key: statistics.median(values) for key, values in passes.items()}
    result = {
        **run_stamp("decode_overhead.py", argv, started), "reps": args.reps,
        "step_split_ms_per_token": split, "ttft_ms": ttft, "ttft_in_model_passes_ms": in_passes, "kept_tokens": kept,
        "prompt_tokens": {key: len(ids) for key, (ids, _) in cases.items()},
        "precision": engine.target.precision.describe(),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    base = ttft["n_ctx prompt"]
    lines = [
        "# Decode step split and long-prompt TTFT", "",
        f"- Machine: {result['machine']}; precision {result['precision']}",
        f"- Command: `{result['command']}` at commit {result['commit']} ({result['minutes']:.1f} min); medians of {args.reps}",
        "", "| decode step (ms per token) | model pass | outside the pass |", "| --- | --- | --- |",
        f"| {split['step_ms']:.2f} | {split['pass_ms']:.2f} | {split['outside_ms']:.2f} |",
        "", f"| prompt (n_ctx = {N_CTX}) | tokens | kept by the context | TTFT (ms) | in the model's passes (ms) | vs an n_ctx prompt |",
        "| --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for key, value in ttft.items():
        lines.append(f"| {key} | {result['prompt_tokens'][key]} | {kept[key]} | {value:.0f} | {in_passes[key]:.0f} | "
                     f"{value / base:.2f}x |")
    lines += ["", "Rolling keeps the first n_keep tokens and drops whole rolls of n_discard (half of what follows them), so "
              "a long prompt keeps between half of n_ctx and all of it; the cut keeps exactly those tokens."]  # fmt: skip
    (args.out / "DECODE_OVERHEAD.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
