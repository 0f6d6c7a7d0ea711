"""Exact Q4_1 weights in openvino-genai's IR: each block's float offset instead of a rounded 4-bit zero point.

A Q4_1 block (ggml's ``block_q4_1``, see ggml's ``ggml-common.h`` and the GGUF specification in
``ggml/docs/gguf.md``) holds 32 consecutive weights of a row in 20 bytes: an f16 scale ``d``, an f16 offset
``m`` (the block's minimum), then 16 bytes of 4-bit codes ``q`` in 0..15, where byte ``j`` holds weight ``j``
in its low nibble and weight ``j + 16`` in its high nibble. A weight is ``w = d * q + m``.

openvino-genai 2026.4's GGUF reader turns each Q4_1 matrix ``[N, G * 32]`` (``N`` output features, ``G``
blocks per row) into OpenVINO's weight-decompression pattern::

    Constant u4 codes [N, G, 32] -> Convert f16 --+
    Constant u4 zero point [N, G, 1] -> Convert f16 -> Subtract -> Multiply(Constant f16 scale [N, G, 1])
        -> Reshape [N, G * 32] -> Convert f32 -> MatMul(transpose_b=True)

i.e. ``w = d * (q - z)`` with ``z = round(-m / d)`` stored as a 4-bit integer: every weight is off by up to
half a quantization step, which costs the default model about 50% perplexity. :func:`write_exact_q41_ir`
keeps that graph, the codes and the scales, and replaces each ``Convert(u4 zero point)`` by an f16 Constant
``[N, G, 1]`` holding the exact ``z = -m / d`` (so ``d * (q - z) = d * q + m``), computed from the GGUF's
raw blocks.

Design rules:

- Keep the Subtract form. OpenVINO's CPU plugin accepts a floating-point zero point in its compressed-weight
  FullyConnected, so the weights stay 4-bit in memory (5 bits per weight with the f16 zero point, Q4_1's own
  size) and in speed. The equivalent ``d * q + m`` form (an Add after the Multiply) is not recognised as
  weight decompression: the plugin then keeps f32 weights and decodes at about 0.6x the speed.
- Match by content, never by name or order: the IR's constants are anonymous. A decompression chain matches
  the GGUF Q4_1 tensor of the same shape whose codes equal its codes exactly, row for row or after undoing
  llama.cpp's Q/K RoPE row permutation (openvino-genai un-permutes ``attn_q``/``attn_k`` back to the Hugging
  Face rotate-half layout).
- Verify before rewriting: each matched tensor's scales must be the IR's bit for bit, and at least
  :data:`MIN_ROUNDED_SHARE` of the old zero points must be ``round(-m / d)``. Anything unexpected raises
  :class:`~inference.models.errors.ModelFetchError`: a silent mismatch would corrupt the model.
- Tensors of other types are left as openvino-genai built them (the default model's Q8_0 token embedding is
  already exact: u8 codes with zero point 128).
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

from .errors import ModelFetchError

logger = logging.getLogger(__name__)

#: Weights per Q4_1 block, and its size in bytes (f16 d, f16 m, 16 bytes of nibbles).
BLOCK_WEIGHTS = 32
BLOCK_BYTES = 20
#: Least share of the IR's old u4 zero points that must equal ``round(-m / d)`` (ties may round either way).
MIN_ROUNDED_SHARE = 0.99
#: GGUF tensor kinds whose rows llama.cpp permutes for RoPE, with the GGUF key of their head count.
_ROPE_PERMUTED = {"attn_q": "attention.head_count", "attn_k": "attention.head_count_kv"}
_IR_NAME = "openvino_model"


@dataclass(frozen=True)
class Q41Tensor:
    """One Q4_1 matrix of a GGUF, split into its parts.

    Attributes:
        name: the GGUF tensor name, e.g. ``blk.0.attn_q.weight``.
        d: f16 ``[N, G]`` scales, ``N`` rows (output features), ``G`` blocks per row.
        m: f16 ``[N, G]`` offsets (the block minimum).
        q: u8 ``[N, G, 32]`` codes 0..15 in weight order.
    """

    name: str
    d: np.ndarray
    m: np.ndarray
    q: np.ndarray

    @classmethod
    def from_blocks(cls, name: str, raw: np.ndarray) -> Q41Tensor:
        """Split raw Q4_1 data (u8 ``[N, G * 20]``, as ``gguf.GGUFReader`` exposes it) into ``d``, ``m``, ``q``."""
        blocks = np.ascontiguousarray(raw).reshape(raw.shape[0], -1, BLOCK_BYTES)
        nibbles = blocks[..., 4:]
        return cls(
            name=name,
            d=blocks[..., 0:2].copy().view(np.float16)[..., 0],
            m=blocks[..., 2:4].copy().view(np.float16)[..., 0],
            q=np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1),
        )

    @property
    def kind(self) -> str:
        """The tensor's kind, e.g. ``attn_q`` for ``blk.0.attn_q.weight`` ("" for names without one)."""
        parts = self.name.split(".")
        return parts[-2] if len(parts) >= 3 else ""


