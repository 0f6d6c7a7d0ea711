"""The fast prefill copy: a stateless, faster-compiled (bf16) copy of a stateful LLM whose KV cache goes in and out
as plain tensors.

A long prompt is prefilled by this copy and its KV cache handed to the exact request (``kv_cache``). The copy used to
be a second stateful request, but reading a stateful request's states back (``VariableState.state``) is slow in
OpenVINO's CPU plugin when it computes in bf16: ~1.5 ms per state whatever the KV precision, 110-155 ms for the
default model's 60 states at 1,024 tokens (AMD EPYC, 2 cores), paid by the first decode step (a 1,024-token prompt's
first 32 tokens came 4 ms a token slower). As a stateless model the copy returns the same keys and values as
outputs, read for free, and the exact request takes them with the state setter (~7 ms at 1,024 tokens). Its logits
and handed-over states are bit-identical to the stateful copy's (measured: 0.0 difference at 1,024 tokens and in
the 8 decode steps after).

Design rules:

* **The IR is converted by OpenVINO's own pass** (``stateful_to_stateless_transformation``): every ReadValue
  becomes an input ``past_key_values.N.key/value`` and every Assign an output. Which input and output belong to
  which state variable is recorded before the pass (an Assign's source is the output's source afterwards), because
  the names alone do not tell (openvino-genai's GGUF reader names both outputs of a layer ``present.N.key``).
* **A GQA broadcast with a 0 in its target shape is given 1 instead.** The GGUF reader's graphs broadcast each
  layer's keys and values to the query heads with a target dimension 0 along the sequence; the CPU plugin's
  stateful attention fusion swallows that Broadcast, but in the stateless graph it runs and fails. In a
  bidirectional broadcast 1 keeps the input's length, which is what the graph means.
* **No copy where it cannot be built**: a model the pass cannot convert gets no fast prefill (logged), never a
  failed load.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino._offline_transformations import stateful_to_stateless_transformation

from .devices import core

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrefillCopy:
    """A compiled stateless copy of a stateful LLM and where each of its state variables goes in and comes out.

    Attributes:
        compiled: the ``ov.CompiledModel``: the stateful model's inputs (no ``beam_idx``) plus one input per state
            variable, float32 ``[1, kv_heads, past, head_dim]``; its outputs plus one per state variable, the same
            tensor with the fed tokens appended (``[1, kv_heads, past + S, head_dim]``).
        past_inputs: state variable id -> the name of its input.
        present_outputs: state variable id -> the index of its output.
        empty_shapes: state variable id -> the shape of its input for an empty cache (``[1, kv_heads, 0, head_dim]``).
        ir_model: the converted ``ov.Model``, kept for the reason ``model.LoadedModel.ir_model`` is.
    """

    compiled: ov.CompiledModel
    past_inputs: dict[str, str]
    present_outputs: dict[str, int]
    empty_shapes: dict[str, tuple[int, ...]]
    ir_model: ov.Model | None = field(default=None, repr=False)

    def empty_past(self) -> dict[str, np.ndarray]:
        """float32 zero-length KV inputs (state variable id -> array) for a prefill into an empty cache."""
        return {variable: np.zeros(shape, dtype=np.float32) for variable, shape in self.empty_shapes.items()}


def compile_prefill_copy(model: ov.Model, device: str, properties: dict) -> PrefillCopy | None:
    """Compile a stateless copy of the stateful ``model`` (left unchanged) with ``properties``.

    Args:
        model: a stateful causal LM (one ReadValue/Assign pair per cached key or value tensor).
        device: OpenVINO device name.
        properties: compile properties (the fast prefill's: bf16 compute, f32 KV cache).

    Returns:
        the copy, or None when the model has no KV states or OpenVINO's pass cannot convert it (logged).

    Raises:
        RuntimeError, OSError: OpenVINO cannot compile the converted model (as ``compile_model`` does).
    """
    try:
        stateless, past_inputs, present_outputs, empty_shapes = stateless_model(model)
    except (RuntimeError, ValueError) as error:
        logger.warning("no fast prefill for this model: its KV states cannot be made inputs and outputs (%s)", error)
        return None
    compiled = core().compile_model(stateless, device, properties)
    return PrefillCopy(compiled, past_inputs, present_outputs, empty_shapes, stateless)


def stateless_model(model: ov.Model) -> tuple[ov.Model, dict[str, str], dict[str, int], dict[str, tuple[int, ...]]]:
    """A stateless clone of ``model`` and its ``past_inputs``, ``present_outputs`` and ``empty_shapes``
    (see :class:`PrefillCopy`).

    Raises:
        ValueError: the model has no state variables, or one of them lost its input or output in the conversion.
        RuntimeError: OpenVINO's conversion failed.
    """
    clone = model.clone()
    variable_of_source: dict[tuple[str, int], str] = {}
    for op in clone.get_ordered_ops():
        if op.get_type_name() == "Assign":
            source = op.input_value(0)
            variable_of_source[(source.get_node().get_friendly_name(), source.get_index())] = op.get_variable_id()
    if not variable_of_source:
        raise ValueError("the model has no KV-cache state variables")
    stateful_to_stateless_transformation(clone)
    _fix_zero_broadcast_targets(clone)
    present_outputs: dict[str, int] = {}
    for index, result in enumerate(clone.get_results()):
        source = result.input_value(0)
        variable = variable_of_source.get((source.get_node().get_friendly_name(), source.get_index()))
        if variable is not None:
            present_outputs[variable] = index
    past_inputs: dict[str, str] = {}
    empty_shapes: dict[str, tuple[int, ...]] = {}
    for parameter in clone.get_parameters():
        name = parameter.output(0).get_any_name()
        matches = [variable for variable in present_outputs if variable.startswith(name + "present")]
        if len(matches) == 1:
            past_inputs[matches[0]] = name
            shape = parameter.get_output_partial_shape(0)
            if shape.rank.get_length() != 4 or not (shape[1].is_static and shape[3].is_static):
                raise ValueError(f"KV input {name} has shape {shape}, not [batch, kv_heads, past, head_dim]")
            empty_shapes[matches[0]] = (1, shape[1].get_length(), 0, shape[3].get_length())
    missing = set(variable_of_source.values()) - (set(past_inputs) & set(present_outputs))
    if missing:
        raise ValueError(f"state variables without an input or output after the conversion: {sorted(missing)[:3]}")
    clone.validate_nodes_and_infer_types()
    return clone, past_inputs, present_outputs, empty_shapes


def _fix_zero_broadcast_targets(model: ov.Model) -> None:
    """Replace a constant 0 in the target shape of a bidirectional Broadcast by 1 (see the module docstring)."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Broadcast" or op.get_attributes().get("mode") != "bidirectional":
            continue
        target = op.input_value(1).get_node()
        if target.get_type_name() != "Concat":
            continue
        for index, value in enumerate(target.input_values()):
            part = value.get_node()
            if part.get_type_name() == "Constant" and part.get_data().tolist() == [0]:
                one = ops.constant(np.array([1], dtype=part.get_data().dtype))
                target.input(index).replace_source_output(one.output(0))
