"""What a decode step costs per cached token: SpecChat and openvino-genai side by side, by prompt length.

    .venv/bin/python bench/context_cost.py --out DIR     # about 3 minutes on 2 cores

Each engine decodes 65 greedy tokens (EOS ignored) after prompts of 32 to 2,048 tokens; the time per output token
from the second decode step on (TPOT, from the streamed tokens' times; the first decode step also pays SpecChat's
fast-prefill hand-over, which the speed benchmark counts) is fitted with a line: its intercept is the step without a cache (weights and
fixed work), its slope the cost of attention per 1,000 cached tokens. Each engine runs in a worker process of its
own (engines loaded side by side in one process slow each other down), the engines taking turns, every prompt length
in every round (medians of ``--reps`` rounds). Rows: SpecChat's exact default (f32 KV cache), SpecChat with
OpenVINO's u8 KV cache (4x fewer KV bytes, inexact), openvino-genai (u8 KV cache, paged attention). The KV bytes a
step reads at 1,000 cached tokens, over the machine's copy bandwidth (``physical_limits``), give the slope the memory
traffic alone would cost, so the table says how much of each engine's slope is bytes and how much is its kernel.

Writes ``DIR/context_cost.json`` and ``DIR/CONTEXT_COST.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import physical_limits  # noqa: E402
import speed  # noqa: E402
from provenance import run_stamp, write_result  # noqa: E402

PROMPT_TOKENS = (32, 512, 1024, 2048)
NEW_TOKENS = 65
#: Bytes per element of each KV precision.
KV_BYTES = {"f32": 4, "u8": 1}


class SpecChatU8Runner(speed.SpecChatRunner):
    """SpecChat's engine with OpenVINO's u8 KV cache (and otherwise its exact settings)."""

    precision_fields = {"kv_cache": "u8"}


ROWS = {
    "SpecChat (exact, KV f32)": (speed.SpecChatRunner, "f32"),
    "SpecChat (KV u8, inexact)": (SpecChatU8Runner, "u8"),
    "openvino-genai (KV u8)": (speed.GenaiRunner, "u8"),
}


def fit(lengths: list[int], tpot_ms: list[float]) -> tuple[float, float]:
    """Least-squares line through (cached tokens, TPOT ms): (intercept ms, slope ms per 1,000 cached tokens).

    The cached length of a point is its prompt plus half the reply (the mean over its decode steps)."""
    x = np.asarray(lengths, dtype=np.float64) + NEW_TOKENS / 2
    slope, intercept = np.polyfit(x / 1000, np.asarray(tpot_ms, dtype=np.float64), 1)
    return float(intercept), float(slope)


def chatml_prompt(target_dir: str, total: int) -> list[int]:
    """Token ids of a ChatML prompt of exactly ``total`` tokens: "Summarize:" and the start of Genesis (KJV), as the
    speed benchmark's long workloads (``speed.exact_prompt_encoder``)."""
    genesis = (HERE / "data" / "kjv_genesis.txt").read_text(encoding="utf-8")
    return speed.exact_prompt_encoder(target_dir)("Summarize:\n\n" + genesis[: 16 * total], total)


def kv_bytes_per_token(config: dict, precision: str) -> int:
    """Bytes of keys and values one cached token holds across all layers."""
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * KV_BYTES[precision]


def run_worker(row: str, paths: dict, prompts: dict[int, list[int]]) -> dict[int, float]:
    """TPOT ms after each prompt length for one engine row, measured in a fresh worker process."""
    job = json.dumps({"row": row, "paths": paths, "prompts": {str(n): ids for n, ids in prompts.items()}})
    done = subprocess.run([sys.executable, __file__, "--worker"], input=job, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{row}: worker failed: {done.stderr[-2000:]}")
    return {int(n): ms for n, ms in json.loads(done.stdout.splitlines()[-1]).items()}


def worker() -> int:
    """Read a job from stdin, load its engine, warm it up, print {prompt tokens: TPOT ms} as JSON."""
    job = json.loads(sys.stdin.read())
    runner = ROWS[job["row"]][0](job["paths"], "ar")
    prompts = {int(n): ids for n, ids in job["prompts"].items()}
    runner.run(prompts[min(prompts)], 8)  # first-call allocations
    print(json.dumps({n: runner.run(ids, NEW_TOKENS)["steady_tpot_ms"] for n, ids in prompts.items()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker()
    started = time.time()
    paths = speed._model_paths()
    prompts = {n: chatml_prompt(paths["target"], n) for n in PROMPT_TOKENS}
    tpot: dict[str, dict[int, list[float]]] = {name: {n: [] for n in PROMPT_TOKENS} for name in ROWS}
    for rep in range(args.reps):
        for name in ROWS:
            measured = run_worker(name, paths, prompts)
            for n in PROMPT_TOKENS:
                tpot[name][n].append(measured[n])
        print(f"round {rep + 1}: " + "; ".join(f"{name} {[round(tpot[name][n][-1], 2) for n in PROMPT_TOKENS]}"
                                              for name in ROWS), flush=True)  # fmt: skip
    config = json.loads((Path(paths["target"]) / "config.json").read_text())
    bandwidth = physical_limits.copy_bandwidth()["best"]
    rows = {}
    for name, (_, precision) in ROWS.items():
        medians = [statistics.median(tpot[name][n]) for n in PROMPT_TOKENS]
        intercept, slope = fit(list(PROMPT_TOKENS), medians)
        traffic = kv_bytes_per_token(config, precision) * 1000 / (bandwidth * 1e9) * 1e3  # ms per 1,000 tokens
        rows[name] = {"kv": precision, "tpot_ms": dict(zip(PROMPT_TOKENS, medians)), "intercept_ms": intercept,
                      "slope_ms_per_1k": slope, "kv_traffic_ms_per_1k": traffic}  # fmt: skip
    result = {**run_stamp("context_cost.py", argv, started), "reps": args.reps, "new_tokens": NEW_TOKENS,
              "copy_bandwidth_gbs": bandwidth, "rows": rows}  # fmt: skip
    header = " | ".join(f"TPOT after {n:,} (ms)" for n in PROMPT_TOKENS)
    lines = [
        "# What a decode step costs per cached token", "",
        f"- Machine: {result['machine']}", f"- Command: `{result['command']}` at commit {result['commit']} "
        f"({result['minutes']:.1f} min); medians of {args.reps} rounds, each engine in its own worker, taking turns",
        f"- Copy bandwidth {bandwidth:.1f} GB/s; 'KV traffic' = the bytes of 1,000 cached tokens over it.", "",
        f"| engine | KV | {header} | step without cache (ms) | per 1,000 cached tokens (ms) | KV traffic (ms) |",
        "| --- | --- | " + " | ".join("---" for _ in PROMPT_TOKENS) + " | --- | --- | --- |",
    ]  # fmt: skip
    for name, row in rows.items():
        cells = " | ".join(f"{row['tpot_ms'][n]:.2f}" for n in PROMPT_TOKENS)
        lines.append(f"| {name} | {row['kv']} | {cells} | {row['intercept_ms']:.2f} | {row['slope_ms_per_1k']:.2f} | "
                     f"{row['kv_traffic_ms_per_1k']:.2f} |")  # fmt: skip
    write_result(args.out, "context_cost", result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
