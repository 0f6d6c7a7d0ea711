"""SpecChat's CPU kernels against OpenVINO's through the engine: plain (autoregressive) decoding tokens/s and the time
to first token of a ~1,024-token prompt, both models loaded in one process at the default exact precision and taking
turns (``inference.q4_kernels``; OpenVINO's with ``SPECCHAT_KERNELS=openvino``).

    .venv/bin/python bench/kernel_speed.py [--rounds 3] [--new-tokens 64] [--fast-prefill auto|off]

Decode: a short chat prompt, ``--new-tokens`` greedy tokens, the engine's ``decode_tokens_per_s``. TTFT: a prompt of
1,024 token ids (fixed, seeded) prefilled from an empty cache; ``--fast-prefill off`` (the default here) prefills it
with the model itself in f32, as on a CPU without bf16 (where OpenVINO's kernels or SpecChat's then do the prefill),
``auto`` by the bf16 copy where the CPU has one (OpenVINO's kernels either way). Medians over ``--rounds``, each round
running both models in alternating order. Prints a Markdown table; ``--json PATH`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference.engine import Engine  # noqa: E402
from inference.model import load_model  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.q4_kernels import SWITCH  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings  # noqa: E402

PROMPT = "Write a short story about a robot who learns to paint."


def load(kernels: str, fast_prefill: str) -> Engine:
    """An engine on the default 4-bit model with ``kernels`` ("specchat" or "openvino"), 2 threads."""
    previous = os.environ.pop(SWITCH, None)
    if kernels == "openvino":
        os.environ[SWITCH] = "openvino"
    try:
        started = time.perf_counter()
        target = load_model(ensure_default_model(4), "CPU", PrecisionSettings(fast_prefill=fast_prefill), num_threads=2)
        print(f"{kernels}: loaded in {time.perf_counter() - started:.1f} s, {target.precision.describe()}", file=sys.stderr)
    finally:
        os.environ.pop(SWITCH, None)
        if previous is not None:
            os.environ[SWITCH] = previous
    if (kernels == "specchat") != target.kernels.ours:
        raise SystemExit(f"asked for {kernels} kernels, got {target.kernels.describe()}")
    return Engine(target, None)


def settings(new_tokens: int) -> GenerationSettings:
    return GenerationSettings(decoding=Decoding("ar"), sampling=SamplingSettings(max_new_tokens=new_tokens),
                              context=ContextSettings(n_ctx=4096))


def measure(engine: Engine, chat: list[int], long_prompt: list[int], new_tokens: int) -> dict:
    """Decode tokens/s after ``chat``, and TTFT (ms) of ``long_prompt`` (2 new tokens), each from an empty cache."""
    engine.reset()
    decode = engine.generate_text(chat, settings(new_tokens))
    engine.reset()
    prefill = engine.generate_text(long_prompt, settings(2))
    return {"decode_tokens_per_s": decode.decode_tokens_per_s, "ttft_1024_ms": prefill.ttft_ms,
            "tokens": decode.token_ids}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--fast-prefill", choices=("auto", "off"), default="off")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    engines = {name: load(name, args.fast_prefill) for name in ("openvino", "specchat")}
    target = engines["openvino"].target
    chat = target.encode(target.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                                              add_generation_prompt=True))
    long_prompt = [int(t) for t in np.random.default_rng(0).integers(100, 49_000, 1024)]
    for engine in engines.values():  # warm-up: OpenVINO's one-time work
        measure(engine, chat, long_prompt[:128], 8)
    rounds: dict[str, list[dict]] = {name: [] for name in engines}
    for index in range(args.rounds):
        for name in list(engines)[index % 2:] + list(engines)[: index % 2]:
            rounds[name].append(measure(engines[name], chat, long_prompt, args.new_tokens))
    result = {name: {key: statistics.median(r[key] for r in rs) for key in ("decode_tokens_per_s", "ttft_1024_ms")}
              for name, rs in rounds.items()}
    same = all(r["tokens"] == rounds["openvino"][0]["tokens"] for rs in rounds.values() for r in rs)
    ours, theirs = result["specchat"], result["openvino"]
    print(f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}, fast prefill {args.fast_prefill}, "
          f"{args.rounds} rounds, medians; greedy tokens identical: {same}\n")
    print("| kernels | decode tokens/s | TTFT at 1,024 tokens, ms |\n| --- | --- | --- |")
    print(f"| OpenVINO's | {theirs['decode_tokens_per_s']:.1f} | {theirs['ttft_1024_ms']:.0f} |")
    print(f"| SpecChat's | {ours['decode_tokens_per_s']:.1f} ({ours['decode_tokens_per_s'] / theirs['decode_tokens_per_s']:.2f}x)"
          f" | {ours['ttft_1024_ms']:.0f} ({ours['ttft_1024_ms'] / theirs['ttft_1024_ms']:.2f}x) |")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "result": result,
                                         "greedy_identical": same,
                                         "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