@dataclass(frozen=True)
class ExactOffsetSummary:
    """What :func:`write_exact_q41_ir` rewrote.

    Attributes:
        matrices: Q4_1 matrices whose zero points were replaced (210 for the default model).
        blocks: Q4_1 blocks among them (one zero point each).
        rounded_zero_points: how many of the old u4 zero points were ``round(-m / d)`` (checked, at least
            :data:`MIN_ROUNDED_SHARE` of ``blocks``).
    """

    matrices: int
    blocks: int
    rounded_zero_points: int


def read_q41_tensors(gguf_path: Path) -> tuple[list[Q41Tensor], dict[str, int]]:
    """Read every Q4_1 tensor of a GGUF, and the head counts of the RoPE-permuted kinds.

    Returns:
        ``(tensors, heads)``: the Q4_1 tensors in file order, and ``{"attn_q": n_heads, "attn_k": n_kv_heads}``.

    Raises:
        ModelFetchError: the GGUF lacks its architecture or a head count.
        OSError, ValueError: the file cannot be read or is not a GGUF.
    """
    reader = GGUFReader(gguf_path, "r")
    arch = _field(reader, "general.architecture", gguf_path)
    heads = {kind: int(_field(reader, f"{arch}.{key}", gguf_path)) for kind, key in _ROPE_PERMUTED.items()}
    tensors = [
        Q41Tensor.from_blocks(t.name, np.asarray(t.data)) for t in reader.tensors if t.tensor_type == GGMLQuantizationType.Q4_1
    ]
    return tensors, heads


def _field(reader: GGUFReader, key: str, path: Path):
    field = reader.get_field(key)
    if field is None:
        raise ModelFetchError(f"{path.name} has no {key} key; it is not a model GGUF")
    return field.contents()


def rope_unpermute(n_rows: int, n_heads: int) -> np.ndarray:
    """Row order that undoes llama.cpp's RoPE permutation of ``attn_q``/``attn_k``.

    llama.cpp's converter interleaves each head's two rotate-half halves (Hugging Face rows ``r`` and
    ``r + head_dim / 2`` become GGUF rows ``2r`` and ``2r + 1``); openvino-genai's reader puts them back.

    Returns:
        int ``[n_rows]``: IR row ``i`` is GGUF row ``order[i]``.
    """
    head_dim = n_rows // n_heads
    half = head_dim // 2
    within = np.concatenate([np.arange(half) * 2, np.arange(half) * 2 + 1])
    return (np.arange(n_heads)[:, None] * head_dim + within[None, :]).reshape(-1)


