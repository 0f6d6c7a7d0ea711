"""Issue 33, "Kernels": is a Q4_1 x Q8_1 weight product (``inference/kernels/q4_1_q8_1.hpp``) faster than OpenVINO's
compressed FullyConnected on the default model's shapes, and what does a custom op cost inside the CPU plugin?

    .venv/bin/python bench/q4_microbench.py --out bench/results/epyc-zen5     # ~5 minutes on 2 quiet cores

Three measurements of the same 211 products a decode step runs (30 layers x q 576x576, k and v 192x576,
o 576x576, gate and up 1536x576, down 576x1536, then the 49,152 x 576 output layer; random weights, 4-bit codes in
blocks of 32), at T = 1, 2 and 4 tokens, 2 threads:

* ``kernel``: the standalone C++ microbenchmark (``q4_kernel/q4_bench.cpp``, OpenMP), built for AVX2 and for AVX-512
  VNNI (256-bit), each product timed alone in step order (weights read from memory, as in a step);
* ``openvino``: a graph of the same products as OpenVINO's u4 compressed MatMuls (the exact Q4_1 IR's pattern:
  u4 codes, f16 zero points and scales, groups of 32), with and without ``ONEDNN_MAX_CPU_ISA=AVX2`` (an AVX2-only
  CPU's ``brgemm_avx2_f32``), each FullyConnected's time read from ``PERF_COUNT``;
* ``op``: the same graph with every product a ``Q4MatMul`` extension op (``inference/kernels/q4_matmul.cpp``, AVX2), its
  nodes' ``PERF_COUNT`` times: the difference from the standalone kernel is the plugin's cost per custom-op call;
* ``dynamic T``: OpenVINO AVX2 and the op again with the number of tokens left open in the graph, as the model's IR
  has it (every node then shaped at run time).

Each side runs ``--rounds`` times (processes taking turns); a shape's time is the median over rounds of the median
call. The step estimate is the sum over the 211 calls of those medians (robust to other work on the machine), the
measured step the median of whole steps. Writes ``OUT/q4_kernel_microbench.json`` and ``OUT/Q4_KERNEL_MICROBENCH.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp, write_result  # noqa: E402

#: (name, outputs N, inputs K, calls a step) in a layer's order; the output layer last.
LAYER = (("q", 576, 576), ("k", 192, 576), ("v", 192, 576), ("o", 576, 576), ("gate", 1536, 576), ("up", 1536, 576),
         ("down", 576, 1536))
OUTPUT = ("output", 49152, 576)
LAYERS = 30
SHAPES = {"576x576 (q, o)": 60, "192x576 (k, v)": 60, "1536x576 (gate, up)": 60, "576x1536 (down)": 30,
          "49152x576 (output)": 1}
SHAPE_OF = {"q": "576x576 (q, o)", "o": "576x576 (q, o)", "k": "192x576 (k, v)", "v": "192x576 (k, v)",
            "gate": "1536x576 (gate, up)", "up": "1536x576 (gate, up)", "down": "576x1536 (down)",
            "output": "49152x576 (output)"}
TOKENS = (1, 2, 4)
SETTINGS = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
            "INFERENCE_NUM_THREADS": "2", "PERF_COUNT": "YES"}


def synthetic_step(tokens: int, extension: Path | None, dynamic: bool = False,
                   keep: list | None = None) -> "ov.Model":  # noqa: F821
    """The step's 211 products as one graph, x ``[1, tokens, 576]`` f32 in: per layer q from h, k from h / 2, v from
    h / 4 (kept apart: the plugin fuses FullyConnecteds of one input); o from q; gate
    and up from o; down from gate * up; h + down the next h; the output layer last (k and v are outputs too). Weights
    random (seed 0), scaled to keep values near 1. ``dynamic``: x ``[1, ?, 576]``, the number of tokens left open
    as in the model's IR (the plugin then shapes every node at run time). With ``extension`` every product is a ``Q4MatMul`` (u8 codes
    ``[N, K / 2]``, f32 scales and offsets ``[N, K / 32]``, appended to ``keep``, which must then outlive the compiled
    model: ``inference.q4_kernels.product_node``); otherwise OpenVINO's compressed MatMul, friendly name ``l{layer}.{name}``."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino.utils.node_factory import NodeFactory

    from inference.q4_kernels import product_node

    factory = NodeFactory()
    if extension is not None:
        factory.add_extension(str(extension))
    rng = np.random.default_rng(0)

    def product(x, name: str, n: int, k: int, label: str):
        groups = k // 32
        packed = rng.integers(0, 256, (n, groups * 16), dtype=np.uint8)
        scale = (rng.random((n, groups)) * 0.01 + 0.005).astype(np.float32) * (576 / k) ** 0.5
        if extension is not None:
            node = product_node(factory, "Q4MatMul", x, (packed, scale, -7.5 * scale), keep)
        else:
            codes = ov.Tensor(ov.Type.u4, [n, groups, 32])
            codes.data.reshape(-1)[:] = packed.reshape(-1)
            weights = ops.multiply(ops.subtract(ops.convert(ov.op.Constant(codes), "f16"),
                                                ops.constant(np.full((n, groups, 1), 7.5, np.float16))),
                                   ops.constant(scale.astype(np.float16)[..., None]))
            weights = ops.convert(ops.reshape(weights, ops.constant(np.array([n, k], np.int64)), False), "f32")
            node = ops.matmul(x, weights, False, True)
        node.set_friendly_name(label)
        return node.output(0)

    x = ops.parameter([1, -1 if dynamic else tokens, 576], np.float32, name="x")
    h, results = x.output(0), []
    for layer in range(LAYERS):
        made = {}
        # k and v read h through their own Multiply, or the plugin would fuse q, k and v into one FullyConnected
        half, quarter = (ops.multiply(h, ops.constant(np.float32(f))).output(0) for f in (0.5, 0.25))
        for name, n, k in LAYER:
            source = {"q": h, "k": half, "v": quarter, "o": made.get("q"), "gate": made.get("o"), "up": made.get("o"),
                      "down": ops.multiply(made["gate"], made["up"]).output(0) if name == "down" else None}[name]
            made[name] = product(source, name, n, k, f"l{layer}.{name}")
        results += [made["k"], made["v"]]
        h = ops.add(h, made["down"]).output(0)
    results.insert(0, product(h, *OUTPUT, "output"))
    return ov.Model([ops.result(r) for r in results], [x])


