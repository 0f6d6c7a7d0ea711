"""The fast prefill copy (``inference/prefill_copy.py``): a stateless copy of the stateful IR whose KV inputs and
outputs map one-to-one onto the state variables, and whose passes, handed over, leave the exact request where its own
passes would have."""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from helpers import PROMPTS, chat_ids

from inference.kv_cache import KVCache
from inference.precision import PrecisionSettings
from inference.prefill_copy import compile_prefill_copy, stateless_model

#: f32 copy against the f32 stateful request: the same kernels, so only summation order may differ (measured 0.0).
EXACT_NOISE = 1e-4


def test_every_state_variable_gets_its_own_input_and_output(target):
    """The GGUF reader names a layer's value variable ``past_key_values.N.valuepresent.N.key``, and both of a
    layer's outputs ``present.N.key``; the mapping still pairs each variable with its own input and output."""
    variables = {variable.get_info().variable_id for variable in target.ir_model.get_variables()}
    stateless, past_inputs, present_outputs, empty_shapes = stateless_model(target.ir_model)
    assert len(variables) == 2 * target.config["num_hidden_layers"]
    assert set(past_inputs) == set(present_outputs) == set(empty_shapes) == variables
    assert sorted(past_inputs.values()) == sorted(set(past_inputs.values()))
    assert sorted(present_outputs.values()) == sorted(set(present_outputs.values()))
    assert all(past_inputs[variable] == variable.split("present")[0] for variable in variables)
    head_dim = target.config["hidden_size"] // target.config["num_attention_heads"]
    assert set(empty_shapes.values()) == {(1, target.config["num_key_value_heads"], 0, head_dim)}
    assert stateless.get_variables() == [] and len(target.ir_model.get_variables()) == len(variables)


def test_an_f32_copy_prefills_two_passes_that_the_exact_request_continues_unchanged(target):
    """A prompt prefilled by the copy in two passes (the second fed the first's KV outputs), handed over, gives
    the logits, cached keys and next decode step of the exact request prefilling it itself."""
    properties = {"PERFORMANCE_HINT": "LATENCY", **PrecisionSettings().compile_properties("CPU")}
    copy = compile_prefill_copy(target.ir_model, "CPU", properties)
    ids = chat_ids(target, PROMPTS[0] + " " + PROMPTS[2])
    assert len(ids) >= 80
    split = len(ids) // 2
    direct = KVCache(target.compiled, target.rope)
    direct.forward(ids[:split], last_only=True)
    direct_logits = direct.forward(ids[split:], last_only=True)
    handed = KVCache(target.compiled, target.rope, prefill_copy=copy)
    handed.prefill(ids[:split], upcoming=len(ids))
    handed_logits = handed.prefill(ids[split:], upcoming=len(ids) - split)
    assert handed.fast_prefilled == len(ids)
    np.testing.assert_allclose(handed_logits, direct_logits, atol=EXACT_NOISE)
    for layer in (0, target.config["num_hidden_layers"] - 1):
        np.testing.assert_allclose(handed.layer_keys(layer), direct.layer_keys(layer), atol=EXACT_NOISE)
    next_token = int(np.argmax(direct_logits[0]))
    np.testing.assert_allclose(handed.forward([next_token], last_only=True),
                               direct.forward([next_token], last_only=True), atol=EXACT_NOISE)


def test_a_model_without_kv_states_gets_no_copy_and_a_logged_reason(caplog):
    tokens = ops.parameter([1, 4], ov.Type.f32, name="x")
    model = ov.Model([ops.relu(tokens)], [tokens], "stateless")
    with caplog.at_level(logging.WARNING, logger="inference.prefill_copy"):
        assert compile_prefill_copy(model, "CPU", {}) is None
    assert "no fast prefill for this model" in caplog.text and "no KV-cache state variables" in caplog.text
