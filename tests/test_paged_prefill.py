"""The prefill copy with OpenVINO's paged attention (``model._paged_attention_copy``, ``kv_cache.PagedCopy``): its
logits and the cache it hands over are the exact path's within f32 summation order, over several passes, after
cached tokens and after a rollback left dead slots; the exact states of tokens cached before it are kept bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from inference.devices import base_properties, core
from inference.kv_cache import KVCache, PagedCopy, _from_bf16_bits, _to_bf16_bits
from inference.model import _paged_attention_copy, load_model
from inference.precision import PAGED_PREFILL_KV_CACHE, PrecisionSettings

EXACT_NOISE = 1e-3  # f32 summation order only (tests/test_precision.py)


@pytest.fixture(scope="module")
def exact(int4_dir):
    """The default model on the exact path without a prefill copy, and an f32 paged copy of it."""
    model = load_model(int4_dir, "CPU", PrecisionSettings(fast_prefill="off"))
    properties = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU"), **PAGED_PREFILL_KV_CACHE["f32"]}
    copy = core().compile_model(_paged_attention_copy(int4_dir, True, ()), "CPU", properties)
    return model, copy


def _all_states(cache: KVCache) -> list[np.ndarray]:
    return [cache.layer_keys(layer) for layer in range(30)]


def test_the_paged_copy_matches_the_exact_path_through_passes_cached_tokens_and_dead_slots(exact):
    model, copy = exact
    assert PagedCopy.pages(copy) and not PagedCopy.pages(model.compiled)
    paged = KVCache(model.compiled, model.rope, prefill_model=copy, kept_outputs=["last_hidden_state"])
    plain = KVCache(model.compiled, model.rope, kept_outputs=["last_hidden_state"])
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(100, 49_000, 300)]
    # two passes, the second after the first's 200 tokens: the logits after each
    (first, second), (first_ref, second_ref) = (
        (cache.prefill(prompt[:200], upcoming=300), cache.prefill(prompt[200:], upcoming=100)) for cache in (paged, plain))
    assert paged.fast_prefilled == 300 and plain.fast_prefilled == 0
    np.testing.assert_allclose(first, first_ref, atol=EXACT_NOISE)
    np.testing.assert_allclose(second, second_ref, atol=EXACT_NOISE)
    np.testing.assert_allclose(paged.rows(0, 300), plain.rows(0, 300), atol=EXACT_NOISE)
    # the hand-over: the next decode pass reads the copy's keys and values
    np.testing.assert_allclose(paged.forward([prompt[0]]), plain.forward([prompt[0]]), atol=EXACT_NOISE)
    for ours, theirs in zip(_all_states(paged), _all_states(plain)):
        assert ours.shape == theirs.shape == (1, 3, 301, 64)
        np.testing.assert_allclose(ours, theirs, atol=EXACT_NOISE)

    # a rejected draft leaves dead slots; a later turn is prefilled by the copy after them
    for cache in (paged, plain):
        cache.forward(prompt[:4])
        cache.truncate(302)
    assert paged.physical_length == 305
    kept = paged.layer_keys(7).copy()
    turn = [int(t) for t in rng.integers(100, 49_000, 120)]
    after = paged.prefill(turn, upcoming=120)
    reference = plain.prefill(turn, upcoming=120)
    assert paged.fast_prefilled == 420 and paged.physical_length == 302 + 120  # squeezed before the copy read it
    np.testing.assert_allclose(after, reference, atol=EXACT_NOISE)
    np.testing.assert_allclose(paged.forward([turn[0]]), plain.forward([turn[0]]), atol=EXACT_NOISE)
    assert np.array_equal(paged.layer_keys(7)[:, :, :302], kept)  # the exact states before the copy: untouched


def test_bf16_bits_round_to_nearest_even_and_back_exactly():
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e-5, 0.0], dtype=np.float32)
    bits = _to_bf16_bits(values)
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even one (1); 1 + 3 * 2^-8: up to 1 + 2^-6
    np.testing.assert_array_equal(_from_bf16_bits(bits)[:4], np.array([1.0, 1.0, 1.015625, -2.5], dtype=np.float32))
    assert abs(_from_bf16_bits(bits)[4] - 3.0e-5) < 3.0e-5 / 128 and _from_bf16_bits(bits)[5] == 0.0
    assert np.array_equal(_to_bf16_bits(_from_bf16_bits(bits)), bits)


def test_the_paged_copy_is_chosen_by_its_switch_only(int4_dir, monkeypatch):
    """Off by default (its transformation holds the GIL ~165 ms at load: ``prefill_attention.paged_prefill_attention``),
    on with ``SPECCHAT_PREFILL_ATTENTION=paged``; either way a copy prefills where the default path has one."""
    from inference.prefill_attention import SWITCH

    monkeypatch.delenv(SWITCH, raising=False)
    default = load_model(int4_dir, "CPU", PrecisionSettings())
    monkeypatch.setenv(SWITCH, "paged")
    switched = load_model(int4_dir, "CPU", PrecisionSettings())
    if default.prefill_compiled is None:
        pytest.skip("no prefill copy on this CPU at the default precision")
    assert not PagedCopy.pages(default.prefill_compiled)
    assert PagedCopy.pages(switched.prefill_compiled)
