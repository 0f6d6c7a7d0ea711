"""OpenVINO CPU settings for a 135M model at batch 1: each measured side by side against SpecChat's default.

    .venv/bin/python bench/openvino_settings.py             # a warm-up and 5 rounds, about 3 minutes on 2 cores

Every setting is the exact default (``PrecisionSettings()``: f32 compute, f32 KV cache, no dynamic quantization)
with one thing changed, compiled from the same IR the engine loads (hidden states exposed, logits of the last
positions only) and driven through the engine's ``KVCache``:

* **speed**: decode ms per token after a 32-token and after a 1,024-token prompt (32 steps each, median), the
  1,024-token prefill in one pass, and a verification pass over 2 and 4 tokens as a multiple of a one-token step
  (what speculative decoding pays); the settings take turns within each round, each round starting with another,
  medians over rounds. Two rows with the same properties ("pinning off" is the default's own) show the noise;
* **exactness**: the largest difference between the logits of four one-token passes and of one four-token pass over
  the same tokens (12 places in a random sequence), and how often their argmax differs. Greedy speculative output
  equals autoregressive output only where these agree (``inference/precision.py``'s design rules); the exact
  default measures ~1e-4.

Settings: dynamic quantization of activations (``DYNAMIC_QUANTIZATION_GROUP_SIZE`` 32, OpenVINO's CPU default), KV
cache in f16 or u8 (``KV_CACHE_PRECISION``), OpenVINO's own defaults, bf16 compute with the exact KV cache (only
where the CPU computes bf16 natively), one inference thread (``INFERENCE_NUM_THREADS``), and thread pinning on / off
(``ENABLE_CPU_PINNING``). ``SCHEDULING_CORE_TYPE`` only matters on CPUs with performance and efficiency cores, and
more than one stream (``NUM_STREAMS``) splits the cores between requests, so for one chat it equals one thread.

Writes ``bench/results/openvino_settings.json`` and ``bench/results/OPENVINO_SETTINGS.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp, write_result  # noqa: E402

from inference.devices import base_properties, core, device_computes  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.model import HIDDEN_STATES, load_model  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402

DECODE_STEPS = 32
LONG_PROMPT = 1024
SHORT_PROMPT = 32
VERIFY_REPEATS = 10
EXACTNESS_PLACES = 12


def settings_to_try() -> dict[str, dict]:
    """Setting name -> compile properties (the exact default with one change)."""
    exact = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU")}
    tried = {
        "exact (SpecChat's default)": exact,
        "dynamic quantization 32": {k: v for k, v in exact.items() if k != "DYNAMIC_QUANTIZATION_GROUP_SIZE"},
        "KV cache f16": {**exact, "KV_CACHE_PRECISION": "f16"},
        "KV cache u8": {**exact, "KV_CACHE_PRECISION": "u8"},
        "OpenVINO's defaults": {"PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": True},
        "1 thread": {**exact, "INFERENCE_NUM_THREADS": 1},
        "pinning on": {**exact, "ENABLE_CPU_PINNING": True},
        "pinning off": {**exact, "ENABLE_CPU_PINNING": False},
    }
    if device_computes("CPU", "bf16"):
        tried["bf16 compute, KV f32"] = {**exact, "INFERENCE_PRECISION_HINT": "bf16"}
    return tried


def _ms(function) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) * 1e3


def measure_speed(cache: KVCache, short: list[int], long: list[int], decode: list[int]) -> dict:
    """One round of one setting (see the module docstring), in ms."""
    cache.reset()
    cache.forward(short, last_only=True)
    short_steps = [_ms(lambda t=t: cache.forward([t], last_only=True)) for t in decode]
    length = len(cache)
    verify = {}
    for n in (1, 2, 4):
        times = []
        for _ in range(VERIFY_REPEATS):
            times.append(_ms(lambda: cache.forward(decode[:n])))
            cache.truncate(length)
        verify[n] = statistics.median(times)
    cache.reset()
    prefill = _ms(lambda: cache.forward(long, last_only=True))
    long_steps = [_ms(lambda t=t: cache.forward([t], last_only=True)) for t in decode]
    return {"decode_ms_short": statistics.median(short_steps[2:]), "decode_ms_long": statistics.median(long_steps[2:]),
            "prefill_ms": prefill, "verify_2": verify[2] / verify[1], "verify_4": verify[4] / verify[1]}


def measure_exactness(cache: KVCache, ids: list[int]) -> dict:
    """Largest |one-token - four-token| logit difference and argmax disagreements over ``EXACTNESS_PLACES``."""
    worst, flips = 0.0, 0
    cache.reset()
    cache.forward(ids[:64], last_only=True)
    for place in range(EXACTNESS_PLACES):
        start = 64 + 4 * place
        block = ids[start : start + 4]
        length = len(cache)
        singles = np.stack([cache.forward([t], last_only=True)[-1] for t in block])
        cache.truncate(length)
        together = cache.forward(block)
        worst = max(worst, float(np.abs(singles - together).max()))
        flips += int((singles.argmax(-1) != together.argmax(-1)).sum())
    return {"max_logit_difference": worst, "argmax_flips": flips, "compared": 4 * EXACTNESS_PLACES}


def markdown(results: dict) -> str:
    base = results["table"]["exact (SpecChat's default)"]
    lines = [
        "# OpenVINO CPU settings for the default model (batch 1)", "",
        f"- Machine: {results['machine']}", f"- Command: `{results['command']}` at commit {results['commit']}, "
        f"finished {results['finished']} after {results['minutes']} min; {results['rounds']} rounds, medians.",
        "- Each row is SpecChat's exact default with one setting changed; ratios are to the default in the same run "
        "(decode: > 1 is faster). Exactness: the largest logit difference between four one-token passes and one "
        "four-token pass, and argmax flips among the compared positions.", "",
        "| setting | decode ms (32-token prompt) | decode ms (1,024) | prefill 1,024 ms | verify 2 / 4 tokens "
        "(x one-token step) | speed vs default (32 / 1,024 / prefill) | max logit difference | argmax flips |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in results["table"].items():
        lines.append(
            f"| {name} | {row['decode_ms_short']:.2f} | {row['decode_ms_long']:.2f} | {row['prefill_ms']:.0f} | "
            f"{row['verify_2']:.2f} / {row['verify_4']:.2f} | {base['decode_ms_short'] / row['decode_ms_short']:.2f}x"
            f" / {base['decode_ms_long'] / row['decode_ms_long']:.2f}x / {base['prefill_ms'] / row['prefill_ms']:.2f}x |"
            f" {row['max_logit_difference']:.1e} | {row['argmax_flips']}/{row['compared']} |")
    lines += ["", "What each compiled model reports (compute / KV cache / dynamic quantization group / threads / "
              "pinning):", ""]
    lines += [f"- {name}: {' / '.join(props.values())}" for name, props in results["read_back"].items()]
    return "\n".join(lines) + "\n"


def _short(value) -> str:
    """``f32`` for an OpenVINO element type (``<Type: 'float32'>``), else ``str(value)``."""
    names = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "uint8_t": "u8"}
    text = str(value)
    return next((short for long, short in names.items() if f"'{long}'" in text), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    started = time.time()
    loaded = load_model(ensure_default_model(4), "CPU", PrecisionSettings(fast_prefill="off"))
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(100, loaded.vocab_size - 100, LONG_PROMPT + 200)]
    short, long, decode = tokens[:SHORT_PROMPT], tokens[:LONG_PROMPT], tokens[LONG_PROMPT : LONG_PROMPT + DECODE_STEPS]
    caches, read_back = {}, {}
    for name, properties in settings_to_try().items():
        compiled = core().compile_model(loaded.ir_model, "CPU", properties)
        caches[name] = KVCache(compiled, loaded.rope, kept_outputs=(HIDDEN_STATES,))
        read_back[name] = {key: _short(compiled.get_property(key)) for key in (
            "INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "DYNAMIC_QUANTIZATION_GROUP_SIZE",
            "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING")}
    del loaded
    rounds: dict[str, list[dict]] = {name: [] for name in caches}
    names = list(caches)
    for name in names:  # a warm-up round, not recorded: the first passes of a compiled model run slower
        measure_speed(caches[name], short, long, decode)
    for round_index in range(args.rounds):
        rotation = round_index * len(names) // args.rounds  # each round starts with another setting
        for name in names[rotation:] + names[:rotation]:
            rounds[name].append(measure_speed(caches[name], short, long, decode))
        print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr, flush=True)
    table = {}
    for name, cache in caches.items():
        table[name] = {key: statistics.median(r[key] for r in rounds[name]) for key in rounds[name][0]}
        table[name].update(measure_exactness(cache, tokens))
    results = {**run_stamp("openvino_settings.py", argv, started), "rounds": args.rounds, "table": table,
               "read_back": read_back}
    write_result(args.out, "openvino_settings", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
