"""Where a decode step of the default model goes on this CPU: time per node type with the kernel OpenVINO chose,
and the distribution of the weight products (FullyConnected) calls, with and without the engine's fusion.

    .venv/bin/python bench/fc_profile.py --out bench/results/CPU-KIND     # about 2 minutes on 2 quiet cores

Both graphs are the IR the engine loads (hidden states exposed, logits of the last positions only; ``load_model``),
compiled with SpecChat's exact default (f32, f32 KV cache, no dynamic quantization) and ``PERF_COUNT``: "fused" as
the engine runs it (``inference.fusion``: q/k/v and gate/up as one product each), "unfused" as exported. Each is
driven through the engine's ``KVCache``: a 32-token prompt, then ``--steps`` one-token decode steps (the first
``WARM_UP_STEPS`` not counted), a verification pass over 2 and 4 tokens, and a 1,024-token prefill. The two graphs
take turns in ``--rounds`` rounds; wall times are medians over rounds, node times their means.

The kernels of an AVX2-only CPU can be had on a CPU with AVX-512: ``ONEDNN_MAX_CPU_ISA=AVX2`` before the command
caps what OpenVINO's CPU plugin picks (``brgemm_avx2_f32`` for the weight products, ``jit_avx2_f32`` elementwise;
checked with OpenVINO 2026.4 on a Xeon with AMX); the report's header says so. It reproduces the kernels, not the
AVX2 machine's caches and memory bandwidth: compare ratios.

Run it on a quiet machine (pause your own background jobs with ``kill -STOP``: OpenVINO's per-node barriers make
any load show up as slower nodes). Writes ``OUT/fc_profile.json`` and ``OUT/FC_PROFILE.md``.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp, write_result  # noqa: E402

from inference.devices import base_properties, core  # noqa: E402
from inference.fusion import fuse_shared_input_products  # noqa: E402
from inference.kv_cache import KVCache  # noqa: E402
from inference.model import HIDDEN_STATES, _compute_only_last_logits, _expose_hidden_states  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.rope import RopeParameters  # noqa: E402

WARM_UP_STEPS = 5
PROMPT = 32
LONG_PROMPT = 1024
FC_TYPES = ("FullyConnected", "FullyConnectedCompressed")


def compiled_graph(folder: Path, fused: bool):
    """The engine's graph of ``folder`` (fused or as exported), compiled exactly with PERF_COUNT."""
    model = core().read_model(folder / "openvino_model.xml")
    if fused:
        fuse_shared_input_products(model)
    _expose_hidden_states(model)
    _compute_only_last_logits(model)
    properties = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU"), "PERF_COUNT": True}
    return core().compile_model(model, "CPU", properties)


def _ms(function) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) * 1e3


def _node_totals(cache: KVCache, runs: int) -> dict[str, tuple[str, float]]:
    """Each executed node's total time in us over the request's ``runs`` inferences so far, with its type.

    OpenVINO's CPU plugin reports each node's mean time over every inference of the request (its first, slow ones
    included), so a step's own times are differences of ``mean x runs`` (checked: consecutive decode steps give the
    same ~10 ms of node time while the reported means fall from 42 to 19 ms)."""
    return {
        info.node_name: (f"{info.node_type} ({info.exec_type})", info.real_time.total_seconds() * 1e6 * runs)
        for info in cache.request.get_profiling_info() if info.status == info.Status.EXECUTED
    }


def profile_round(cache: KVCache, runs: list[int], tokens: list[int], steps: int) -> dict:
    """One round: decode wall times, each node's time per counted step, FC call times, verify and prefill walls.
    ``runs[0]`` counts the inferences of ``cache``'s request (every ``KVCache._infer``), kept up to date here."""
    cache.reset()
    cache.forward(tokens[:PROMPT], last_only=True)
    walls, before = [], {}
    for index, token in enumerate(tokens[PROMPT : PROMPT + steps]):
        if index == WARM_UP_STEPS:
            before = _node_totals(cache, runs[0])
        walls.append(_ms(lambda t=token: cache.forward([t], last_only=True)))
    after = _node_totals(cache, runs[0])
    counted = steps - WARM_UP_STEPS
    by_node, fc_calls = collections.defaultdict(float), []
    for name, (kind, total) in after.items():
        us = (total - before.get(name, (kind, 0.0))[1]) / counted
        by_node[kind] += us
        if kind.split(" ")[0] in FC_TYPES:
            fc_calls.append(us)
    length = len(cache)
    verify = {}
    for n in (2, 4):
        verify[n] = _ms(lambda n=n: cache.forward(tokens[PROMPT : PROMPT + n]))
        cache.truncate(length)
    cache.reset()
    prefill = _ms(lambda: cache.forward(tokens[:LONG_PROMPT], last_only=True))
    decode = statistics.median(walls[WARM_UP_STEPS:])
    return {"decode_ms": decode, "verify_2": verify[2] / decode, "verify_4": verify[4] / decode, "prefill_ms": prefill,
            "nodes_us": dict(by_node), "fc_calls_us": fc_calls}


