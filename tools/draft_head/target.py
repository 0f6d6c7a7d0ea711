"""What the draft head reads from its target's IR, without torch: the LM-head rows (the tied embedding) its
output layer is pruned from and the weight of the final RMSNorm that sets the scale of the hidden states it
predicts (the outputs of its decoder layers, EAGLE-3's fused features, are the engine's:
``inference.layer_features``). Used by ``train.py``, ``generate.py`` and ``acceptance_check.py``."""

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
