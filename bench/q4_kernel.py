"""An experiment toward issue 33's kernel: is a Q4 x int8 weight product as an OpenVINO extension op faster than
OpenVINO's own compressed FullyConnected on this CPU? The engine does not use it; this measures before committing.

    .venv/bin/python bench/q4_kernel.py --out DIR       # builds bench/q4_kernel/q4_matmul.cpp with g++, ~3 minutes

The op (``bench/q4_kernel/q4_matmul.cpp``) computes each row as llama.cpp's Q4_1 x Q8_1 dot product does (int8
activations per block of 32, AVX2 ``vpmaddubsw``/``vpmaddwd``), rows never mixed, so a many-token pass computes each
row bit for bit as a one-token pass. Here every u4 compressed MatMul of the default model (the LM head's u8 weights
excepted) is replaced by it, weights repacked from the IR's constants (``w = d * q + m``, ``m = -zero_point * d``).

Measured, side by side in one process, the graphs taking turns (medians over ``--rounds``):
* one product alone, ``N x 576`` weights at 1 and 256 rows, against OpenVINO's u4 FullyConnected on the same codes;
* the whole model: a decode step after a 32-token prompt, passes over 2 and 4 tokens, a 1,024-token prefill (wall
  times), and a decode step as the sum of its nodes' median times (``PERF_COUNT``, all nodes and the products);
* exactness: rows of a 4-token pass against 4 one-token passes (largest logit difference; and, at the inputs of the
  first two layers' products, which node first computes a row differently), and greedy agreement with OpenVINO's
  graph: tokens before the first difference, 32 at most, on 3 prompts (int8 activations change the logits, as
  llama.cpp's do).

Writes ``OUT/q4_kernel.json`` and ``OUT/Q4_KERNEL.md``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino.utils.node_factory import NodeFactory

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from provenance import run_stamp, write_result  # noqa: E402

from inference.fusion import _compressed  # noqa: E402
from inference.models.default_model import ensure_default_model  # noqa: E402

EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
         "INFERENCE_NUM_THREADS": "2"}
PROMPTS = ([1, 9690, 314, 253, 5356, 282, 4649, 30, 2], list(range(1000, 1032)), list(range(5000, 5016)))


def _compile(out_path: Path, source: str, vnni: bool, extra: list[str]) -> Path:
    isa = ["-mavx2", "-mfma", "-mf16c"] + (["-mavx512vnni", "-mavx512vl"] if vnni else [])
    subprocess.run(["g++", "-O3", *isa, "-ffp-contract=off", "-std=c++17", str(HERE / "q4_kernel" / source), *extra,
                    "-o", str(out_path)], check=True)
    return out_path


def build(out_dir: Path, vnni: bool = False) -> Path:
    """Compile the op (``q4_kernel/q4_matmul.cpp``) against the venv's OpenVINO (headers and libraries ship in its
    wheel) and return the .so; ``vnni`` builds the AVX-512 VNNI kernel instead of the AVX2 one. ~30 s on 2 cores.

    Raises:
        subprocess.CalledProcessError: g++ failed (missing, or too old for C++17).
    """
    root = Path(ov.__file__).parent
    libs = [str(next((root / "libs").glob("libopenvino.so.*"))), str(root / "libs" / "libtbb.so.12")]
    return _compile(out_dir / f"libq4_matmul{'_vnni' if vnni else ''}.so", "q4_matmul.cpp", vnni,
                    ["-shared", "-fPIC", f"-I{root / 'include'}", *libs])


def build_microbenchmark(out_dir: Path, vnni: bool = False) -> Path:
    """Compile the standalone microbenchmark (``q4_kernel/q4_bench.cpp``, OpenMP, no OpenVINO); returns the binary."""
    return _compile(out_dir / f"q4_bench_{'vnni' if vnni else 'avx2'}", "q4_bench.cpp", vnni, ["-fopenmp"])


def use_kernel(model: ov.Model, factory: NodeFactory) -> int:
    """Replace every u4 compressed MatMul with blocks of 32 by the op; returns how many."""
    count = 0
    for node in model.get_ordered_ops():
        found = _compressed(node)
        if found is None or found.codes.get_output_element_type(0) != ov.Type.u4 or found.codes.get_output_shape(0)[2] != 32:
            continue
        n, groups, _ = found.codes.get_output_shape(0)
        raw = np.asarray(found.codes.get_data()).reshape(n, groups, 16)  # two codes a byte, the first in the low nibble
        codes = np.empty((n, groups, 32), np.uint8)
        codes[..., 0::2], codes[..., 1::2] = raw & 15, raw >> 4
        packed = (codes[..., :16] | (codes[..., 16:] << 4)).reshape(n, groups * 16)  # ggml's block layout
        scale = np.asarray(found.scale.get_data(), dtype=np.float32).reshape(n, groups)
        zero_point = np.asarray(found.zero_point.input_value(0).get_node().get_data() if found.zero_point.get_type_name()
                                == "Convert" else found.zero_point.get_data(), dtype=np.float32).reshape(n, groups)
        inputs = [found.matmul.input_value(0), *(ops.constant(np.ascontiguousarray(a)).output(0)
                                                 for a in (packed, scale, -zero_point * scale))]
        found.matmul.output(0).replace(factory.create("Q4MatMul", inputs, {}).output(0))
        count += 1
    return count


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
    stepper.reset()
    stepper.forward(tokens[:32])
    steps = [_ms(lambda t=t: stepper.forward([t])) for t in tokens[32:64]]
    decode = statistics.median(steps[4:])
    verify = {}
    for n in (2, 4):
        stepper.reset()
        stepper.forward(tokens[:32])
        verify[n] = _ms(lambda n=n: stepper.forward(tokens[32 : 32 + n])) / decode
    stepper.reset()
    prefill = _ms(lambda: stepper.forward(tokens[:1024]))
    return {"decode_ms": decode, "verify_2": verify[2], "verify_4": verify[4], "prefill_ms": prefill}


def node_times(core: ov.Core, model: ov.Model, tokens: list[int], steps: int = 24) -> dict:
    """A decode step as the sum of its nodes' median times (``PERF_COUNT``, ms; robust to other work on the machine,
    which wall times are not): ``nodes_ms`` all executed nodes, ``products_ms`` the weight products
    (``FullyConnected*`` or the op's ``Reference`` nodes). One-token steps after a 32-token prompt, 4 not counted."""
    stepper = Stepper(core.compile_model(model, "CPU", {**EXACT, "PERF_COUNT": "YES"}))
    stepper.forward(tokens[:32])
    per_node: dict[str, list[float]] = {}
    kinds: dict[str, str] = {}
    for index, token in enumerate(tokens[32 : 32 + steps]):
        stepper.forward([token])
        if index < 4:
            continue
        for info in stepper.request.profiling_info:
            if info.status == info.Status.EXECUTED:
                per_node.setdefault(info.node_name, []).append(info.real_time.total_seconds() * 1e3)
                kinds[info.node_name] = info.node_type
    medians = {name: statistics.median(times) for name, times in per_node.items()}
    products = sum(ms for name, ms in medians.items() if kinds[name].startswith("FullyConnected") or kinds[name] == "Reference")
    return {"nodes_ms": sum(medians.values()), "products_ms": products}


def greedy(stepper: Stepper, prompt: list[int], count: int = 32) -> list[int]:
    stepper.reset()
    out = [int(stepper.forward(prompt)[-1].argmax())]
    while len(out) < count:
        out.append(int(stepper.forward(out[-1:])[-1].argmax()))
    return out


def row_equality(core: ov.Core, factory: NodeFactory, xml: Path, tokens: list[int], products: int = 14) -> list[dict]:
    """Where a 4-token pass and 4 one-token passes part, with the op in place: for the inputs of the first
    ``products`` replaced products (layers 0 and 1), in graph order, the node that makes each input, whether each
    of the 4 rows is bitwise the one-token row, and the largest difference."""
    model = core.read_model(xml)
    use_kernel(model, factory)
    sources, labels, seen = [], [], set()
    for node in [n for n in model.get_ordered_ops() if n.get_type_name() == "Q4MatMul"][:products]:
        source = node.input_value(0)
        key = (source.get_node().get_instance_id(), source.get_index())
        if key not in seen:  # q, k and v (gate and up) read one input
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


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def single_product(core: ov.Core, factory: NodeFactory, columns: int, rows: int, rounds: int) -> dict:
    """ms of one ``columns x 576`` product at ``rows`` rows: the op against OpenVINO's u4 FullyConnected."""
    rng = np.random.default_rng(0)
    width, groups = 576, 18
    codes = rng.integers(0, 16, (columns, groups, 32)).astype(np.uint8)
    scale = (rng.random((columns, groups)) * 0.01 + 0.001).astype(np.float32)
    offset = (-rng.random((columns, groups)) * 0.08).astype(np.float32)
    x = ops.parameter([1, rows, width], np.float32)
    packed = (codes[..., :16] | (codes[..., 16:] << 4)).reshape(columns, groups * 16)
    mine = factory.create("Q4MatMul", [x.output(0), *(ops.constant(a).output(0) for a in (packed, scale, offset))], {})
    tensor = ov.Tensor(ov.Type.u4, [columns, groups, 32])
    tensor.data.reshape(-1)[:] = codes.reshape(-1)[0::2] | (codes.reshape(-1)[1::2] << 4)
    weights = ops.multiply(ops.subtract(ops.convert(ov.op.Constant(tensor), "f16"),
                                        ops.constant((-offset / scale).astype(np.float16)[..., None])),
                           ops.constant(scale.astype(np.float16)[..., None]))
    weights = ops.convert(ops.reshape(weights, ops.constant(np.array([columns, width], np.int64)), False), "f32")
    x2 = ops.parameter([1, rows, width], np.float32)
    graphs = {"kernel": ov.Model([mine.output(0)], [x]),
              "openvino": ov.Model([ops.matmul(x2, weights, False, True).output(0)], [x2])}
    feed = rng.standard_normal((1, rows, width)).astype(np.float32)
    requests = {name: core.compile_model(g, "CPU", EXACT).create_infer_request() for name, g in graphs.items()}
    times = {name: [] for name in requests}
    repeats = max(10, int(5e8 / (columns * width * rows)))
    for _ in range(rounds):
        for name, request in requests.items():
            request.infer({0: feed})
            times[name].append(_ms(lambda r=request: [r.infer({0: feed}) for _ in range(repeats)]) / repeats)
    return {name: statistics.median(t) for name, t in times.items()}


def markdown(results: dict) -> str:
    lines = ["# A Q4 x int8 weight product as an OpenVINO extension op (an experiment)", "",
             f"- Machine: {results['machine']}", f"- Command: `{results['command']}` at commit {results['commit']}, "
             f"finished {results['finished']}; {results['rounds']} rounds, medians.", "",
             "| one product | kernel ms | OpenVINO u4 ms | kernel speed |", "| --- | --- | --- | --- |"]
    for name, row in results["products"].items():
        lines.append(f"| {name} | {row['kernel']:.3f} | {row['openvino']:.3f} | {row['openvino'] / row['kernel']:.2f}x |")
    lines += ["", f"Whole model, {results['replaced']} products replaced (the LM head kept):", "",
              "| graph | decode ms | verify 2 / 4 tokens (x one step) | prefill 1,024 ms | decode as median node times: "
              "all / products ms |", "| --- | --- | --- | --- | --- |"]
    for name, row in results["model"].items():
        nodes = results.get("nodes", {}).get(name)
        lines.append(f"| {name} | {row['decode_ms']:.2f} | {row['verify_2']:.2f} / {row['verify_4']:.2f} | {row['prefill_ms']:.0f} | "
                     + (f"{nodes['nodes_ms']:.2f} / {nodes['products_ms']:.2f} |" if nodes else "— |"))
    lines += ["", f"Largest logit difference between a 4-token pass and 4 one-token passes: {results['rows_difference']:.1e} "
              "(the op's rows are bit for bit; OpenVINO's other nodes, attention and the LM head, are not). "
              f"Greedy tokens before the first difference from OpenVINO's graph, 3 prompts: {results['greedy_agreement']}.",
              "", "Where the rows part (inputs of the op's products in layers 0-1, in graph order; 4-token pass against "
              "4 one-token passes):", "", "| input made by | rows bitwise equal | largest difference |", "| --- | --- | --- |"]
    lines += [f"| {row['made_by']} | {' '.join('yes' if e else 'no' for e in row['rows_bitwise_equal'])} | "
              f"{row['largest_difference']:.1e} |" for row in results.get("row_equality", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    started = time.time()
    core, factory = ov.Core(), NodeFactory()
    with tempfile.TemporaryDirectory() as build_dir:
        library = build(Path(build_dir))
        core.add_extension(str(library))
        factory.add_extension(str(library))
        products = {f"{columns} x 576, {rows} row{'s' if rows > 1 else ''}": single_product(core, factory, columns, rows, args.rounds)
                    for columns in (576, 4608) for rows in (1, 256)}
        xml = ensure_default_model(4) / "openvino_model.xml"
        kernel_model = core.read_model(xml)
        replaced = use_kernel(kernel_model, factory)
        steppers = {"openvino": Stepper(core.compile_model(core.read_model(xml), "CPU", EXACT)),
                    "kernel": Stepper(core.compile_model(kernel_model, "CPU", EXACT))}
        tokens = [int(t) for t in np.random.default_rng(0).integers(100, 49_000, 1100)]
        rounds = {name: [] for name in steppers}
        for index in range(args.rounds):
            for name in (list(steppers) if index % 2 == 0 else list(steppers)[::-1]):
                rounds[name].append(model_round(steppers[name], tokens))
        model = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in rounds.items()}
        kernel = steppers["kernel"]
        kernel.reset()
        kernel.forward(tokens[:32])
        together = kernel.forward(tokens[32:36])
        kernel.reset()
        kernel.forward(tokens[:32])
        singles = np.stack([kernel.forward([t])[-1] for t in tokens[32:36]])
        nodes = {"openvino": node_times(core, core.read_model(xml), tokens), "kernel": node_times(core, kernel_model, tokens)}
        agreement = [_common_prefix(greedy(steppers["openvino"], p), greedy(kernel, p)) for p in PROMPTS]
        equality = row_equality(core, factory, xml, tokens)
    results = {**run_stamp("q4_kernel.py", argv, started), "rounds": args.rounds, "products": products,
               "replaced": replaced, "model": model, "nodes": nodes, "rows_difference": float(np.abs(together - singles).max()),
               "greedy_agreement": " / ".join(f"{a}/32" for a in agreement), "row_equality": equality}
    write_result(args.out, "q4_kernel", results, markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
