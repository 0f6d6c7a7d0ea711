"""What the machine at hand allows a decode step, so that each tokens/s figure can be read as a fraction of it.

    .venv/bin/python bench/physical_limits.py        # the limits of the default model on this machine (~20 s)

A batch-1 decode step of a small LLM reads every weight matrix once and the KV cache of every past token once, and
does about two floating-point operations per weight (a multiply and an add) plus the attention's. So:

* **Bandwidth limit** (tokens/s) = memory bandwidth / bytes read per token, with bytes per token = the bytes of the
  constants that feed a MatMul (``weight_bytes``: int4 or int8 weights with their scales and zero points as stored;
  an embedding table read only by its Gather counts one row, i.e. nothing) + ``kv_bytes_per_token`` for the
  context at hand. Bandwidth is measured STREAM-style (McCalpin's "copy": ``a[:] = b`` over arrays far larger than
  the caches, counted as read + write bytes; the best of 1 and ``os.cpu_count()`` threads; median of repeats).
* **Compute limit** (tokens/s) = a measured float32 GEMM rate (numpy's BLAS on all cores, a square product large
  enough to reach its peak) / FLOPs per token (2 x weights in MatMuls + 4 x layers x heads x head_dim x context
  for attention scores and values). Int4 weights must be widened before they are multiplied, so a real kernel is
  slower than this; it is the lower of the two limits that binds, and for batch-1 decoding that is bandwidth.

Source of the method: the roofline model (Williams, Waterman, Patterson, CACM 52(4), 2009) and the STREAM benchmark
(McCalpin, 1995).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import openvino as ov

#: Element-wise or layout ops that sit between a stored weight and its MatMul (decompression of int4/int8 weights).
DECOMPRESSION_OPS = {"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Concat"}
#: Bytes per element of each KV-cache precision (OpenVINO's KV_CACHE_PRECISION; u8 adds per-token scales, ~3%).
KV_ELEMENT_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "u8": 1.0 + 8 / 64}


@dataclass(frozen=True)
class ModelShape:
    """The sizes a decode step's traffic and arithmetic follow from.

    Attributes:
        weight_bytes: bytes of the constants feeding MatMuls, as stored (int4/int8 plus scales), per token.
        matmul_weights: weights multiplied per token (elements, any storage type).
        layers: decoder layers (KV-cache state pairs).
        kv_heads: key/value heads per layer.
        heads: query heads per layer.
        head_dim: channels per head.
    """

    weight_bytes: int
    matmul_weights: int
    layers: int
    kv_heads: int
    heads: int
    head_dim: int

    def kv_bytes_per_token(self, context: int, kv_precision: str) -> float:
        """Bytes of keys and values read per decode step at ``context`` cached tokens in ``kv_precision``
        (a key of ``KV_ELEMENT_BYTES``).

        Raises:
            KeyError: an unknown precision.
        """
        return 2 * self.layers * self.kv_heads * self.head_dim * context * KV_ELEMENT_BYTES[kv_precision]

    def flops_per_token(self, context: int) -> float:
        """Floating-point operations of one decode step at ``context`` cached tokens."""
        return 2.0 * self.matmul_weights + 4.0 * self.layers * self.heads * self.head_dim * context


def _feeds_matmul(output: ov.Output, depth: int = 0) -> bool:
    for target in output.get_target_inputs():
        node = target.get_node()
        kind = node.get_type_name()
        if kind == "MatMul":
            return True
        if kind in DECOMPRESSION_OPS and depth < 8 and _feeds_matmul(node.output(0), depth + 1):
            return True
    return False


def model_shape(xml: Path, heads: int, head_dim: int) -> ModelShape:
    """Read the weight traffic of the IR ``xml`` and its KV layout (from its state variables, ``[B, kv_heads, seq,
    head_dim]`` each, a key and a value per layer); ``heads`` = query heads per layer (from config.json)."""
    model = ov.Core().read_model(xml)
    weight_bytes = matmul_weights = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant" or not _feeds_matmul(op.output(0)):
            continue
        elements = int(np.prod(list(op.get_output_shape(0)))) if len(op.get_output_shape(0)) else 1
        weight_bytes += elements * op.get_output_element_type(0).bitwidth // 8
        if len(op.get_output_shape(0)) == 2 and min(op.get_output_shape(0)) > 1:
            matmul_weights += elements
        elif len(op.get_output_shape(0)) == 3 and op.get_output_element_type(0).bitwidth <= 8:  # grouped int4/int8
            matmul_weights += elements
    states = [op for op in model.get_ops() if op.get_type_name() == "ReadValue"]
    kv_heads = int(states[0].get_output_partial_shape(0)[1].get_length()) if states else 0
    return ModelShape(weight_bytes, matmul_weights, len(states) // 2, kv_heads, heads, head_dim)


def copy_bandwidth(megabytes: int = 256, repeats: int = 7) -> dict:
    """Memory bandwidth in GB/s (10^9 bytes) of a STREAM copy of ``megabytes`` MiB: read + write bytes over the
    time of ``dst[:] = src``, the median of ``repeats`` after one warm-up, with 1 thread and with all cores (each
    thread copies its slice). Returns ``{"threads_1": ..., "threads_N": ..., "best": ...}``."""
    n = megabytes * 2**20 // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.zeros(n, dtype=np.float64)
    result = {}
    for threads in sorted({1, os.cpu_count() or 1}):
        bounds = np.linspace(0, n, threads + 1).astype(int)
        pool = ThreadPoolExecutor(threads)

        def part(i: int) -> None:
            np.copyto(dst[bounds[i] : bounds[i + 1]], src[bounds[i] : bounds[i + 1]])

        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            list(pool.map(part, range(threads)))
            times.append(time.perf_counter() - start)
        pool.shutdown()
        result[f"threads_{threads}"] = 2 * src.nbytes / statistics.median(times[1:]) / 1e9
    result["best"] = max(result.values())
    return result


def gemm_rate(size: int = 1024, repeats: int = 5) -> float:
    """float32 GFLOP/s of numpy's BLAS on a ``size`` x ``size`` product (all cores), the median of ``repeats``."""
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    b = a.T.copy()
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times[1:]) / 1e9