def exact_zero_points(d: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The f16 zero point ``z = -m / d`` of each block, so that ``d * (q - z) = d * q + m``.

    Computed in f64 and rounded once to f16: that moves a weight by at most ``d * |z| * 2**-11`` (below 0.01
    quantization steps for ``|z| <= 16``), less than an F16 re-encoding's own rounding.

    Args:
        d: f16 scales, any shape.
        m: f16 offsets, the same shape.

    Returns:
        f16 zero points, the same shape.

    Raises:
        ModelFetchError: a block has scale 0 (all its weights equal ``m``, which no zero point can express
            with that scale) or a zero point overflows f16.
    """
    if np.any(d == 0):
        raise ModelFetchError(f"{int((d == 0).sum())} Q4_1 blocks have scale 0; their offsets cannot be made exact")
    z = (-(m.astype(np.float64)) / d.astype(np.float64)).astype(np.float16)
    if not np.all(np.isfinite(z)):
        raise ModelFetchError("an exact Q4_1 zero point overflows f16")
    return z


class _DecompressionChain:
    """One ``(Convert(u4 codes) - Convert(u4 zero point)) * scale`` of the IR and the nodes it consists of."""

    def __init__(self, multiply) -> None:
        self.subtract = _source(multiply, 0)
        self.codes = _source(_source(self.subtract, 0), 0)
        self.zero_point = _source(_source(self.subtract, 1), 0)
        self.scale = _source(multiply, 1)

    @classmethod
    def find_all(cls, model) -> list[_DecompressionChain]:
        """Every u4 weight-decompression chain of an ``ov.Model``, in topological order."""
        import openvino as ov

        chains = []
        for node in model.get_ordered_ops():
            if node.get_type_name() != "Multiply":
                continue
            subtract, scale = _source(node, 0), _source(node, 1)
            if subtract.get_type_name() != "Subtract" or scale.get_type_name() != "Constant":
                continue
            converts = [_source(subtract, i) for i in (0, 1)]
            if any(c.get_type_name() != "Convert" for c in converts):
                continue
            constants = [_source(c, 0) for c in converts]
            if all(c.get_type_name() == "Constant" and c.get_output_element_type(0) == ov.Type.u4 for c in constants):
                chains.append(cls(node))
        return chains

    def codes_values(self) -> np.ndarray:
        """u8 ``[N, G, 32]``."""
        return _unpack_u4(self.codes)

    def zero_point_values(self) -> np.ndarray:
        """u8 ``[N, G]``."""
        return _unpack_u4(self.zero_point)[..., 0]

    def scale_values(self) -> np.ndarray:
        """f16 ``[N, G]``."""
        return self.scale.get_data()[..., 0]

    def use_zero_points(self, z: np.ndarray) -> None:
        """Make the Subtract take the f16 zero points ``z`` ``[N, G]`` instead of the u4 ones."""
        import openvino as ov
        from openvino import opset13

        constant = opset13.constant(z[..., None], ov.Type.f16)
        constant.set_friendly_name(self.zero_point.get_friendly_name() + "/exact_f16")
        self.subtract.input(1).replace_source_output(constant.output(0))


def _source(node, index: int):
    return node.input(index).get_source_output().get_node()


def _unpack_u4(constant) -> np.ndarray:
    """Values (u8) of a u4 Constant; OpenVINO packs two per byte, the first in the low nibble."""
    packed = constant.get_data()
    return np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(tuple(constant.get_output_shape(0)))


def _match(
    codes: np.ndarray, tensors: list[Q41Tensor], heads: dict[str, int], used: set[str]
) -> tuple[Q41Tensor, np.ndarray] | None:
    """The unused GGUF tensor whose codes equal ``codes`` (u8 ``[N, G, 32]``), and its row order (GGUF row of
    each IR row); None if there is none."""
    for tensor in tensors:
        if tensor.name in used or tensor.q.shape != codes.shape:
            continue
        orders = [np.arange(codes.shape[0])]
        if tensor.kind in heads:
            orders.append(rope_unpermute(codes.shape[0], heads[tensor.kind]))
        for order in orders:
            # a cheap look at the first rows first, then all of them
            if np.array_equal(tensor.q[order[:4]], codes[:4]) and np.array_equal(tensor.q[order], codes):
                return tensor, order
    return None


def write_exact_q41_ir(gguf_path: Path, ir_dir: Path) -> ExactOffsetSummary:
    """Rewrite ``ir_dir/openvino_model.xml/.bin``, built by openvino-genai from ``gguf_path``, so that every
    Q4_1 matrix computes with its exact weights ``d * q + m`` (see the module doc).

    The new IR is saved under a temporary name and renamed over the old one: the model read from ``ir_dir``
    maps the old ``.bin`` until it is released. Other constants keep their types (``compress_to_fp16=False``).
    Takes about 10 s and 0.5 GB of memory for the default model; the ``.bin`` grows by 1/16 of the Q4_1 weights'
    u4 bytes (92.5 -> 97.5 MB).

    Raises:
        ModelFetchError: the IR's u4 weights do not correspond one to one to the GGUF's Q4_1 tensors (codes,
            scales or zero points differ from what openvino-genai's reader writes), or a block cannot be made
            exact (see :func:`exact_zero_points`).
        OSError, RuntimeError: reading or writing failed (openvino reports a full disk as RuntimeError).
    """
    import openvino as ov  # deferred: a heavy import

    tensors, heads = read_q41_tensors(gguf_path)
    model = ov.Core().read_model(ir_dir / f"{_IR_NAME}.xml")
    chains = _DecompressionChain.find_all(model)
    if len(chains) != len(tensors):
        raise ModelFetchError(
            f"the IR in {ir_dir} has {len(chains)} u4 weight matrices but {gguf_path.name} has {len(tensors)} Q4_1 "
            "tensors; this openvino-genai version builds Q4_1 differently, so its weights cannot be made exact"
        )
    used: set[str] = set()
    blocks = rounded = 0
    for chain in chains:
        codes = chain.codes_values()
        found = _match(codes, tensors, heads, used)
        if found is None:
            raise ModelFetchError(
                f"no Q4_1 tensor of {gguf_path.name} has the codes of the IR weight "
                f"{chain.codes.get_friendly_name()} (shape {codes.shape})"
            )
        tensor, order = found
        used.add(tensor.name)
        d, m = tensor.d[order], tensor.m[order]
        if not np.array_equal(chain.scale_values().view(np.uint16), d.view(np.uint16)):
            raise ModelFetchError(f"the IR's scales of {tensor.name} differ from those in {gguf_path.name}")
        old = np.clip(np.round(-m.astype(np.float32) / d.astype(np.float32)), 0, 15)
        rounded += int((chain.zero_point_values() == old).sum())
        blocks += d.size
        chain.use_zero_points(exact_zero_points(d, m))
    if rounded < MIN_ROUNDED_SHARE * blocks:
        raise ModelFetchError(
            f"only {rounded} of the IR's {blocks} Q4_1 zero points are the rounded offsets of {gguf_path.name}: "
            "an unexpected encoding, left as it is"
        )
    model.validate_nodes_and_infer_types()
    temporary = ir_dir / f"{_IR_NAME}.exact-offsets.tmp.xml"
    ov.save_model(model, temporary, compress_to_fp16=False)
    del model, chains, tensors  # release every reference into the old .bin's mapping (Windows cannot replace it)
    if os.name == "nt":  # (only there: a mapped file can be replaced on POSIX)
        # Not on other systems: this runs on the window's inference thread, and a collection there finalizes
        # every garbage cycle of the process from it, Qt objects included (app/gui/gc_policy.py); it deadlocked the
        # first-start test on Linux (the GUI thread waiting for the GIL while the collection waited for the GUI).
        gc.collect()
    os.replace(temporary.with_suffix(".bin"), ir_dir / f"{_IR_NAME}.bin")
    os.replace(temporary, ir_dir / f"{_IR_NAME}.xml")
    summary = ExactOffsetSummary(matrices=len(used), blocks=blocks, rounded_zero_points=rounded)
    logger.info("exact Q4_1 offsets written to %s: %s", ir_dir, summary)
    return summary
