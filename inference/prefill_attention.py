"""Attention of the f32 prefill copy as plain products, in causal blocks, instead of OpenVINO's fused f32 attention.

Where the CPU has no bf16 (AVX2, or ``ONEDNN_MAX_CPU_ISA=AVX2``), a long prompt is prefilled by an f32 copy of the
model with OpenVINO's kernels (``model.LoadedModel.prefill_compiled``). OpenVINO's CPU plugin fuses each attention
of a stateful graph into ``ScaledDotProductAttentionWithKVCache``, whose f32 kernel (``KT_MLAS``, 2026.4) multiplies
4 query rows at a time by every cached key, the masked ones included: 804 + 28 ms of a 1,024-token prefill's
2,065 ms on 2 Xeon cores capped at AVX2 (``PERF_COUNT``; the weight products 1,098 ms), where openvino-genai's paged
attention skips what the causal mask hides. The same attention written as MatMul / Add / Softmax / MatMul runs in
oneDNN's f32 GEMM, and split into query blocks, each block multiplies only the keys up to its own last row: the
products and the softmax a causal mask zeroes are never computed.

Design rules:

- Same attention. Each row is softmax(q k^T / sqrt(d) + mask) v over the same keys, values and additive mask as the
  fused op; a key after a block's last row is masked for every row of the block (the mask is causal within the pass,
  whatever dead slots it also masks), so leaving it out drops only terms whose weight is exactly 0. Only the
  summation order differs from the fused kernel (logits within 1.5e-4 after 1,024 tokens of the default model,
  every argmax the same).
- Grouped queries without copies: the ``H`` query heads are reshaped to ``[B, G, (H/G) * L, D]`` against the ``G``
  KV heads (query head ``h`` reads KV head ``h // (H/G)``, as the exported graph's broadcast does), so keys and
  values are read from the KV cache's ``Concat`` as they are stored.
- Only the prefill copy, only in f32: the exact decode model keeps its fused attention (its numerics are the exact
  path's), and the bf16 copy's fused kernel (``KT_ONEDNN``) is fast already.
- The KV cache stays the model's state variables, so the hand-over (``kv_states._move_states``) is unchanged.
- Off by default (the default prefill copy pages its attention instead, :func:`paged_prefill_attention`):
  ``SPECCHAT_PREFILL_ATTENTION=blocks`` in the environment turns it on. It trades memory for time to first token
  (against the stateful copy): on 2 Xeon cores capped at AVX2 (``bench/memory_bar.py``, back to back, in
  ``bench/results/xeon-amx-capped-avx2/PREFILL_ATTENTION.md``) TTFT at 1,024 tokens 2,104 -> 1,686 ms (genai 1,485 /
  1,439 in the same runs), peak 714 -> 821 MiB (genai 520 / 519): OpenVINO keeps each block's scores, weights and softmax in buffers of their own,
  and every node of the compiled copy costs resident memory (4 blocks: +31 MiB loaded). The memory bar holds the
  default.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import openvino as ov
import openvino.opset13 as ops

#: Query blocks per attention: block i of a pass of L tokens after P cached ones reads the first P + (i + 1) L / n
#: keys, so a first pass computes (n + 1) / 2n of the full products (4: 62%). Every node costs resident memory in
#: the compiled copy (8 blocks: +84 MiB loaded, measured), and 4, 8 and 16 blocks prefilled 1,024 tokens alike.
QUERY_BLOCKS = 4


#: The environment variable that chooses the prefill copy's attention: unset (or anything else), OpenVINO's paged
#: attention where it can (``model._paged_attention_copy``, :func:`paged_prefill_attention`); ``stateful``, the
#: stateful graph's fused one; ``blocks``, the f32 copy's attention in causal query blocks (below), stateful too.
SWITCH = "SPECCHAT_PREFILL_ATTENTION"
#: The values of ``SWITCH`` that keep the stateful copy (paged attention off).
STATEFUL_VALUES = ("stateful", "blocks")


def blocked_prefill_attention() -> int:
    """Query blocks for the f32 prefill copy's attention: ``QUERY_BLOCKS`` with ``SPECCHAT_PREFILL_ATTENTION=blocks``
    in the environment, else 0 (OpenVINO's fused attention)."""
    return QUERY_BLOCKS if os.environ.get(SWITCH, "").strip().lower() == "blocks" else 0


def paged_prefill_attention() -> bool:
    """Whether the prefill copy runs OpenVINO's paged attention (where the model has one it can page, and its folder
    is in the model store: ``paged_graph``): yes unless ``SPECCHAT_PREFILL_ATTENTION`` is ``stateful`` or ``blocks``.
    It prefills 1,024 tokens in 0.80x openvino-genai's time natively and 0.96x under the AVX2 cap (against 1.07x /
    1.39x with the stateful copy, Xeon with AMX, ``bench/results/xeon-amx/PAGED_PREFILL.md``). Its graph is made by a
    child process, once per model and outputs, and read at load: ``paged_attention_transformation`` holds Python's
    GIL for its whole run (179 ms on that Xeon, ~0.5 s on a CPU 3x slower), which froze the window while the model
    loaded when the load called it (``tests/gui/test_gil_holds.py``, ``test_responsiveness.py``)."""
    return os.environ.get(SWITCH, "").strip().lower() not in STATEFUL_VALUES


def _int(values) -> ov.Node:
    return ops.constant(np.array(values, dtype=np.int64))


def _slice(data: ov.Output, start: ov.Output, stop: ov.Output, axis: int) -> ov.Node:
    return ops.slice(data, start, stop, _int([1]), _int([axis]))


def _kv_source(value: ov.Output) -> ov.Output | None:
    """The ``Concat`` of cached and new keys (or values), ``[B, G, S, D]``, behind an SDPA input (the exported graph's
    GQA Unsqueeze / Broadcast / Reshape between); None if there is none within a few nodes."""
    for _ in range(4):
        if value.get_node().get_type_name() == "Concat":
            return value
        value = value.get_node().input_value(0)
    return None


@contextmanager
def attention_in_blocks(model: ov.Model, blocks: int = QUERY_BLOCKS) -> Iterator[int]:
    """Within the block, ``model``'s attentions are query-blocked products (:func:`decompose_attention`; ``blocks``
    0: left fused, nothing changes); after it,
    the fused attentions are back in place (the replacements, no longer reachable, go with their last reference).
    Compiling a copy this way shares every weight constant with ``model``: a ``model.clone()`` kept ~90 MiB more
    resident (default model, capped Xeon, ``bench/memory_bar.py``). Yields how many attentions were replaced."""
    replaced = decompose_attention(model, blocks) if blocks > 0 else []
    try:
        yield len(replaced)
    finally:
        for attention, replacement in replaced:
            for target in replacement.get_target_inputs():
                target.replace_source_output(attention)
        if replaced:
            model.validate_nodes_and_infer_types()


def decompose_attention(model: ov.Model, blocks: int = QUERY_BLOCKS) -> list[tuple[ov.Output, ov.Output]]:
    """Replace each ``ScaledDotProductAttention`` of a stateful causal LM (query ``[B, H, L, D]``, keys and values
    from a KV-cache ``Concat`` ``[B, G, S, D]``, an additive mask ``[B, 1, L, S]``, not ``causal``, no scale input)
    by query-blocked MatMul / Softmax products (module docstring), in place. Attentions of another form are left.

    Returns:
        ``(attention output, replacement output)`` of each replaced attention ([]: the graph is left as it was).
    """
    replaced, tiled, bounds = [], {}, None
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ScaledDotProductAttention" or node.get_input_size() != 4:
            continue
        if node.get_attributes().get("causal"):
            continue
        q, mask = node.input_value(0), node.input_value(3)
        k, v = _kv_source(node.input_value(1)), _kv_source(node.input_value(2))
        shape = q.get_partial_shape()
        if k is None or v is None or shape.rank.is_dynamic or shape.rank.get_length() != 4:
            continue
        heads, head = shape[1], shape[3]
        groups = k.get_partial_shape()[1]
        if heads.is_dynamic or head.is_dynamic or groups.is_dynamic or heads.get_length() % groups.get_length():
            continue
        heads, head, groups = heads.get_length(), head.get_length(), groups.get_length()
        per_group = heads // groups
        if bounds is None:  # the same for every layer: this pass's L, its P cached tokens, each block's rows
            length = ops.gather(ops.shape_of(q), _int([2]), _int(0))
            past = ops.subtract(ops.gather(ops.shape_of(k), _int([2]), _int(0)), length)
            stops = [ops.divide(ops.multiply(length, _int([i])), _int([blocks])) for i in range(blocks + 1)]
            bounds = [(stops[i], stops[i + 1], ops.add(past, stops[i + 1])) for i in range(blocks)]
        scaled = ops.multiply(q, ops.constant(np.array(1 / np.sqrt(head), dtype=np.float32)))
        outputs = []
        for i, (start, stop, keys_end) in enumerate(bounds):
            q_i = ops.reshape(_slice(scaled, start, stop, 2), _int([0, groups, -1, head]), True)  # [B, G, (H/G) l, D]
            k_i, v_i = _slice(k, _int([0]), keys_end, 2), _slice(v, _int([0]), keys_end, 2)
            mask_key = (mask.get_node().get_friendly_name(), mask.get_index(), i)
            if mask_key not in tiled:  # shared by every layer: one slice of the model's mask per block
                rows = _slice(_slice(mask, start, stop, 2), _int([0]), keys_end, 3)  # [B, 1, l, P + stop]
                tiled[mask_key] = ops.concat([rows] * per_group, 2) if per_group > 1 else rows
            scores = ops.add(ops.matmul(q_i, k_i, False, True), tiled[mask_key])
            weighted = ops.matmul(ops.softmax(scores, -1), v_i, False, False)  # [B, G, (H/G) l, D]
            outputs.append(ops.reshape(weighted, _int([0, heads, -1, head]), True))
        attention = ops.concat(outputs, 2)
        for target in node.output(0).get_target_inputs():
            target.replace_source_output(attention.output(0))
        replaced.append((node.output(0), attention.output(0)))
    if replaced:
        model.validate_nodes_and_infer_types()
    return replaced