def measure_openvino(tokens: int, steps: int, extension: Path | None, dynamic: bool = False) -> dict:
    """Compile the synthetic step (``SETTINGS``, 2 threads) and run it ``steps`` times after one warm-up: per shape the
    median node time (ms, ``PERF_COUNT``), its kernel names, the median step (ms, wall) and the summed node times."""
    import openvino as ov

    core = ov.Core()
    if extension is not None:
        core.add_extension(str(extension))
    keep: list[np.ndarray] = []  # the ops' weights, alive as long as the request
    request = core.compile_model(synthetic_step(tokens, extension, dynamic, keep), "CPU", SETTINGS).create_infer_request()
    feed = np.random.default_rng(1).standard_normal((1, tokens, 576)).astype(np.float32)
    request.infer({0: feed})
    calls: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    kernels: dict[str, set[str]] = {shape: set() for shape in SHAPES}
    walls, others = [], []
    for _ in range(steps):
        start = time.perf_counter()
        request.infer({0: feed})
        walls.append((time.perf_counter() - start) * 1e3)
        other = 0.0
        for info in request.profiling_info:
            ms = info.real_time.total_seconds() * 1e3
            name = info.node_name.split(".")[-1] if info.node_name.startswith("l") else info.node_name
            if name in SHAPE_OF:
                calls[SHAPE_OF[name]].append(ms)
                kernels[SHAPE_OF[name]].add(f"{info.node_type}:{info.exec_type}")
            elif info.status == info.Status.EXECUTED:
                other += ms
        others.append(other)
    missing = [shape for shape, times in calls.items() if len(times) != steps * SHAPES[shape]]
    if missing:
        raise RuntimeError(f"PERF_COUNT did not report every product of {missing}")
    return {"calls_ms": {shape: statistics.median(times) for shape, times in calls.items()},
            "kernels": {shape: sorted(names) for shape, names in kernels.items()},
            "step_ms": statistics.median(walls), "other_nodes_ms": statistics.median(others)}


def _worker(args: argparse.Namespace) -> int:
    extension = Path(args.extension) if args.extension else None
    print(json.dumps({str(t): measure_openvino(t, args.steps, extension, args.dynamic) for t in TOKENS}))
    return 0


def _run_json(command: list[str], env: dict | None = None) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def estimate(calls_ms: dict[str, float]) -> float:
    """A step's products, ms: each shape's median call times its calls a step."""
    return sum(calls_ms[shape] * count for shape, count in SHAPES.items())


