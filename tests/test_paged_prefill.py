"""The prefill copy with OpenVINO's paged attention (``model._paged_attention_copy``, ``paged_copy.PagedCopy``): its
logits and the cache it hands over are the exact path's within f32 summation order, over several passes, after
cached tokens and after a rollback left dead slots; the exact states of tokens cached before it are kept bit for bit.
The graph a load compiles is the one the model store's child wrote (``inference.paged_graph``): the same logits and
cache bit for bit as the transformation's own, made again when its source changes, none outside the store; it is
the default copy, ``SPECCHAT_PREFILL_ATTENTION=stateful`` or ``blocks`` keeps the stateful one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inference import paged_copy
from inference.devices import base_properties, core
from inference.kv_cache import KVCache
from inference.model import _paged_attention_copy, load_model
from inference.paged_copy import PagedCopy, _rows_from_blocks, _to_bf16_bits
from inference.paged_graph import GRAPH_FILES, INTERNAL_FLAG, STAMP, STORE_MARK, paged_graph, variant_name
from inference.precision import PAGED_PREFILL_KV_CACHE, PrecisionSettings

ENTRY = Path(__file__).resolve().parents[1] / "packaging" / "entry.py"

EXACT_NOISE = 1e-3  # f32 summation order only (tests/test_precision.py)


F32_COPY = {**base_properties("CPU"), **PrecisionSettings().compile_properties("CPU"), **PAGED_PREFILL_KV_CACHE["f32"]}


@pytest.fixture(scope="module")
def exact(int4_dir):
    """The default model on the exact path without a prefill copy, and an f32 paged copy of it."""
    model = load_model(int4_dir, "CPU", PrecisionSettings(fast_prefill="off"))
    copy = core().compile_model(_paged_attention_copy(int4_dir, True, ()), "CPU", F32_COPY)
    return model, copy


@pytest.fixture
def store_copy(int4_dir, tmp_path) -> Path:
    """A model folder of the store holding the default model's files (hard links where it can), no paged graph."""
    folder = tmp_path / "SmolLM2-135M-Instruct-int4"
    folder.mkdir()
    for path in int4_dir.iterdir():
        if path.is_file():
            try:
                os.link(path, folder / path.name)
            except OSError:
                shutil.copy2(path, folder / path.name)
    return folder


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


@pytest.mark.parametrize("continuation", [10, 120])
def test_a_rollback_right_after_a_prefill_in_the_copy_is_read_as_the_exact_path_reads_it(exact, continuation):
    """Newcomer trial: a 257-token prompt answered in one token (max_tokens 1) left the states in the prefill copy,
    with no decode pass to take them back; the next request's prefix reuse masked the old prompt's tokens, and its
    prefill went on in the copy, which has no attention mask: "Hi" was answered "Thetaipelekos:" (the old prompt
    read on), then every reply was garbage. A rollback takes the states back first; the next prompt's passes
    then read what the exact path reads (a short one on the exact path, as any short prompt; a long one in the
    copy after the dead slots are squeezed out)."""
    model, copy = exact
    paged = KVCache(model.compiled, model.rope, prefill_model=copy, kept_outputs=["last_hidden_state"])
    plain = KVCache(model.compiled, model.rope, kept_outputs=["last_hidden_state"])
    rng = np.random.default_rng(1)
    prompt = [int(t) for t in rng.integers(100, 49_000, 257)]
    for cache in (paged, plain):
        cache.prefill(prompt, upcoming=257)  # a one-token reply: its token comes from these logits, never fed
        cache.truncate(20)  # the next request shares the first 20 tokens
    turn = [int(t) for t in rng.integers(100, 49_000, continuation)]
    after, reference = (cache.prefill(turn, upcoming=continuation) for cache in (paged, plain))
    np.testing.assert_allclose(after, reference, atol=EXACT_NOISE)
    assert paged.fast_prefilled == 257 + (continuation if continuation >= 64 else 0)
    np.testing.assert_allclose(paged.forward([turn[0]]), plain.forward([turn[0]]), atol=EXACT_NOISE)


