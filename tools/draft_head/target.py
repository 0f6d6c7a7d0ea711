"""What the draft head reads from its target's IR, without torch: the LM-head rows (the tied embedding) its
output layer is pruned from and the weight of the final RMSNorm that sets the scale of the hidden states it
predicts, and the outputs of its decoder layers (EAGLE-3's fused features). Used by ``train.py``, ``generate.py`` and
``acceptance_check.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from inference.model import lm_head


def final_norm_weight(model_folder: Path) -> np.ndarray | None:
    """float32 ``[hidden]``: the weight of the target's final RMSNorm (the constant its LM head's input is
    multiplied by), which sets the scale of the hidden states the head predicts; None if the graph hides it."""
    scaling = lm_head(ov.Core().read_model(model_folder / "openvino_model.xml")).input_value(0).get_node()
    if scaling.get_type_name() != "Multiply":
        return None
    for value in scaling.input_values():
        node = value.get_node()
        while node.get_type_name() == "Convert":
            node = node.input_value(0).get_node()
        if node.get_type_name() == "Constant":
            return node.get_data().astype(np.float32).ravel()
    return None


def target_table(model_folder: Path) -> np.ndarray:
    """float32 ``[vocab, hidden]``: the target's LM-head rows (its tied embedding) as its IR computes them."""
    core = ov.Core()
    weights = lm_head(core.read_model(model_folder / "openvino_model.xml")).input_value(1)
    compiled = core.compile_model(ov.Model([weights], [], "lm_head_weights"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled({})[0], dtype=np.float32)


def residual_streams(model: ov.Model) -> list[ov.Output]:
    """The residual stream where each RMSNorm of a Llama-style graph reads it, in graph order: ``2 L + 1`` float32
    ``[B, S, hidden]`` values for ``L`` decoder layers (each layer's input norm and post-attention norm, then the
    final norm). Found structurally (the ``x ** 2`` that starts each RMSNorm), since exported IRs name their nodes
    arbitrarily; the LM head's input is the final norm of the last one."""
    streams = []
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Power":
            continue
        exponent = op.input_value(1).get_node()
        while exponent.get_type_name() == "Convert":
            exponent = exponent.input_value(0).get_node()
        if exponent.get_type_name() == "Constant" and np.allclose(exponent.get_data(), 2.0):
            streams.append(op.input_value(0))
    return streams


def layer_outputs(model: ov.Model, layers: tuple[int, ...] | list[int]) -> list[ov.Output]:
    """The outputs of decoder layers ``layers`` (0-based; the residual stream after layer ``i``, before any norm:
    EAGLE-3's low/mid-level features, arXiv 2503.01840 section 3.3), float32 ``[B, S, hidden]`` each.

    Raises:
        ValueError: the graph's norms are not ``2 L + 1`` RMSNorms (not a Llama-style decoder), or a layer is out of
            range.
    """
    streams = residual_streams(model)
    if len(streams) % 2 != 1 or len(streams) < 3:
        raise ValueError(f"found {len(streams)} RMSNorms, not 2 L + 1: not a Llama-style decoder graph")
    count = (len(streams) - 1) // 2
    for layer in layers:
        if not 0 <= layer < count:
            raise ValueError(f"layer {layer} out of range: the graph has {count} decoder layers")
    return [streams[2 * (layer + 1)] for layer in layers]


#: Output tensor name of ``add_layer_features``' output: float32 ``[B, S, len(layers), hidden]``.
LAYER_FEATURES = "layer_features"


def add_layer_features(model: ov.Model, layers: tuple[int, ...] | list[int]) -> ov.Output:
    """Add an output ``LAYER_FEATURES`` to ``model`` (in place): the outputs of decoder layers ``layers``
    (``layer_outputs``), each divided by its root mean square over the hidden axis (``sqrt(mean(x^2) + 1e-6)``;
    the head RMS-normalizes them anyway, and the raw mid-layer outputs of the default model reach 2e4, near
    float16's limit), stacked: float32 ``[B, S, len(layers), hidden]`` for every position fed. What a fused head
    (``head.HeadConfig.fused``) reads beside the final hidden state; ``generate.Target`` stores it per position."""
    import openvino.opset13 as ops

    axis = ops.constant(np.array([-1]))
    normalized = [
        ops.unsqueeze(ops.divide(x, ops.sqrt(ops.add(ops.reduce_mean(ops.multiply(x, x), axis, True),
                                                     ops.constant(np.array(1e-6, dtype=np.float32))))),
                      ops.constant(np.array([2])))
        for x in layer_outputs(model, layers)
    ]
    stacked = ops.concat(normalized, 2)
    stacked.output(0).get_tensor().set_names({LAYER_FEATURES})
    model.add_outputs([stacked.output(0)])
    return stacked.output(0)
