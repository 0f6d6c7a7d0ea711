"""Read a shipped draft head's weights back from its OpenVINO IR (``export.py``'s graph), so training can continue
from a head whose torch checkpoint is gone (the default model's head: its run's machine went with it).

``head_state(folder)`` returns what ``train.py`` checkpoints (``head`` state dict, ``config``, ``vocab``), with every
matrix dequantized from the IR's int8 rows (the head as the app runs it; within half a quantization step, 1/254 of
a row's largest weight, of the trained float32 weights). The weights are found by the order ``export.build_graph``
creates them in: it is replayed on a stand-in state to record which weight each of its matrix and norm constants
holds, and the IR's nodes of the same kinds, sorted by the creation number in their names (``Multiply_123``), are
read in that order; shapes are checked one by one. The ``k``/``v`` rows an export repeated for each query head
(``export.repeat_kv_heads``: heads exported as multi-head attention) are folded back to the trained ``kv_heads``,
after checking that the copies agree; heads exported before that (grouped in the graph) are read as they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import openvino as ov
import torch

from inference.draft_head import HEAD_MANIFEST

from . import export


def _creation_number(node: ov.Node) -> int:
    match = re.search(r"_(\d+)$", node.get_friendly_name())
    if match is None:
        raise ValueError(f"node {node.get_friendly_name()!r} has no creation number: not an IR written by export.py")
    return int(match.group(1))


def _value(node: ov.Node) -> np.ndarray:
    """float32 value of a constant subgraph (a Constant, or int8 rows times scales)."""
    compiled = ov.Core().compile_model(ov.Model([node.output(0)], [], "weight"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled({})[0], dtype=np.float32)


def _is_constant(value: ov.Output) -> bool:
    node = value.get_node()
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node.get_type_name() == "Constant"


#: The matrices ``export.build_graph`` repeats per query head (``export.repeat_kv_heads``).
_REPEATED = ("k.weight", "v.weight")


def _fold_kv_heads(value: np.ndarray, shape: tuple[int, ...], groups: int, head_dim: int, where: str) -> np.ndarray:
    """``value`` float32 ``[kv_heads * groups * head_dim, hidden]`` (rows repeated by ``export.repeat_kv_heads``)
    folded back to ``shape`` ``[kv_heads * head_dim, hidden]``: the first copy of each KV head's rows.

    Raises:
        ValueError: ``value`` is not ``shape`` with each head's rows repeated ``groups`` times, identically.
    """
    if value.shape != (shape[0] * groups, shape[1]):
        raise ValueError(f"{where} should be {shape} or {(shape[0] * groups, shape[1])}, the IR's is {value.shape}")
    copies = value.reshape(-1, groups, head_dim, shape[1])
    if not np.array_equal(copies, np.broadcast_to(copies[:, :1], copies.shape)):
        raise ValueError(f"{where}: the IR's {groups} copies of each key/value head differ")
    return np.ascontiguousarray(copies[:, 0].reshape(shape))


def _recorded_order(state: dict, target_vocab: int, int8: bool) -> tuple[list[str], list[str]]:
    """Replay ``export.build_graph`` on ``state``: the state-dict keys of its matrices and of its norm weights, in
    the order it creates their graph constants (the embedding rows are recorded as ``"rows"``)."""
    weights = {k: v.float().numpy() for k, v in state["head"].items()}
    c = state["config"]
    groups = c["heads"] // c["kv_heads"]
    matrices, norms = [], []
    make_weight, make_rms = export._weight, export._rms

    def find(array: np.ndarray) -> str:
        for key, value in weights.items():
            if value.shape == array.shape and np.array_equal(value, array):
                return key
            if key in _REPEATED and np.array_equal(export.repeat_kv_heads(value, groups, c["head_dim"]), array):
                return key
        table = np.concatenate([weights["table"], weights["oov"][None]], axis=0)
        if array.shape == table.shape and np.array_equal(array, table):
            return "rows"
        raise ValueError(f"no weight of shape {array.shape} matches")

    def weight(array, int8_):
        matrices.append(find(array))
        return make_weight(array, int8_)

    def rms(x, array, eps):
        norms.append(find(array))
        return make_rms(x, array, eps)

    export._weight, export._rms = weight, rms
    try:
        export.build_graph(state, target_vocab, int8)
    finally:
        export._weight, export._rms = make_weight, make_rms
    return matrices, norms


def head_state(folder: Path) -> dict:
    """The head in ``folder`` (an exported head folder) as ``train.py`` checkpoints one: ``{"head": state dict of
    float32 tensors, "config": dict, "vocab": int64 [vocab]}``, and for a fused head ``"feature_layers"`` (the
    target's decoder layers whose outputs it reads, from its manifest).

    Raises:
        ValueError: the IR's weights are not laid out as ``export.build_graph`` lays them out.
    """
    from .head import DraftHead, HeadConfig

    manifest = json.loads((folder / HEAD_MANIFEST).read_text())
    config = HeadConfig(**manifest["config"])
    vocab = np.asarray(manifest["draft_vocab"], dtype=np.int64)
    target_vocab = int(manifest["target"]["vocab_size"])
    generator = torch.Generator().manual_seed(0)
    stand_in = DraftHead(config, torch.randn(config.vocab, config.hidden, generator=generator))
    with torch.no_grad():  # distinct values everywhere, so every array is recognized by its contents
        for parameter in stand_in.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    model = ov.Core().read_model(folder / "openvino_model.xml")
    int8 = any(op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.i8 for op in model.get_ops())
    matrices, norms = _recorded_order({"head": stand_in.state_dict(), "config": manifest["config"], "vocab": vocab},
                                      target_vocab, int8)

    weight_nodes, norm_nodes = [], []
    for op in model.get_ops():
        if op.get_type_name() != "Multiply":
            continue
        a, b = op.input_value(0), op.input_value(1)
        if int8 and _is_constant(a) and _is_constant(b) and a.get_partial_shape().rank.get_length() == 2:
            weight_nodes.append(op)
        elif a.get_node().get_type_name() == "Divide" and _is_constant(b):
            norm_nodes.append(op)
    if not int8:  # float32 matrices are bare constants: those of rank 2 feeding a MatMul or the embedding Gather
        weight_nodes = [op for op in model.get_ops() if op.get_type_name() == "Constant"
                        and len(op.get_output_shape(0)) == 2 and op.get_element_type() == ov.Type.f32]
    weight_nodes.sort(key=_creation_number)
    norm_nodes.sort(key=_creation_number)
    if len(weight_nodes) != len(matrices) or len(norm_nodes) != len(norms):
        raise ValueError(f"{folder}: {len(weight_nodes)} matrices and {len(norm_nodes)} norms in the IR, "
                         f"export.py makes {len(matrices)} and {len(norms)}")
    reference = stand_in.state_dict()
    state = {}
    for key, node in zip(matrices, weight_nodes):
        value = _value(node)
        if key == "rows":
            state["table"], state["oov"] = value[:-1], value[-1]
            continue
        if key in _REPEATED and value.shape != tuple(reference[key].shape):
            value = _fold_kv_heads(value, tuple(reference[key].shape), config.heads // config.kv_heads,
                                   config.head_dim, f"{folder}: {key}")
        if value.shape != tuple(reference[key].shape):
            raise ValueError(f"{folder}: {key} should be {tuple(reference[key].shape)}, the IR's is {value.shape}")
        state[key] = value
    for key, node in zip(norms, norm_nodes):
        state[key] = _value(node.input_value(1).get_node()).reshape(reference[key].shape)
    missing = set(reference) - set(state)
    if missing:
        raise ValueError(f"{folder}: no weights found for {sorted(missing)}")
    fused = {"feature_layers": manifest["feature_layers"]} if config.fused else {}
    return {"head": {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in state.items()},
            "config": manifest["config"], "vocab": vocab, **fused}
