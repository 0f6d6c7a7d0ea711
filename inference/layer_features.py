"""The target's decoder-layer outputs that a fused draft head reads (EAGLE-3's low and mid-level features, Li et
al., arXiv 2503.01840, section 3.3), found in its IR and added to it as one output.

A fused head (``draft_head``: a manifest naming ``feature_layers``) reads, beside the target's final hidden state,
the outputs of some of its decoder layers at the same position; ``add_layer_features`` adds them to the target's
graph before it is compiled (``model.load_model``'s ``feature_layers``), and ``tools/draft_head`` computes its
training data with the same function, so the engine feeds the head what it was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from .fusion import ordered_ops

#: Name of ``add_layer_features``' output (float32 ``[B, S, len(layers), hidden]``) and of a fused head's input
#: that reads it.
LAYER_FEATURES = "layer_features"
#: Added to the mean square before its root is taken (``add_layer_features``).
FEATURE_EPS = 1e-6


def residual_streams(model: ov.Model) -> list[ov.Output]:
    """The residual stream where each RMSNorm of a Llama-style graph reads it, in graph order: ``2 L + 1`` float32
    ``[B, S, hidden]`` values for ``L`` decoder layers (each layer's input norm and post-attention norm, then the
    final norm). Found structurally (the ``x ** 2`` that starts each RMSNorm), since exported IRs name their nodes
    arbitrarily; the LM head's input is the final norm of the last one."""
    streams = []
    for op in ordered_ops(model):
        if op.get_type_name() != "Power":
            continue
        exponent = op.input_value(1).get_node()
        while exponent.get_type_name() == "Convert":
            exponent = exponent.input_value(0).get_node()
        if exponent.get_type_name() == "Constant" and np.allclose(exponent.get_data(), 2.0):
            streams.append(op.input_value(0))
    return streams


def decoder_layer_count(model: ov.Model) -> int | None:
    """How many decoder layers a Llama-style graph has (``residual_streams``), None for a graph of another kind
    (its RMSNorms are not ``2 L + 1``)."""
    return _layer_count(residual_streams(model))


def _layer_count(streams: list[ov.Output]) -> int | None:
    """``L`` of ``2 L + 1`` residual streams (L >= 1), else None."""
    if len(streams) % 2 != 1 or len(streams) < 3:
        return None
    return (len(streams) - 1) // 2


def layer_outputs(model: ov.Model, layers: Sequence[int]) -> list[ov.Output]:
    """The outputs of decoder layers ``layers`` (0-based; the residual stream after layer ``i``, before any norm:
    EAGLE-3's low/mid-level features, arXiv 2503.01840 section 3.3), float32 ``[B, S, hidden]`` each.

    Raises:
        ValueError: the graph's norms are not ``2 L + 1`` RMSNorms (not a Llama-style decoder), or a layer is out of
            range (the message names it and the graph's layer count).
    """
    streams = residual_streams(model)
    count = _layer_count(streams)
    if count is None:
        raise ValueError(f"found {len(streams)} RMSNorms, not 2 L + 1: not a Llama-style decoder graph")
    for layer in layers:
        if not 0 <= layer < count:
            raise ValueError(f"decoder layer {layer} out of range: the graph has {count} decoder layers")
    return [streams[2 * (layer + 1)] for layer in layers]


def add_layer_features(model: ov.Model, layers: Sequence[int]) -> ov.Output:
    """Add an output ``LAYER_FEATURES`` to ``model`` (in place) and return it: the outputs of decoder layers
    ``layers`` (``layer_outputs``), each divided by its root mean square over the hidden axis
    (``sqrt(mean(x^2) + FEATURE_EPS)``; the head RMS-normalizes them anyway, and the raw mid-layer outputs of the
    default model reach 2e4, near float16's limit), stacked: float32 ``[B, S, len(layers), hidden]`` for every
    position fed.

    Raises:
        ValueError: as ``layer_outputs``.
    """
    axis = ops.constant(np.array([-1]))
    eps = ops.constant(np.array(FEATURE_EPS, dtype=np.float32))
    normalized = [
        ops.unsqueeze(ops.divide(x, ops.sqrt(ops.add(ops.reduce_mean(ops.multiply(x, x), axis, True), eps))),
                      ops.constant(np.array([2])))
        for x in layer_outputs(model, layers)
    ]
    stacked = ops.concat(normalized, 2)
    stacked.output(0).get_tensor().set_names({LAYER_FEATURES})
    model.add_outputs([stacked.output(0)])
    return stacked.output(0)
