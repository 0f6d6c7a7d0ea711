"""What a fused head's extra target outputs cost a one-token target pass (issue 34, item 3).

    .venv/bin/python -m tools.draft_head.fused_cost --model MODEL_DIR [--layers 1 14] [--rounds 20]

Two compiled copies of the target, as ``inference.model.load_model`` compiles it for a draft head (fused weight
products, the hidden-state output the head reads, logits of the last positions only, the app's compile properties),
one of them with a fused head's layer features too (its ``feature_layers``: the RMS-normalized outputs of
``--layers``, float32 ``[1, S, len(layers), hidden]``). Each round resets both, prefills ``--context`` tokens and times
``--steps`` one-token passes (wall time of ``infer``, milliseconds), the two copies alternating first; the report is
the per-round median pass time of each and the median of the per-round ratios (with features / without). Pause
other work on the machine while it runs: a busy core moves the ratio more than the outputs do.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def compile_target(folder: Path, layers: tuple[int, ...], threads: int | None):
    """An inference request of the target compiled as the app compiles it for a draft head reading ``layers``
    (``inference.model.load_model``: its fused weight products, the hidden-state output, the layer features when
    ``layers``; the exact default precision, without the fast-prefill copy)."""
    from inference.model import load_model
    from inference.precision import PrecisionSettings

    model = load_model(folder, "CPU", PrecisionSettings(fast_prefill="off"), threads, feature_layers=layers)
    return model.compiled.create_infer_request()


def one_round(request, context: int, steps: int) -> float:
    """Median wall time (ms) of ``steps`` one-token passes after a ``context``-token prefill."""
    request.reset_state()
    ids = (np.arange(context, dtype=np.int64) * 37 + 11) % 20000 + 100  # fixed ordinary token ids
    request.infer({"input_ids": ids[None], "attention_mask": np.ones((1, context), dtype=np.int64),
                   "position_ids": np.arange(context, dtype=np.int64)[None], "beam_idx": np.zeros(1, dtype=np.int32),
                   "logits_to_keep": np.ones(1, dtype=np.int64)})
    times = []
    for step in range(steps):
        position = context + step
        inputs = {"input_ids": np.asarray([[100 + step * 13 % 5000]], dtype=np.int64),
                  "attention_mask": np.ones((1, position + 1), dtype=np.int64),
                  "position_ids": np.asarray([[position]], dtype=np.int64), "beam_idx": np.zeros(1, dtype=np.int32),
                  "logits_to_keep": np.ones(1, dtype=np.int64)}
        started = time.perf_counter()
        request.infer(inputs)
        times.append((time.perf_counter() - started) * 1000)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="target model folder")
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 14])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=48, help="one-token passes timed per round")
    parser.add_argument("--context", type=int, default=128, help="tokens prefilled before them")
    parser.add_argument("--threads", type=int, help="INFERENCE_NUM_THREADS (default: the app's, every core)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    plain = compile_target(args.model, (), args.threads)
    fused = compile_target(args.model, tuple(args.layers), args.threads)
    one_round(plain, args.context, 8), one_round(fused, args.context, 8)  # warm-up
    without, with_features = [], []
    for round_index in range(args.rounds):
        order = ((plain, without), (fused, with_features))
        for request, times in order if round_index % 2 == 0 else order[::-1]:
            times.append(one_round(request, args.context, args.steps))
    ratios = np.asarray(with_features) / np.asarray(without)
    result = {
        "model": str(args.model), "layers": args.layers, "rounds": args.rounds, "steps": args.steps,
        "context": args.context, "threads": args.threads,
        "one_token_ms_without": round(float(np.median(without)), 3),
        "one_token_ms_with_features": round(float(np.median(with_features)), 3),
        "ratio_median": round(float(np.median(ratios)), 4),
        "ratio_quartiles": [round(float(q), 4) for q in np.quantile(ratios, [0.25, 0.75])],
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
