"""bench/physical_limits.py: the bytes and operations of a decode step read from a model's IR, and the limits."""

import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from physical_limits import Limits, ModelShape, copy_bandwidth, model_shape  # noqa: E402


def test_weight_bytes_count_what_feeds_matmuls_as_stored(tiny_ir):
    xml = Path(tiny_ir["same"]) / "openvino_model.xml"
    model = ov.Core().read_model(xml)
    states = [op for op in model.get_ops() if op.get_type_name() == "ReadValue"]
    shape = model_shape(xml, heads=4, head_dim=8)
    assert shape.layers * 2 == len(states) and shape.layers > 0
    assert shape.kv_heads == states[0].get_output_partial_shape(0)[1].get_length()
    constants = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"]
    stored = sum(int(np.prod(list(c.get_output_shape(0)) or [1])) * c.get_output_element_type(0).bitwidth // 8
                 for c in constants)
    # weights (and their scales) are most of the file; shape constants, masks and the like are not counted
    assert 0.5 * stored < shape.weight_bytes <= stored
    assert shape.matmul_weights > 0


def test_limits_follow_the_roofline():
    shape = ModelShape(weight_bytes=100_000_000, matmul_weights=50_000_000, layers=2, kv_heads=1, heads=2, head_dim=4)
    assert shape.kv_bytes_per_token(1000, "f32") == 2 * 2 * 1 * 4 * 1000 * 4
    assert shape.kv_bytes_per_token(1000, "f16") == shape.kv_bytes_per_token(1000, "f32") / 2
    limits = Limits(bandwidth_gbs=20.0, gemm_gflops=100.0, shape=shape)
    assert limits.bandwidth_limit(0, "f32") == pytest.approx(200.0)  # 20 GB/s over 100 MB
    assert limits.compute_limit(0) == pytest.approx(1000.0)  # 100 GFLOP/s over 100 MFLOP
    assert limits.limit(0, "f32") == pytest.approx(200.0)
    with pytest.raises(KeyError):
        shape.kv_bytes_per_token(1, "f8")


def test_copy_bandwidth_is_measured_for_one_and_all_threads():
    measured = copy_bandwidth(megabytes=16, repeats=3)
    assert measured["threads_1"] > 0 and measured["best"] == max(v for k, v in measured.items() if k != "best")
