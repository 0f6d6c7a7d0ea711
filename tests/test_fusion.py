"""Horizontal fusion at load (inference/fusion.py): fewer weight products, the same numbers."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from inference import file_pages
from inference.devices import core
from inference.fusion import fuse_shared_input_products, ordered_ops

EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}


def _compressed_matmul(x, rng, columns: int, width: int, block: int = 32):
    """x @ W^T with W in OpenVINO's u4 decompression pattern (codes, f16 zero point and scale per block)."""
    groups = width // block
    codes = rng.integers(0, 16, (columns, groups, block)).astype(np.uint8)
    packed = codes.reshape(-1)[0::2] | (codes.reshape(-1)[1::2] << 4)
    tensor = ov.Tensor(ov.Type.u4, [columns, groups, block])  # owns its memory (a Tensor made from an array shares it)
    tensor.data.reshape(-1)[:] = packed
    codes_node = ov.op.Constant(tensor)
    zero_point = ops.constant((rng.random((columns, groups, 1)) * 15).astype(np.float16))
    scale = ops.constant((rng.random((columns, groups, 1)) * 0.02).astype(np.float16))
    weights = ops.multiply(ops.subtract(ops.convert(codes_node, ov.Type.f16), zero_point), scale)
    weights = ops.convert(ops.reshape(weights, ops.constant(np.array([columns, width], np.int64)), False), ov.Type.f32)
    return ops.matmul(x, weights, transpose_a=False, transpose_b=True)


def _three_products_and_one_apart(rng):
    """q, k, v-like products of one input (64, 32, 32 columns), and a fourth product of another input."""
    x = ops.parameter([1, -1, 128], np.float32, name="x")
    other = ops.parameter([1, -1, 128], np.float32, name="other")
    q, k, v = (_compressed_matmul(x, rng, columns, 128) for columns in (64, 32, 32))
    apart = _compressed_matmul(other, rng, 16, 128)
    outputs = [ops.relu(q), ops.add(k, v), ops.sigmoid(k), apart]
    return ov.Model([o.output(0) for o in outputs], [x, other])


def _products(model: ov.Model) -> int:
    return sum(node.get_type_name() == "MatMul" for node in model.get_ordered_ops())


def test_products_of_one_input_become_one_with_the_same_results():
    rng = np.random.default_rng(0)
    plain, fused = _three_products_and_one_apart(rng), _three_products_and_one_apart(np.random.default_rng(0))
    assert fuse_shared_input_products(fused) == 2
    assert (_products(plain), _products(fused)) == (4, 2)  # q/k/v fused; the product of another input untouched
    feed = {"x": rng.standard_normal((1, 5, 128)).astype(np.float32), "other": rng.standard_normal((1, 5, 128)).astype(np.float32)}
    expected = core().compile_model(plain, "CPU", EXACT)(feed)
    got = core().compile_model(fused, "CPU", EXACT)(feed)
    for index in range(4):  # every consumer gets its own columns, bit for bit
        assert np.array_equal(expected[index], got[index]), index


def test_the_default_model_fuses_q_k_v_and_gate_up_of_every_layer_bit_for_bit(int4_dir):
    plain = core().read_model(int4_dir / "openvino_model.xml")
    fused = core().read_model(int4_dir / "openvino_model.xml")
    assert fuse_shared_input_products(fused) == 30 * (2 + 1)  # 30 layers: q/k/v -> 1, gate/up -> 1
    assert _products(plain) - _products(fused) == 90
    ids = np.array([[1, 9690, 314, 253, 5356, 282, 4649, 30, 2]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None],
            "beam_idx": np.zeros(1, np.int32)}
    expected = core().compile_model(plain, "CPU", EXACT).create_infer_request().infer(feed)["logits"]
    got = core().compile_model(fused, "CPU", EXACT).create_infer_request().infer(feed)["logits"]
    assert np.array_equal(expected, got)


def test_fusion_reads_the_process_mappings_once(int4_dir, monkeypatch):
    """90 groups, 180 constants released: /proc/self/maps is read once, not for each (170 ms of a 1.5-1.6 s load)."""
    reads = []

    class Counted(type(file_pages._MAPS)):
        def read_text(self, *args, **kwargs):
            reads.append(self)
            return super().read_text(*args, **kwargs)

    monkeypatch.setattr(file_pages, "_MAPS", Counted(str(file_pages._MAPS)))
    model = core().read_model(int4_dir / "openvino_model.xml")
    assert fuse_shared_input_products(model) == 90
    assert len(reads) == 1


def test_ordered_ops_walks_the_nodes_of_get_ordered_ops_in_its_order(int4_dir):
    """``ordered_ops`` (Python, letting the GIL go between short calls) is ``get_ordered_ops`` (one C++ call that
    holds it): the default model as read (results, the KV cache's Assign sinks, parameters) and after fusion."""
    model = core().read_model(int4_dir / "openvino_model.xml")
    for _ in range(2):
        walked, sorted_ = ordered_ops(model), model.get_ordered_ops()
        assert len(walked) > 4000 and [n.get_instance_id() for n in walked] == [n.get_instance_id() for n in sorted_]
        fuse_shared_input_products(model)
    small = _three_products_and_one_apart(np.random.default_rng(0))
    assert [n.get_instance_id() for n in ordered_ops(small)] == [n.get_instance_id() for n in small.get_ordered_ops()]