def counted_cache(compiled, rope) -> tuple[KVCache, list[int]]:
    """A KVCache on ``compiled`` and a one-element list counting its request's inferences."""
    cache, runs = KVCache(compiled, rope, kept_outputs=(HIDDEN_STATES,)), [0]
    infer = cache._infer

    def counting(*args, **kwargs):
        runs[0] += 1
        return infer(*args, **kwargs)

    cache._infer = counting
    return cache, runs


def summarize(rounds: list[dict], steps: int) -> dict:
    """Medians of the walls, means of the node times, and the distribution of the FC calls' per-step times."""
    calls = np.array([us for r in rounds for us in r["fc_calls_us"]])
    nodes = collections.defaultdict(float)
    for r in rounds:
        for name, us in r["nodes_us"].items():
            nodes[name] += us / len(rounds)
    return {
        **{key: statistics.median(r[key] for r in rounds) for key in ("decode_ms", "verify_2", "verify_4", "prefill_ms")},
        "nodes_ms": {name: us / 1e3 for name, us in sorted(nodes.items(), key=lambda kv: -kv[1])},
        "fc_calls_per_step": len(calls) / len(rounds),
        "fc_call_us": dict(zip(("min", "p25", "median", "p90", "max"), np.percentile(calls, [0, 25, 50, 90, 100]).tolist())),
    }


def markdown(results: dict) -> str:
    fused, unfused = results["table"]["fused"], results["table"]["unfused"]
    lines = [
        "# Where a decode step goes (default model, one token after a 32-token prompt)", "",
        f"- Machine: {results['machine']}", f"- Command: `{results['command']}` at commit {results['commit']}, "
        f"finished {results['finished']} after {results['minutes']} min; {results['rounds']} rounds, "
        f"{results['steps'] - WARM_UP_STEPS} counted steps each.",
        "- SpecChat's exact default (f32, f32 KV cache, no dynamic quantization), 2 threads, `PERF_COUNT`. *fused*: q/k/v "
        "and gate/up as one product each (`inference/fusion.py`, what the engine runs); *unfused*: as exported.", "",
        "| graph | decode ms | verify 2 / 4 tokens (x one step) | prefill 1,024 ms | FC calls a step | FC call us: min / p25 / median / p90 / max |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in results["table"].items():
        q = row["fc_call_us"]
        lines.append(
            f"| {name} | {row['decode_ms']:.2f} | {row['verify_2']:.2f} / {row['verify_4']:.2f} | {row['prefill_ms']:.0f} | "
            f"{row['fc_calls_per_step']:.0f} | {q['min']:.0f} / {q['p25']:.0f} / {q['median']:.0f} / {q['p90']:.0f} / {q['max']:.0f} |")
    lines += ["", f"Fusion: decode {unfused['decode_ms'] / fused['decode_ms']:.2f}x, prefill "
              f"{unfused['prefill_ms'] / fused['prefill_ms']:.2f}x (> 1: the fused graph is faster).", "",
              "Time per node type in a decode step, with the kernel OpenVINO chose (ms; what the wall time has beyond "
              "their sum is the inference call itself: setting inputs, reading outputs, the engine's Python):", "", "| node (kernel) | fused | unfused |", "| --- | --- | --- |"]
    for name in list(fused["nodes_ms"])[:12]:
        lines.append(f"| {name} | {fused['nodes_ms'][name]:.2f} | {unfused['nodes_ms'].get(name, 0.0):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    started = time.time()
    folder = ensure_default_model(4)
    rope = RopeParameters.from_model_dir(folder)
    caches = {name: counted_cache(compiled_graph(folder, name == "fused"), rope) for name in ("fused", "unfused")}
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(100, 49_000, LONG_PROMPT + args.steps + PROMPT)]
    rounds: dict[str, list[dict]] = {name: [] for name in caches}
    for index in range(args.rounds):
        for name in (list(caches) if index % 2 == 0 else list(caches)[::-1]):
            rounds[name].append(profile_round(*caches[name], tokens, args.steps))
        print(f"round {index + 1}/{args.rounds}", file=sys.stderr, flush=True)
    results = {**run_stamp("fc_profile.py", argv, started), "rounds": args.rounds, "steps": args.steps,
               "table": {name: summarize(r, args.steps) for name, r in rounds.items()}}
    write_result(args.out, "fc_profile", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
