"""Issue 33's kernels: are blocked weight products as OpenVINO extension ops faster than OpenVINO's own compressed
FullyConnected in the whole model, and do they keep speculative decoding exact? The engine uses the "layer ops" graph
(``inference.q4_kernels``); this measures all variants side by side.

    .venv/bin/python bench/q4_kernel.py --out DIR [--activations f32|q8_1]    # builds inference/kernels/q4_matmul.cpp, ~1.5 min

The ops (``inference/kernels/q4_matmul.cpp``) compute each row the same way whatever the number of rows, so a
many-token pass computes each row bit for bit as a one-token pass. ``--activations f32`` (default): every u4
compressed MatMul of the default model with blocks of 32 becomes ``Q4F32MatMul`` (Q4_1 weights, f32 activations)
and the LM head (u8 codes with a zero point: GGUF Q8_0) ``Q8F32MatMul`` (graph "ops"); a third graph, "layer ops",
puts one ``Q4F32Layer`` op in each layer from its attention output to the next layer's RMSNorm (o projection,
residual, RMSNorm, SwiGLU MLP: ``inference/kernels/layer_f32.hpp``), with ``Q4F32MatMul`` for q/k/v and ``Q8F32MatMul`` for the
LM head: 61 ops a step instead of 121, 31 of them still through the CPU plugin's fallback shape inference (see
``q4_matmul.cpp``). ``q8_1``: ``Q4MatMul`` (int8 activations, llama.cpp's arithmetic), the LM head kept. Weights are
repacked from the IR's constants (Q4_1: codes in the kernel's layout, :func:`f32_layout`, the f16 scales d and zero
points z as they are, ``w = d * (q - z)``; Q8_0: signed codes ``q - zero_point``, f16 scales). All graphs are first fused as the
engine runs them (``inference.fusion``: q/k/v and gate/up one product each, 121 products a step).

Measured, side by side in one process, the graphs taking turns (medians over ``--rounds``):
* wall times: a decode step after a 32-token prompt, and passes over 2 and 4 tokens after it (ms);
* a pass of T = 1, 2, 4 tokens as the sum of its nodes' median times (``PERF_COUNT``: all nodes, the weight
  products or ops, the largest of them, which is the LM head);
* exactness: rows of a 4-token pass against 4 one-token passes (largest logit difference, for every graph:
  OpenVINO's is today's f32 path), which node first computes a row differently (inputs of the last graph's ops in
  the first two layers), and greedy agreement with OpenVINO's graph on 3 prompts x 32 tokens, with OpenVINO's top-2
  logit gap where they part.

Writes ``OUT/q4_kernel.json`` and ``OUT/Q4_KERNEL.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import openvino as ov
from openvino.utils.node_factory import NodeFactory

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp, write_result  # noqa: E402

from inference.drafting import common_prefix  # noqa: E402
from inference.fusion import fuse_shared_input_products  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402
from inference.q4_kernels import use_kernel, use_layers  # noqa: E402
from tools.build_kernels import build, compile_source  # noqa: E402

EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
         "INFERENCE_NUM_THREADS": "2"}
PROMPTS = ([1, 9690, 314, 253, 5356, 282, 4649, 30, 2], list(range(1000, 1032)), list(range(5000, 5016)))


def build_microbenchmark(out_dir: Path, vnni: bool = False) -> Path:
    """Compile the standalone microbenchmark (``q4_kernel/q4_bench.cpp``, OpenMP, no OpenVINO; the kernels' headers
    from ``inference/kernels/``); returns the binary."""
    return compile_source(HERE / "q4_kernel" / "q4_bench.cpp", out_dir / f"q4_bench_{'vnni' if vnni else 'avx2'}", vnni,
                          ["-fopenmp"])


def engine_graph(core: ov.Core, xml: Path) -> ov.Model:
    """The model as the engine compiles it for decoding: q/k/v and gate/up fused (``inference.fusion``)."""
    model = core.read_model(xml)
    fuse_shared_input_products(model)
    return model


def kernel_graph(core: ov.Core, factory: NodeFactory, xml: Path, keep: list, activations: str, layers: bool
                 ) -> tuple[ov.Model, int]:
    """:func:`engine_graph` with the ops in place: ``Q4F32Layer`` first where ``layers`` (:func:`use_layers`), then
    the products left (:func:`use_kernel`); returns it and how many ops replaced what."""
    model = engine_graph(core, xml)
    count = use_layers(model, factory, keep) if layers else 0
    return model, count + use_kernel(model, factory, keep, activations)


def _ms(function) -> float:
    start = time.perf_counter()
    function()
    return (time.perf_counter() - start) * 1e3


class Stepper:
    """Feeds a compiled stateful LM token by token (the IR's own inputs; all positions' logits)."""

    def __init__(self, compiled):
        self.request, self.length = compiled.create_infer_request(), 0

    def reset(self):
        self.request.reset_state()
        self.length = 0

    def forward(self, ids: list[int]) -> np.ndarray:
        n = len(ids)
        self.request.infer({"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, self.length + n), np.int64),
                            "position_ids": np.arange(self.length, self.length + n, dtype=np.int64)[None],
                            "beam_idx": np.zeros(1, np.int32)})
        self.length += n
        return self.request.get_output_tensor(0).data[0].copy()


def model_round(stepper: Stepper, tokens: list[int]) -> dict:
    """Wall ms: the median decode step (one token after a 32-token prompt; 32 steps, 4 not counted) and one pass
    over 2 and over 4 tokens after the same prompt."""
    stepper.reset()
    stepper.forward(tokens[:32])
    steps = [_ms(lambda t=t: stepper.forward([t])) for t in tokens[32:64]]
    result = {"decode_ms": statistics.median(steps[4:])}
    for n in (2, 4):
        stepper.reset()
        stepper.forward(tokens[:32])
        result[f"pass_{n}_ms"] = _ms(lambda n=n: stepper.forward(tokens[32 : 32 + n]))
    return result


def node_times(compiled: ov.CompiledModel, tokens: list[int], steps: int = 24) -> dict:
    """Passes over 1, 2 and 4 tokens (keys "1", "2", "4") as the sum of their nodes' median times (``PERF_COUNT``,
    which ``compiled`` must have on; ms; robust to other work on the machine, which wall times are not): ``nodes_ms``
    all executed nodes, ``products_ms`` the weight products (``FullyConnected*``, or the ops' ``Reference`` nodes),
    ``largest_ms`` the largest product (the LM head). Passes after a 32-token prompt, the first 4 not counted."""
    stepper = Stepper(compiled)
    return {str(width): _node_times(stepper, tokens, width, steps) for width in (1, 2, 4)}


def _node_times(stepper: Stepper, tokens: list[int], width: int, steps: int) -> dict:
    stepper.reset()
    stepper.forward(tokens[:32])
    per_node: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    for index in range(steps):
        stepper.forward(tokens[32 + index * width : 32 + (index + 1) * width])
        if index < 4:
            continue
        for info in stepper.request.profiling_info:
            if info.status == info.Status.EXECUTED:
                per_node.setdefault(info.node_name, []).append(info.real_time.total_seconds() * 1e3)
                kinds[info.node_name] = info.node_type
    medians = {name: statistics.median(times) for name, times in per_node.items()}
    products = [ms for name, ms in medians.items() if kinds[name].startswith("FullyConnected") or kinds[name] == "Reference"]
    return {"nodes_ms": sum(medians.values()), "products_ms": sum(products), "products": len(products),
            "largest_ms": max(products)}


def greedy(stepper: Stepper, prompt: list[int], count: int = 32) -> tuple[list[int], list[np.ndarray]]:
    """``count`` greedy tokens after ``prompt``, and the logits each was chosen from."""
    stepper.reset()
    logits = [stepper.forward(prompt)[-1]]
    out = [int(logits[-1].argmax())]
    while len(out) < count:
        logits.append(stepper.forward(out[-1:])[-1])
        out.append(int(logits[-1].argmax()))
    return out, logits


def agreement(reference: Stepper, candidate: Stepper, prompt: list[int]) -> dict:
    """Greedy tokens of ``candidate`` against ``reference`` after ``prompt``: how many agree before the first
    difference (32 at most) and, there, the reference's logit margin between its token and the candidate's (a
    near-tie when it is within the two graphs' numerical difference)."""
    tokens, logits = greedy(reference, prompt)
    mine, _ = greedy(candidate, prompt)
    same = common_prefix(tokens, mine)
    result = {"agree": same}
    if same < len(tokens):
        result["margin"] = float(logits[same][tokens[same]] - logits[same][mine[same]])
    return result


def row_equality(core: ov.Core, factory: NodeFactory, xml: Path, tokens: list[int], activations: str, keep: list,
                 layers: bool) -> list[dict]:
    """Where a 4-token pass and 4 one-token passes part, with the ops in place (:func:`kernel_graph`): for the inputs
    of the ops of layers 0 and 1 (not the LM head), in graph order, the node that makes each
    input, whether each of the 4 rows is bitwise the one-token row, and the largest difference."""
    model, _ = kernel_graph(core, factory, xml, keep, activations, layers)
    sources, labels, seen = [], [], set()
    layer_ops = [n for n in model.get_ordered_ops() if n.get_type_name() in ("Q4MatMul", "Q4F32MatMul", "Q4F32Layer")]
    for source in [value for node in layer_ops[: 4 if layers else 8] for value in node.input_values()]:
        key = (source.get_node().get_instance_id(), source.get_index())
        if key not in seen:  # an input read by several ops counted once
            seen.add(key)
            sources.append(source)
            chain = [source.get_node()]
            while chain[-1].get_type_name() in ("Reshape", "Transpose", "Convert"):
                chain.append(chain[-1].input_value(0).get_node())
            labels.append(" <- ".join(n.get_type_name() for n in chain))
    model.add_outputs(sources)
    stepper = Stepper(core.compile_model(model, "CPU", EXACT))

    def inputs(ids: list[int]) -> list[np.ndarray]:
        stepper.forward(ids)
        return [stepper.request.get_output_tensor(1 + i).data.reshape(len(ids), -1).copy() for i in range(len(sources))]

    stepper.reset()
    stepper.forward(tokens[:32])
    together = inputs(tokens[32:36])
    stepper.reset()
    stepper.forward(tokens[:32])
    singles = [inputs([t]) for t in tokens[32:36]]
    return [{"made_by": label, "rows_bitwise_equal": [bool(np.array_equal(together[i][r].view(np.uint32),
                                                                          singles[r][i][0].view(np.uint32))) for r in range(4)],
             "largest_difference": float(max(np.abs(together[i][r] - singles[r][i][0]).max() for r in range(4)))}
            for i, label in enumerate(labels)]


def _row_difference(stepper: Stepper, tokens: list[int]) -> float:
    """Largest logit difference between a 4-token pass and 4 one-token passes after a 32-token prompt."""
    stepper.reset()
    stepper.forward(tokens[:32])
    together = stepper.forward(tokens[32:36])
    stepper.reset()
    stepper.forward(tokens[:32])
    singles = np.stack([stepper.forward([t])[-1] for t in tokens[32:36]])
    return float(np.abs(together - singles).max())


def markdown(results: dict) -> str:
    names = list(results["model"])
    lines = [f"# Blocked weight products as OpenVINO extension ops ({results['activations']} activations), in the whole model",
             "", f"- Machine: {results['machine']}", f"- Command: `{results['command']}` at commit {results['commit']}, "
             f"finished {results['finished']}; {results['rounds']} rounds, medians.", f"- Load: {results['load']}",
             "- Graphs fused as the engine runs them (121 products); ops in place: "
             + ", ".join(f"{name} {count}" for name, count in results["replaced"].items())
             + " (`ops`: every product an op; `layer ops`: one `Q4F32Layer` a layer, q/k/v and the LM head products).",
             "",
             "Wall times, ms:", "", "| graph | decode step | 2-token pass | 4-token pass |", "| --- | --- | --- | --- |"]
    for name in names:
        row = results["model"][name]
        lines.append(f"| {name} | {row['decode_ms']:.2f} | {row['pass_2_ms']:.2f} | {row['pass_4_ms']:.2f} |")
    lines += ["", "A pass as the sum of its nodes' median times (`PERF_COUNT`), ms: all nodes / the weight products "
              "(count) / the largest product (the LM head):", "", "| graph | T = 1 | T = 2 | T = 4 |", "| --- | --- | --- | --- |"]
    for name in names:
        cells = [f"{n['nodes_ms']:.2f} / {n['products_ms']:.2f} ({n['products']}) / {n['largest_ms']:.2f}"
                 for n in (results["nodes"][name][str(t)] for t in (1, 2, 4))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Largest logit difference between a 4-token pass and 4 one-token passes: "
              + ", ".join(f"{name} {results['rows_difference'][name]:.1e}" for name in names) + ".",
              "Greedy agreement with OpenVINO's graph (tokens before the first difference, of 32; OpenVINO's logit "
              "margin between its token and the op graph's there): "
              + "; ".join(f"{name} " + ", ".join(f"{a['agree']}/32" + (f" (margin {a['margin']:.4f})" if "margin" in a else "")
                                                  for a in agreements) for name, agreements in results["greedy"].items()) + ".",
              "", f"Where the rows part (inputs of the {list(results['model'])[-1]}' ops in layers 0-1, in graph order; "
              "4-token pass against 4 one-token passes):", "", "| input made by | rows bitwise equal | largest difference |", "| --- | --- | --- |"]
    lines += [f"| {row['made_by']} | {' '.join('yes' if e else 'no' for e in row['rows_bitwise_equal'])} | "
              f"{row['largest_difference']:.1e} |" for row in results["row_equality"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--activations", choices=("f32", "q8_1"), default="f32")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    started = time.time()
    load = [os.getloadavg()[0]]
    core, factory = ov.Core(), NodeFactory()
    with tempfile.TemporaryDirectory() as build_dir:
        library = build(Path(build_dir) / "libq4_matmul.so")
        core.add_extension(str(library))
        factory.add_extension(str(library))
        xml = ensure_default_model(4) / "openvino_model.xml"
        keep: list[np.ndarray] = []  # the ops' weights, alive until the compiled models are gone
        layers = args.activations == "f32"
        graphs, replaced = {"openvino": engine_graph(core, xml)}, {}
        for name in ("ops", "layer ops") if layers else ("ops",):
            graphs[name], replaced[name] = kernel_graph(core, factory, xml, keep, args.activations, name == "layer ops")
        steppers = {name: Stepper(core.compile_model(graph, "CPU", EXACT)) for name, graph in graphs.items()}
        tokens = [int(t) for t in np.random.default_rng(0).integers(100, 49_000, 200)]
        rounds = {name: [] for name in steppers}
        for index in range(args.rounds):
            names = list(steppers)
            for name in names[index % len(names):] + names[: index % len(names)]:  # each graph first in turn
                rounds[name].append(model_round(steppers[name], tokens))
        model = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in rounds.items()}
        load.append(os.getloadavg()[0])
        nodes = {name: node_times(core.compile_model(graph, "CPU", {**EXACT, "PERF_COUNT": "YES"}), tokens)
                 for name, graph in graphs.items()}
        rows_difference = {name: _row_difference(stepper, tokens) for name, stepper in steppers.items()}
        greedy_results = {name: [agreement(steppers["openvino"], steppers[name], prompt) for prompt in PROMPTS]
                          for name in list(steppers)[1:]}
        equality = row_equality(core, factory, xml, tokens, args.activations, keep, layers)
        load.append(os.getloadavg()[0])
    results = {**run_stamp("q4_kernel.py", argv, started), "rounds": args.rounds, "activations": args.activations,
               "load": f"1-minute load average {min(load):.1f}-{max(load):.1f} during the run (2 cores)",
               "replaced": replaced, "model": model, "nodes": nodes, "rows_difference": rows_difference,
               "greedy": greedy_results, "row_equality": equality}
    write_result(args.out, "q4_kernel", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