def _median_of(rounds: list[dict]) -> dict:
    """Per T: per shape the median over rounds; step_ms and other_nodes_ms likewise; the rest from the first round."""
    merged = {}
    for t in rounds[0]["tokens"] if "tokens" in rounds[0] else rounds[0]:
        per = [r["tokens"][t] if "tokens" in r else r[t] for r in rounds]
        merged[t] = {**per[0], "calls_ms": {s: statistics.median(p["calls_ms"][s] for p in per) for s in SHAPES},
                     "step_ms": statistics.median(p["step_ms"] for p in per)}
        if "other_nodes_ms" in per[0]:
            merged[t]["other_nodes_ms"] = statistics.median(p["other_nodes_ms"] for p in per)
        merged[t]["estimate_ms"] = estimate(merged[t]["calls_ms"])
    return merged


def markdown(results: dict) -> str:
    sides = results["sides"]
    names = list(sides)
    lines = ["# Q4_1 x Q8_1 kernel against OpenVINO's compressed FullyConnected (issue 33, Kernels)", "",
             f"- Machine: {results['machine']}", f"- Command: `{results['command']}` at commit {results['commit']}, "
             f"finished {results['finished']}; {results['rounds']} rounds of {results['steps']} steps, medians.",
             f"- Load: {results['load']}", "",
             "Per call, ms (median call; 2 threads):", "",
             "| shape (calls a step) | T | " + " | ".join(names) + " |", "| --- | --- |" + " --- |" * len(names)]
    for shape, count in SHAPES.items():
        for t in map(str, TOKENS):
            lines.append(f"| {shape} ({count}) | {t} | " + " | ".join(f"{sides[n][t]['calls_ms'][shape]:.4f}" for n in names) + " |")
    lines += ["", "A step's 211 products, ms (estimate = sum of median calls; measured = median whole step, "
              "which other work on the machine inflates):", "", "| T | " + " | ".join(names) + " |",
              "| --- |" + " --- |" * len(names)]
    for t in map(str, TOKENS):
        lines.append(f"| {t} | " + " | ".join(f"{sides[n][t]['estimate_ms']:.2f} / {sides[n][t]['step_ms']:.2f}" for n in names) + " |")
    checks = results["checks"]
    lines += ["", f"Kernel checks: rows of a 4-row product bitwise equal to the rows alone: {checks['rows_bitwise_equal']}; "
              f"AVX2 and VNNI outputs bitwise equal (fingerprints): {checks['isas_agree']}; largest error against f32 "
              f"weights and activations {checks['relative_error']:.2g} of max |y| (the int8 activations).",
              "", "OpenVINO kernels: " + "; ".join(f"{n}: {', '.join(sorted({k for s in sides[n]['1']['kernels'].values() for k in s}))}"
                                                    for n in names if "kernels" in sides[n]["1"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--extension", default="", help=argparse.SUPPRESS)
    parser.add_argument("--dynamic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    from q4_kernel import build_microbenchmark

    from tools.build_kernels import build

    started = time.time()
    with tempfile.TemporaryDirectory() as build_dir:
        binaries = {f"kernel {isa}": build_microbenchmark(Path(build_dir), vnni=isa == "vnni") for isa in ("avx2", "vnni")}
        library = build(Path(build_dir) / "libq4_matmul.so")
        worker = [sys.executable, __file__, "--worker", "--steps", str(args.steps)]
        capped = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
        plain = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
        runs = {**{name: ([str(b), "--steps", str(args.steps)], None) for name, b in binaries.items()},
                "openvino AVX2": (worker, capped), "openvino AVX-512": (worker, plain),
                "op AVX2 (in OpenVINO)": (worker + ["--extension", str(library)], capped),
                "openvino AVX2, dynamic T": (worker + ["--dynamic"], capped),
                "op AVX2, dynamic T": (worker + ["--extension", str(library), "--dynamic"], capped)}
        rounds: dict[str, list[dict]] = {name: [] for name in runs}
        loads = []
        for index in range(args.rounds):
            for name, (command, env) in (list(runs.items()) if index % 2 == 0 else list(runs.items())[::-1]):
                loads.append(os.getloadavg()[0])
                rounds[name].append(_run_json(command, env))
                print(f"round {index + 1}: {name} done", file=sys.stderr)
    kernel_runs = rounds["kernel avx2"] + rounds["kernel vnni"]
    results = {**run_stamp("q4_microbench.py", argv, started), "rounds": args.rounds, "steps": args.steps,
               "load": f"shared machine: 1-minute load average {min(loads):.1f}-{max(loads):.1f} at the runs' starts "
                       f"(2 cores)",
               "checks": {"rows_bitwise_equal": all(r["rows_bitwise_equal"] for r in kernel_runs),
                          "isas_agree": len({r["fingerprint"] for r in kernel_runs}) == 1,
                          "relative_error": max(r["relative_error"] for r in kernel_runs)},
               "sides": {name: _median_of(rs) for name, rs in rounds.items()}}
    write_result(args.out, "q4_kernel_microbench", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