def test_a_copy_releases_its_memory_only_when_no_other_cache_holds_a_request_of_it(exact):
    """Two caches share one compiled copy: the one handing over drops its request but leaves the compiled model's
    memory (``release_memory``) while the other still holds a request of it (run after a ``release_memory``, a
    request made before it corrupted the heap, 2026.4); the other's passes and hand-over stay those of the exact path."""
    model, copy = exact
    holding, handing = (KVCache(model.compiled, model.rope, prefill_model=copy) for _ in range(2))
    plain = KVCache(model.compiled, model.rope)
    rng = np.random.default_rng(3)
    prompt, other = ([int(t) for t in rng.integers(100, 49_000, n)] for n in (200, 100))
    first = holding.prefill(prompt[:120], upcoming=200)
    handing.prefill(other, upcoming=100)
    handing.forward([other[0]])  # hands over: its request is dropped
    assert handing._paged._request is None and list(paged_copy._REQUESTS[copy]) == [holding._paged._request]
    second = holding.prefill(prompt[120:], upcoming=80)
    np.testing.assert_allclose(first, plain.prefill(prompt[:120], upcoming=200), atol=EXACT_NOISE)
    np.testing.assert_allclose(second, plain.prefill(prompt[120:], upcoming=80), atol=EXACT_NOISE)
    np.testing.assert_allclose(holding.forward([prompt[0]]), plain.forward([prompt[0]]), atol=EXACT_NOISE)
    assert holding._paged._request is None and not paged_copy._REQUESTS[copy]


