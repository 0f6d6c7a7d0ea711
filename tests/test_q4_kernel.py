"""inference/kernels/q4_matmul.cpp: blocked weight products as OpenVINO extension ops (issue 33):
Q4_1 x Q8_1 (``Q4MatMul``, int8 activations), Q4_1 x f32 (``Q4F32MatMul``) and Q8_0 x f32 (``Q8F32MatMul``), and a
decoder layer's o projection, residual, RMSNorm and SwiGLU MLP as one op (``Q4F32Layer``).

Built from source with g++ against the venv's OpenVINO (set-up's build where it is newer than the sources: the
``kernel_library`` fixture), loaded with ``Core.add_extension``, run in a small graph on
the CPU plugin: their numbers against NumPy references of the same arithmetic, and every row of a many-token pass
bitwise equal to the same row in a one-token pass (what keeps greedy speculative decoding identical to plain).
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino.utils.node_factory import NodeFactory

from inference.q4_kernels import f32_layout, ggml_layout, product_node

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or "avx2" not in Path("/proc/cpuinfo").read_text(errors="replace"),
    reason="needs g++ and an x86 CPU with AVX2",
)

N, K = 96, 128  # outputs, inputs: 4 blocks of 32 a row


@pytest.fixture(scope="module")
def loaded(kernel_library) -> tuple[ov.Core, NodeFactory]:
    """A Core and a NodeFactory with the ops of ``kernel_library`` (set-up's build where it is current) loaded; both
    live as long as the module's graphs (a Core destroyed first unloads the library under the compiled model's
    nodes)."""
    library = kernel_library
    core, factory = ov.Core(), NodeFactory()
    core.add_extension(str(library))
    factory.add_extension(str(library))
    return core, factory


@pytest.fixture(scope="module")
def weights():
    """Q4_1 weights as the exact 4-bit IR holds them: codes [N, K / 32, 32] (one a byte; the ops take them packed,
    ``ggml_layout`` or ``f32_layout``), f16 scale d and zero point z per block; w = d * (q - z) = d * q + m with
    m = -z * d (exact in f32)."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, (N, K // 32, 32)).astype(np.uint8)
    d = (rng.random((N, K // 32)) * 0.02 + 0.001).astype(np.float16)
    z = (rng.random((N, K // 32)) * 15).astype(np.float16)
    return codes, d, z


def as_f32(d: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d and m = -z * d in f32, as ``Q4MatMul`` takes them (the product of two f16 is exact in f32)."""
    d32 = d.astype(np.float32)
    return d32, -z.astype(np.float32) * d32


@pytest.fixture(scope="module")
def q8_weights():
    """Q8_0 weights as the GGUF holds them (the default model's LM head): signed codes [N, K], f16 d per block."""
    rng = np.random.default_rng(3)
    codes = rng.integers(-128, 128, (N, K)).astype(np.int8)
    d = (rng.random((N, K // 32)) * 0.002 + 1e-4).astype(np.float16)
    return codes, d


#: the ops' weights, alive as long as the module's compiled models (the ops read them where they lie)
KEEP: list[np.ndarray] = []


def compiled(loaded, *weights, op: str = "Q4MatMul") -> ov.CompiledModel:
    """The op alone in a graph, x ``[1, T, K]`` with T dynamic, on the CPU plugin with 2 threads."""
    core, factory = loaded
    x = ops.parameter([1, -1, K], np.float32)
    node = product_node(factory, op, x.output(0), weights, KEEP)
    return core.compile_model(ov.Model([node.output(0)], [x]), "CPU", {"INFERENCE_NUM_THREADS": "2"})


def f32_bound(x: np.ndarray, codes: np.ndarray, d: np.ndarray, m: np.ndarray | None = None) -> np.ndarray:
    """The f32 rounding bound of the f32 ops (``inference/kernels/block_f32.hpp``), ``[rows, N]``, for ``codes``
    ``[N, G, 32]``, ``d`` and ``m`` ``[N, G]``. Q4_1 (``m`` given): every term ``d q x`` and ``m x`` goes through at
    most G + 10 roundings in the 8-lane tiles and 2G + 5 in the 16-lane ones (a chain of two fused multiply-adds a
    block), so (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1) ``|y - sum_k w_k x_k| <= gamma_n
    sum_b sum_j (|d_b q_j x_j| + |m_b x_j|)`` with n the larger of the two, ``gamma_n = n u / (1 - n u)``,
    ``u = 2^-24``. Q8_0 (signed codes, no ``m``): the exact weights ``d s`` in 8 lanes of K / 8 fused multiply-adds,
    then 3 additions: ``gamma_{K/8+3} sum_k |w_k x_k|``."""
    n = max(d.shape[1] + 10, 2 * d.shape[1] + 5) if m is not None else d.shape[1] * 4 + 3
    gamma = n * 2.0**-24 / (1 - n * 2.0**-24)
    magnitude = np.abs(d.astype(np.float64))[..., None] * np.abs(codes)
    if m is not None:
        magnitude = magnitude + np.abs(m.astype(np.float64))[..., None]
    return gamma * (np.abs(x.astype(np.float64)) @ magnitude.reshape(len(d), -1).T)


def reference(x: np.ndarray, codes, d, m) -> np.ndarray:
    """Q4_1 x Q8_1 in NumPy: each row's blocks of 32 quantized to int8 (dx = max|x| / 127 in f32,
    q8 = round-half-even(x * (1 / dx)) in f32), then sum_b d_b dx_b sum_j q_j q8_j + m_b dx_b sum_j q8_j in f64."""
    blocks = x.reshape(x.shape[0], K // 32, 32).astype(np.float32)
    dx = (np.abs(blocks).max(axis=2) / np.float32(127)).astype(np.float32)
    inverse = np.where(dx > 0, np.float32(1) / np.where(dx > 0, dx, 1), 0).astype(np.float32)
    q8 = np.rint(blocks * inverse[..., None]).astype(np.int64)
    integer = np.einsum("rbj,nbj->rnb", q8, codes.astype(np.int64))
    sx = dx.astype(np.float64) * q8.sum(axis=2)
    return (np.einsum("rnb,nb,rb->rn", integer.astype(np.float64), d, dx) + np.einsum("nb,rb->rn", m, sx)).astype(np.float64)


def test_products_match_the_q4_1_q8_1_arithmetic(loaded, weights):
    codes, d16, z = weights
    d, m = as_f32(d16, z)
    x = np.random.default_rng(1).standard_normal((5, K)).astype(np.float32)
    x[2, 32:64] = 0  # a block of zeros: dx = 0, q8 = 0
    model = compiled(loaded, ggml_layout(codes), d, m)
    y = model({0: x[None]})[0][0]
    expected = reference(x, codes, d, m)
    scale = np.abs(expected).max()
    assert y.shape == (5, N)
    # same arithmetic, f32 sums against f64: rounding only
    assert np.abs(y - expected).max() <= 1e-5 * scale
    # and not the f32 product: the int8 activations change it by ~1e-3 of the largest output
    exact = x.astype(np.float64) @ (d[..., None] * codes + m[..., None]).reshape(N, K).T
    assert 1e-5 * scale < np.abs(y - exact).max() < 3e-2 * scale


def test_q4_1_f32_products_are_the_f32_product_up_to_f32_rounding(loaded, weights):
    codes, d, z = weights
    x = np.random.default_rng(1).standard_normal((5, K)).astype(np.float32)
    y = compiled(loaded, f32_layout(codes), d, z, op="Q4F32MatMul")({0: x[None]})[0][0]
    m = -z.astype(np.float64) * d  # exact: the weights d * (q - z) in float64, never rounded to f32
    w = (d.astype(np.float64)[..., None] * codes + m[..., None]).reshape(N, K)
    expected = x.astype(np.float64) @ w.T
    bound = f32_bound(x, codes, d, m)
    assert y.shape == (5, N)
    assert np.all(np.abs(y - expected) <= bound)
    assert np.abs(y - expected).max() > 0  # f32 sums, not f64
    # the bound is tight enough to tell the int8 activations apart: Q4MatMul's error exceeds it
    int8 = compiled(loaded, ggml_layout(codes), *as_f32(d, z))({0: x[None]})[0][0]
    assert np.any(np.abs(int8 - expected) > 10 * bound)


def test_q8_0_f32_products_are_the_f32_product_up_to_f32_rounding(loaded, q8_weights):
    codes, d = q8_weights
    x = np.random.default_rng(4).standard_normal((6, K)).astype(np.float32)
    y = compiled(loaded, codes, d, op="Q8F32MatMul")({0: x[None]})[0][0]
    blocks = codes.reshape(N, K // 32, 32)
    expected = x.astype(np.float64) @ (d.astype(np.float64)[..., None] * blocks).reshape(N, K).T
    assert y.shape == (6, N)
    assert np.all(np.abs(y - expected) <= f32_bound(x, blocks, d))
    assert np.abs(y - expected).max() > 0  # f32 sums, not f64: a reference that could not fail would show 0 here


@pytest.mark.parametrize("op", ["Q4MatMul", "Q4F32MatMul", "Q8F32MatMul"])
def test_each_row_of_a_many_token_pass_is_bitwise_the_one_token_row(loaded, weights, q8_weights, op):
    codes, d, z = weights
    arrays = {"Q4MatMul": (ggml_layout(codes), *as_f32(d, z)), "Q4F32MatMul": (f32_layout(codes), d, z),
              "Q8F32MatMul": q8_weights}[op]
    model = compiled(loaded, *arrays, op=op)
    x = (np.random.default_rng(2).standard_normal((9, K)) * 3).astype(np.float32)
    for rows in (2, 3, 4, 5, 7, 9):  # every tile shape of the f32 kernels (5, 4, 3, 2, 1 rows) and mixes (4 + 3, 4 + 5)
        together = model({0: x[None, :rows]})[0][0]
        for r in range(rows):
            alone = model({0: x[None, r : r + 1]})[0][0, 0]
            assert together[r].view(np.uint32).tolist() == alone.view(np.uint32).tolist(), (rows, r)


HIDDEN, INNER, EPS = 64, 96, 1e-3  # the layer op's sizes in the tests (multiples of 32); an eps large enough to matter


@pytest.fixture(scope="module")
def layer_weights():
    """Random Q4_1 weights for ``Q4F32Layer`` (o [H, H], gate and up [I, H], down [H, I]; each as codes [N, G, 32],
    packed [N, K / 2] as the op reads them (``f32_layout``), d and z f16 [N, G]) and the RMSNorm's gamma [H]."""
    rng = np.random.default_rng(5)

    def q4_1(n, k):
        codes = rng.integers(0, 16, (n, k // 32, 32)).astype(np.uint8)
        d = (rng.random((n, k // 32)) * 0.02 + 0.001).astype(np.float16)
        z = (7 + rng.random((n, k // 32))).astype(np.float16)
        return codes, f32_layout(codes), d, z

    parts = {"o": q4_1(HIDDEN, HIDDEN), "gate": q4_1(INNER, HIDDEN), "up": q4_1(INNER, HIDDEN), "down": q4_1(HIDDEN, INNER)}
    return parts, (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)


def compiled_layer(loaded, layer_weights) -> ov.CompiledModel:
    """``Q4F32Layer`` alone: attn and residual ``[1, T, H]``, T dynamic, on the CPU plugin with 2 threads."""
    core, factory = loaded
    parts, gamma = layer_weights
    attn, residual = ops.parameter([1, -1, HIDDEN], np.float32), ops.parameter([1, -1, HIDDEN], np.float32)
    attributes = {"hidden": HIDDEN, "inner": INNER, "eps": EPS, "gamma": gamma.ctypes.data}
    KEEP.append(gamma)
    for name, (_, packed, d, z) in parts.items():
        KEEP.extend((packed, d, z))
        attributes.update({f"{name}_codes": packed.ctypes.data, f"{name}_scales": d.ctypes.data, f"{name}_zeros": z.ctypes.data})
    node = factory.create("Q4F32Layer", [attn.output(0), residual.output(0)], attributes)
    return core.compile_model(ov.Model([node.output(0)], [attn, residual]), "CPU", {"INFERENCE_NUM_THREADS": "2"})


def test_the_layer_op_is_the_llama_layer_tail(loaded, layer_weights):
    parts, gamma = layer_weights
    rng = np.random.default_rng(6)
    attn, residual = rng.standard_normal((2, 5, HIDDEN)).astype(np.float32)
    y = compiled_layer(loaded, layer_weights)({0: attn[None], 1: residual[None]})[0][0]
    # the same layer in float64 from the same weights, d * (q - z) exact in float64
    w = {name: (d.astype(np.float64)[..., None] * (codes - z.astype(np.float64)[..., None])).reshape(len(d), -1)
         for name, (codes, _, d, z) in parts.items()}
    r1 = residual + attn.astype(np.float64) @ w["o"].T
    h = r1 / np.sqrt((r1**2).mean(axis=1, keepdims=True) + EPS) * gamma
    g, u = h @ w["gate"].T, h @ w["up"].T
    expected = r1 + (g / (1 + np.exp(-g)) * u) @ w["down"].T
    assert y.shape == (5, HIDDEN)
    # f32 arithmetic against f64: ~1e-7 relative; a dropped eps, gamma or residual would be off by far more
    assert np.abs(y - expected).max() <= 2e-6 * np.abs(expected).max()
    assert np.abs(y - expected).max() > 0


def test_each_row_of_a_many_token_layer_pass_is_bitwise_the_one_token_row(loaded, layer_weights):
    model = compiled_layer(loaded, layer_weights)
    attn, residual = (np.random.default_rng(7).standard_normal((2, 9, HIDDEN)) * 2).astype(np.float32)
    for rows in (2, 3, 4, 5, 7, 9):
        together = model({0: attn[None, :rows], 1: residual[None, :rows]})[0][0]
        for r in range(rows):
            alone = model({0: attn[None, r : r + 1], 1: residual[None, r : r + 1]})[0][0, 0]
            assert together[r].view(np.uint32).tolist() == alone.view(np.uint32).tolist(), (rows, r)


def test_the_microbenchmark_graph_holds_the_steps_211_products():
    from q4_microbench import LAYERS, SHAPES, synthetic_step

    model = synthetic_step(2, None)
    shapes = {p.get_friendly_name(): (*p.get_output_partial_shape(0).to_shape()[1:], p.input_value(0).get_partial_shape()[2].get_length())
              for p in model.get_ordered_ops() if p.get_type_name() == "MatMul"}
    assert len(shapes) == sum(SHAPES.values()) == 211
    # (tokens, outputs, inputs) of every layer's products, and of the output layer
    layer = {"q": (2, 576, 576), "k": (2, 192, 576), "v": (2, 192, 576), "o": (2, 576, 576), "gate": (2, 1536, 576),
             "up": (2, 1536, 576), "down": (2, 576, 1536)}
    assert all(shapes[f"l{i}.{name}"] == shape for i in range(LAYERS) for name, shape in layer.items())
    assert shapes["output"] == (2, 49152, 576)


PRODUCT_BYTES = """
import hashlib, sys
import numpy as np, openvino as ov, openvino.opset13 as ops
from openvino.utils.node_factory import NodeFactory
from inference.q4_kernels import f32_layout, product_node
core, factory = ov.Core(), NodeFactory()
core.add_extension(sys.argv[1]); factory.add_extension(sys.argv[1])
rng = np.random.default_rng(0)
codes = rng.integers(0, 16, (64, 18, 32)).astype(np.uint8)
d, z = (rng.random((64, 18)) * 0.02 + 0.001).astype(np.float16), (rng.random((64, 18)) * 15).astype(np.float16)
x, keep = ops.parameter([1, -1, 576], np.float32), []
model = core.compile_model(ov.Model([product_node(factory, "Q4F32MatMul", x.output(0), (f32_layout(codes), d, z), keep)
                                     .output(0)], [x]), "CPU", {"INFERENCE_NUM_THREADS": "2"})
print(hashlib.sha256(model({0: rng.standard_normal((1, 2, 576)).astype(np.float32)})[0].tobytes()).hexdigest())
"""


@pytest.mark.skipif("avx512f" not in Path("/proc/cpuinfo").read_text(errors="replace"),
                    reason="the CPU runs the 8-lane tiles only (no AVX-512F)")
def test_the_8_lane_tiles_hold_too_where_the_16_lane_ones_run(loaded, kernel_library):
    """On a CPU with AVX-512F the f32 ops run 16-lane tiles; ``ONEDNN_MAX_CPU_ISA=AVX2`` makes a process run the
    8-lane ones of an AVX2-only CPU (``block_f32.hpp``: ``wide_tiles``, decided once a process). Each is checked:
    the two give other roundings of the same product (the switch switches), and this file's f32 tests pass in a
    process with the cap."""
    import os
    import subprocess

    root = Path(__file__).resolve().parent.parent
    library = kernel_library
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    capped = {**env, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    hashes = [subprocess.run([sys.executable, "-c", PRODUCT_BYTES, str(library)], env=e, capture_output=True, text=True,
                             check=True).stdout for e in (env, capped)]
    assert hashes[0] != hashes[1]
    run = subprocess.run([sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "-k", "(f32 or layer) and not lane"], env=capped, capture_output=True, text=True, cwd=root)
    assert run.returncode == 0 and " passed" in run.stdout, run.stdout[-2000:]


def test_u4_zero_points_are_read_two_a_byte():
    """Newcomer trial: a Q4_1 GGUF imported through openvino-genai (its IR keeps the zero points as u4, two a byte)
    failed to load: "cannot reshape array of size 8640 into shape (960,18)". The weights read back are the IR's."""
    from inference.fusion import compressed_product
    from inference.q4_kernels import _q4_1

    rng = np.random.default_rng(0)
    n, groups = 8, 3
    codes = rng.integers(0, 16, (n, groups, 32))
    zeros = rng.integers(0, 16, (n, groups, 1))
    scale = (rng.random((n, groups, 1)) + 0.5).astype(np.float16)

    def u4(values: np.ndarray) -> ov.Node:
        return ov.op.Constant(ov.Type.u4, ov.Shape(list(values.shape)), values.reshape(-1).tolist())

    x = ops.parameter([1, groups * 32], ov.Type.f32)
    decompressed = ops.multiply(ops.subtract(ops.convert(u4(codes), ov.Type.f16), ops.convert(u4(zeros), ov.Type.f16)),
                                ops.constant(scale))
    weights = ops.convert(ops.reshape(decompressed, ops.constant(np.array([n, groups * 32])), False), ov.Type.f32)
    matmul = ops.matmul(x, weights, transpose_a=False, transpose_b=True)
    read_codes, read_scale, read_zeros = _q4_1(compressed_product(matmul.output(0).get_node()))
    assert np.array_equal(read_codes, codes) and np.array_equal(read_scale, scale.reshape(n, groups))
    assert np.array_equal(read_zeros.astype(np.float32), zeros.reshape(n, groups).astype(np.float32))
