"""The f32 prefill copy's attention in causal query blocks (``inference.prefill_attention``): the same logits and KV
states as OpenVINO's fused attention through every kind of pass the copy runs, the model restored after compiling,
and the switch that turns it on."""

from __future__ import annotations

import numpy as np
import pytest

from inference.devices import base_properties, core
from inference.fusion import fuse_shared_input_products
from inference.heap import return_large_blocks
from inference.kv_cache import KVCache
from inference.model import _compute_only_last_logits, _expose_hidden_states
from inference.precision import PrecisionSettings
from inference.prefill_attention import QUERY_BLOCKS, SWITCH, attention_in_blocks, blocked_prefill_attention

# Fused and blocked attention sum in other orders: measured 1.1e-4 after 1,024 tokens, 5e-5 to 1.5e-4 after the
# passes below; a wrong key range or head grouping moves logits by whole units.
LOGIT_TOLERANCE = 1e-3


def _model(folder):
    """The engine's f32 graph of ``folder`` (fused products, hidden states, last logits), as ``load_model`` builds it."""
    model = core().read_model(folder / "openvino_model.xml")
    fuse_shared_input_products(model)
    _expose_hidden_states(model)
    _compute_only_last_logits(model)
    return model


def _attentions(model) -> int:
    return sum(node.get_type_name() == "ScaledDotProductAttention" for node in model.get_ordered_ops())


@pytest.fixture(scope="module")
def copies(int4_dir):
    """(fused, blocked) caches on two compilations of one f32 graph, and the graph (restored after compiling)."""
    return_large_blocks()  # as load_model does first: freed buffers must not stay resident for later tests
    model = _model(int4_dir)
    properties = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU")}
    fused = core().compile_model(model, "CPU", properties)
    with attention_in_blocks(model, QUERY_BLOCKS) as replaced:
        assert _attentions(model) == 0
        blocked = core().compile_model(model, "CPU", properties)
    assert replaced == 30  # every decoder layer of the default model
    return KVCache(fused, None), KVCache(blocked, None), model


def test_model_restored_after_compiling(copies):
    *_, model = copies
    assert _attentions(model) == 30


def test_blocked_attention_matches_fused_through_every_pass(copies):
    fused, blocked, _ = copies
    rng = np.random.default_rng(0)
    fused.reset()
    blocked.reset()
    # a first pass, passes after cached tokens (fewer tokens than blocks: empty blocks), then dead slots
    for step, count in enumerate((300, 37, 3, 1, "truncate", 64)):
        if count == "truncate":
            fused.truncate(320)
            blocked.truncate(320)
            continue
        ids = rng.integers(100, 40000, count).tolist()
        ours, theirs = blocked.forward(ids, 4096), fused.forward(ids, 4096)
        assert ours.shape == theirs.shape == (count, 49152)
        assert np.abs(ours - theirs).max() < LOGIT_TOLERANCE, (step, count)
        assert (ours.argmax(-1) == theirs.argmax(-1)).all()
    keys = [s.state.data for s in blocked.request.query_state()]
    reference = {s.name: s.state.data for s in fused.request.query_state()}
    for state, data in zip(blocked.request.query_state(), keys):
        assert data.shape == reference[state.name].shape == (1, 3, 405, 64)
        assert np.abs(data - reference[state.name]).max() < LOGIT_TOLERANCE


def test_switch(monkeypatch):
    monkeypatch.delenv(SWITCH, raising=False)
    assert blocked_prefill_attention() == 0
    monkeypatch.setenv(SWITCH, "blocks")
    assert blocked_prefill_attention() == QUERY_BLOCKS
    monkeypatch.setenv(SWITCH, "fused")
    assert blocked_prefill_attention() == 0


def test_no_blocks_leaves_the_model(int4_dir):
    model = _model(int4_dir)
    with attention_in_blocks(model, 0) as replaced:
        assert replaced == 0 and _attentions(model) == 30
