"""bench/q4_kernel/q4_matmul.cpp: the Q4_1 x Q8_1 product as an OpenVINO extension op (issue 33, an experiment).

Built from source with g++ against the venv's OpenVINO, loaded with ``Core.add_extension``, run in a small graph on
the CPU plugin: its numbers against a NumPy reference of the same arithmetic, and every row of a many-token pass
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from q4_kernel import build  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None or "avx2" not in Path("/proc/cpuinfo").read_text(errors="replace"),
    reason="needs g++ and an x86 CPU with AVX2",
)

N, K = 96, 128  # outputs, inputs: 4 blocks of 32 a row


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> tuple[ov.Core, NodeFactory]:
    """A Core and a NodeFactory with the op loaded; both live as long as the module's graphs (a Core destroyed
    first unloads the library under the compiled model's nodes)."""
    library = build(tmp_path_factory.mktemp("q4_kernel"))
    core, factory = ov.Core(), NodeFactory()
    core.add_extension(str(library))
    factory.add_extension(str(library))
    return core, factory


@pytest.fixture(scope="module")
def weights():
    """Q4_1 weights as the GGUF holds them: codes [N, K / 2] (byte j of a block = code j | code j + 16 << 4), f16 d
    and m per block (as f32)."""
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, (N, K // 32, 32)).astype(np.uint8)
    packed = (codes[..., :16] | (codes[..., 16:] << 4)).reshape(N, K // 2)
    d = (rng.random((N, K // 32)) * 0.02 + 0.001).astype(np.float16).astype(np.float32)
    m = (-rng.random((N, K // 32)) * 0.15).astype(np.float16).astype(np.float32)
    return codes, packed, d, m


def compiled(loaded, packed, d, m) -> ov.CompiledModel:
    """The op alone in a graph, x ``[1, T, K]`` with T dynamic, on the CPU plugin with 2 threads."""
    core, factory = loaded
    x = ops.parameter([1, -1, K], np.float32)
    node = factory.create("Q4MatMul", [x.output(0), *(ops.constant(a).output(0) for a in (packed, d, m))], {})
    return core.compile_model(ov.Model([node.output(0)], [x]), "CPU", {"INFERENCE_NUM_THREADS": "2"})


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
    codes, packed, d, m = weights
    x = np.random.default_rng(1).standard_normal((5, K)).astype(np.float32)
    x[2, 32:64] = 0  # a block of zeros: dx = 0, q8 = 0
    model = compiled(loaded, packed, d, m)
    y = model({0: x[None]})[0][0]
    expected = reference(x, codes, d, m)
    scale = np.abs(expected).max()
    assert y.shape == (5, N)
    # same arithmetic, f32 sums against f64: rounding only
    assert np.abs(y - expected).max() <= 1e-5 * scale
    # and not the f32 product: the int8 activations change it by ~1e-3 of the largest output
    exact = x.astype(np.float64) @ (d[..., None] * codes + m[..., None]).reshape(N, K).T
    assert 1e-5 * scale < np.abs(y - exact).max() < 3e-2 * scale


def test_each_row_of_a_many_token_pass_is_bitwise_the_one_token_row(loaded, weights):
    _, packed, d, m = weights
    model = compiled(loaded, packed, d, m)
    x = (np.random.default_rng(2).standard_normal((7, K)) * 3).astype(np.float32)
    for rows in (2, 3, 4, 5, 7):  # every tile shape of the kernel (4, 3, 2, 1 rows) and mixes of them
        together = model({0: x[None, :rows]})[0][0]
        for r in range(rows):
            alone = model({0: x[None, r : r + 1]})[0][0, 0]
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