@dataclass(frozen=True)
class Limits:
    """A machine's ceilings for one model: see the module docstring.

    Attributes:
        bandwidth_gbs: measured copy bandwidth, GB/s.
        gemm_gflops: measured float32 GEMM rate, GFLOP/s.
        shape: the model's traffic and arithmetic sizes.
    """

    bandwidth_gbs: float
    gemm_gflops: float
    shape: ModelShape

    def bandwidth_limit(self, context: int, kv_precision: str) -> float:
        """Tokens/s if a decode step at ``context`` cached tokens only had to read its bytes at full bandwidth."""
        return self.bandwidth_gbs * 1e9 / (self.shape.weight_bytes + self.shape.kv_bytes_per_token(context, kv_precision))

    def compute_limit(self, context: int) -> float:
        """Tokens/s if a decode step only had to do its float32 arithmetic at the measured GEMM rate."""
        return self.gemm_gflops * 1e9 / self.shape.flops_per_token(context)

    def limit(self, context: int, kv_precision: str) -> float:
        """The binding (lower) of the two limits, tokens/s."""
        return min(self.bandwidth_limit(context, kv_precision), self.compute_limit(context))

    def as_dict(self) -> dict:
        return asdict(self)


def measure(model_dir: Path) -> Limits:
    """Measure this machine's limits for the model in ``model_dir`` (IR + config.json)."""
    config = json.loads((model_dir / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    shape = model_shape(model_dir / "openvino_model.xml", heads, head_dim)
    return Limits(copy_bandwidth()["best"], gemm_rate(), shape)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from inference.models.default_model import ensure_default_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model folder (default: the 4-bit default model)")
    args = parser.parse_args(argv)
    limits = measure(args.model or ensure_default_model(4))
    shape = limits.shape
    print(f"copy bandwidth {limits.bandwidth_gbs:.1f} GB/s, f32 GEMM {limits.gemm_gflops:.0f} GFLOP/s; weights read per "
          f"token {shape.weight_bytes / 1e6:.1f} MB ({shape.matmul_weights / 1e6:.1f} M multiplied)")
    print("| context | KV | KV MB/token | bandwidth limit tok/s | compute limit tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for context in (32, 1024, 4096):
        for kv in ("f32", "u8"):
            print(f"| {context} | {kv} | {shape.kv_bytes_per_token(context, kv) / 1e6:.1f} | "
                  f"{limits.bandwidth_limit(context, kv):.0f} | {limits.compute_limit(context):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
