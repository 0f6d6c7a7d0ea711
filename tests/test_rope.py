"""Shift-RoPE math: rotations compose, partial rotary dims are left alone, unsupported RoPE is refused."""

import numpy as np
import pytest

from inference.rope import RopeParameters, RopeUnsupportedError

CONFIG = {"model_type": "llama", "hidden_size": 576, "num_attention_heads": 9, "rope_theta": 100000.0}


def _rotate_from_scratch(raw: np.ndarray, positions: np.ndarray, rope: RopeParameters) -> np.ndarray:
    """Reference RoPE (rotate-half) of unrotated keys raw [1, H, S, D] at the given positions."""
    angles = positions[:, None] * rope.inv_freq[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)
    half = rope.rotary_dim // 2
    rotated_half = np.concatenate([-raw[..., half:], raw[..., :half]], axis=-1)
    return (raw * cos + rotated_half * sin).astype(np.float32)


def test_shift_moves_keys_to_their_new_positions():
    rope = RopeParameters.from_config(CONFIG)
    assert (rope.head_dim, rope.rotary_dim) == (64, 64)
    raw = np.random.default_rng(0).normal(size=(1, 3, 10, 64)).astype(np.float32)
    old = _rotate_from_scratch(raw, np.arange(300, 310, dtype=np.float64), rope)
    new = _rotate_from_scratch(raw, np.arange(50, 60, dtype=np.float64), rope)
    np.testing.assert_allclose(rope.shift_keys(old, -250), new, atol=2e-4)


def test_partial_rotary_factor_leaves_the_pass_through_channels():
    rope = RopeParameters.from_config({**CONFIG, "partial_rotary_factor": 0.5})
    keys = np.random.default_rng(1).normal(size=(1, 1, 4, 64)).astype(np.float32)
    shifted = rope.shift_keys(keys, 17)
    assert rope.rotary_dim == 32
    np.testing.assert_array_equal(shifted[..., 32:], keys[..., 32:])
    assert not np.allclose(shifted[..., :32], keys[..., :32])


def test_linear_scaling_divides_frequencies():
    plain = RopeParameters.from_config(CONFIG)
    scaled = RopeParameters.from_config({**CONFIG, "rope_scaling": {"type": "linear", "factor": 4.0}})
    np.testing.assert_allclose(scaled.inv_freq, plain.inv_freq / 4)


@pytest.mark.parametrize("config", [{"model_type": "gpt2", "n_embd": 768}, {**CONFIG, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}])
def test_unsupported_position_encodings_are_refused(config):
    with pytest.raises(RopeUnsupportedError, match="n_ctx"):
        RopeParameters.from_config(config)