def _widened(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns ``[n]`` widened to float32 as a hand-over does (one block of one head)."""
    rows = np.empty((1, len(bits), 1), dtype=np.float32)
    _rows_from_blocks(bits.reshape(1, 1, -1, 1), rows, 0, len(bits))
    return rows.ravel()


def test_bf16_bits_round_to_nearest_even_and_back_exactly():
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e-5, 0.0], dtype=np.float32)
    bits = _to_bf16_bits(values)
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even one (1); 1 + 3 * 2^-8: up to 1 + 2^-6
    np.testing.assert_array_equal(_widened(bits)[:4], np.array([1.0, 1.0, 1.015625, -2.5], dtype=np.float32))
    assert abs(_widened(bits)[4] - 3.0e-5) < 3.0e-5 / 128 and _widened(bits)[5] == 0.0
    assert np.array_equal(_to_bf16_bits(_widened(bits)), bits)


@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("start, stop", [(0, 96), (0, 70), (32, 96), (40, 96), (40, 70), (33, 60), (5, 9), (64, 65)])
def test_rows_come_out_of_the_blocks_in_token_order(dtype, start, stop):
    """A hand-over reads tokens [start, stop) of the block layout ([n_blocks, heads, block, head_dim]; token t in
    block t // block, row t % block) into [heads, tokens, head_dim] rows: whole blocks, a partial block at either
    end, or a piece of one block; bf16 bit patterns widened exactly. Nothing outside [start, stop) is written."""
    blocks_count, heads, size, head_dim = 3, 2, 32, 4
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 2**15, (blocks_count, heads, size, head_dim)).astype(dtype)
    if dtype == np.float32:
        blocks = rng.standard_normal(blocks.shape).astype(np.float32)
    by_token = blocks.transpose(1, 0, 2, 3).reshape(heads, blocks_count * size, head_dim)
    expected = (by_token.astype(np.uint32) << 16).view(np.float32) if dtype == np.uint16 else by_token
    rows = np.full((heads, stop + 3, head_dim), 7.0, dtype=np.float32)
    _rows_from_blocks(blocks, rows, start, stop)
    np.testing.assert_array_equal(rows[:, start:stop], expected[:, start:stop])
    assert (rows[:, :start] == 7.0).all() and (rows[:, stop:] == 7.0).all()


def test_the_stored_graph_prefills_as_the_transformation_made_it_bit_for_bit(exact, int4_dir):
    """Read back from the store's IR (placeholders swapped for OpenVINO's op, its runtime info restored), the copy's
    logits and the cache it hands over equal those of the graph the transformation made in this process."""
    model, copy = exact
    stored = paged_graph(int4_dir, True, ())
    assert stored is not None and (int4_dir / variant_name(True, ()) / GRAPH_FILES[1]).is_file()
    assert sum(op.get_type_name() == "PagedAttentionExtension" for op in stored.get_ops()) == 30
    stored_copy = core().compile_model(stored, "CPU", F32_COPY)
    prompt = [int(t) for t in np.random.default_rng(1).integers(100, 49_000, 200)]
    caches = [KVCache(model.compiled, model.rope, prefill_model=c, kept_outputs=["last_hidden_state"])
              for c in (copy, stored_copy)]
    first = [cache.prefill(prompt[:150], upcoming=200) for cache in caches]
    second = [cache.prefill(prompt[150:], upcoming=50) for cache in caches]
    assert caches[0].fast_prefilled == caches[1].fast_prefilled == 200
    assert np.array_equal(first[0], first[1]) and np.array_equal(second[0], second[1])
    assert np.array_equal(caches[0].rows(0, 200), caches[1].rows(0, 200))
    assert all(np.array_equal(a, b) for a, b in zip(_all_states(caches[0]), _all_states(caches[1])))


def test_the_store_makes_the_graph_once_and_again_when_its_source_changes(store_copy, tmp_path):
    built = store_copy / variant_name(True, ())
    assert paged_graph(store_copy, True, ()) is not None  # made by the child now
    made = json.loads((built / STAMP).read_text())
    assert made["pages"] and made["hidden_states"] and made["feature_layers"] == []
    assert made["sizes"] == {name: (built / name).stat().st_size for name in GRAPH_FILES}
    assert set(made["attention_info"][next(iter(made["attention_info"]))]) >= {"k_head_size", "num_k_heads"}
    mtime = (built / GRAPH_FILES[1]).stat().st_mtime_ns
    assert paged_graph(store_copy, True, ()) is not None and (built / GRAPH_FILES[1]).stat().st_mtime_ns == mtime
    # the model's IR replaced (a re-import): its size and mtime differ from the stamp's, so the graph is made again
    os.utime(store_copy / GRAPH_FILES[0], ns=(mtime, mtime + 10**9))
    assert paged_graph(store_copy, True, ()) is not None
    assert json.loads((built / STAMP).read_text())["files"]["openvino_model.xml"][1] == mtime + 10**9
    # a damaged graph (its weights file cut short) is made again
    size = (built / GRAPH_FILES[1]).stat().st_size
    os.truncate(built / GRAPH_FILES[1], size // 2)
    assert paged_graph(store_copy, True, ()) is not None and (built / GRAPH_FILES[1]).stat().st_size == size
    assert [p.name for p in store_copy.iterdir() if p.name.startswith(".")] == []  # no build folder left
    # outside the store (no manifest) nothing is written and no graph is read
    (store_copy / STORE_MARK).unlink()
    shutil.rmtree(built)
    assert paged_graph(store_copy, True, ()) is None and not built.exists()


def test_the_bundled_app_runs_the_stores_child(store_copy):
    """packaging/entry.py (what PyInstaller freezes) hands ``--internal-paged-graph ARGS`` to the store's child."""
    result = subprocess.run([sys.executable, str(ENTRY), INTERNAL_FLAG, str(store_copy), "--hidden-states",
                             "--feature-layers", "2", "9"], capture_output=True, text=True, timeout=300,
                            cwd=ENTRY.parents[1], env={**os.environ, "PYTHONPATH": str(ENTRY.parents[1])})
    assert result.returncode == 0, result.stderr
    made = json.loads((store_copy / variant_name(True, (2, 9)) / STAMP).read_text())
    assert made["pages"] and made["feature_layers"] == [2, 9]


def test_the_paged_copy_is_the_default_and_stateful_or_blocks_turn_it_off(int4_dir, monkeypatch):
    """On by default (``prefill_attention.paged_prefill_attention``); ``SPECCHAT_PREFILL_ATTENTION=stateful`` and
    ``blocks`` compile the stateful copy; either way a copy prefills where the default path has one."""
    from inference.prefill_attention import SWITCH

    monkeypatch.delenv(SWITCH, raising=False)
    default = load_model(int4_dir, "CPU", PrecisionSettings())
    if default.prefill_compiled is None:
        pytest.skip("no prefill copy on this CPU at the default precision")
    assert PagedCopy.pages(default.prefill_compiled)
    for value in ("stateful", "blocks"):
        monkeypatch.setenv(SWITCH, value)
        switched = load_model(int4_dir, "CPU", PrecisionSettings())
        assert switched.prefill_compiled is not None and not PagedCopy.pages(switched.prefill_compiled)

