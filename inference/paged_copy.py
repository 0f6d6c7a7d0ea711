"""The fast prefill copy compiled with paged attention (``model._paged_attention_copy``): :class:`PagedCopy`, its
request and the block-layout cache it reads and writes, which the KV cache (``kv_cache.KVCache``) loads from its
exact states before the copy's first pass and takes back with ``PagedCopy.hand_over``.

Compiled through OpenVINO's ``paged_attention_transformation``, as openvino-genai runs its models, the copy has no
state but a block-layout cache that this module allocates, and attends causally block by block instead of
multiplying every cached key (1,024 tokens, 2 Xeon cores capped at AVX2: 2,153 -> 1,457 ms, genai 1,460;
``bench/results/xeon-amx/PAGED_PREFILL.md``). It has no attention mask, so the KV cache squeezes dead slots out
before it reads the cache.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import openvino as ov

from .file_pages import RELEASE_PERIOD_S, released_while
from .kv_states import _is_key_state, _layer_index, _state_buffer

# How often the paged copy's first pass hands its weights file's pages back, seconds: it reads the file to repack the
# weights faster than later passes read their embedding rows; every 10 ms, 13 MiB of it piled up (the first
# 1,024-token pass peaked at 531 MiB, 518 every 2 ms, the default model, Xeon with AMX, 2026-12-06)
REPACK_RELEASE_PERIOD_S = 0.002
# A paged prefill copy's compiled model -> the requests of it that PagedCopy objects hold (PagedCopy.release)
_REQUESTS: weakref.WeakKeyDictionary[ov.CompiledModel, weakref.WeakSet[ov.InferRequest]] = weakref.WeakKeyDictionary()


class PagedCopy:
    """The prefill copy compiled with paged attention (``model._paged_attention_copy``), its request and the cache it
    reads and writes: per layer a key and a value array ``[blocks, kv_heads, block, head_dim]`` (the compiled copy's
    ``key_cache.N`` / ``value_cache.N`` inputs with ``blocks`` set; f32, or bf16 held as uint16 bit patterns) that
    hold one sequence, block ``i`` its tokens ``[i * block, (i + 1) * block)``.

    It holds ``length`` tokens, the first ``start`` of them also in the exact request (copied in by ``load``), the rest
    computed by the copy (``feed``) and appended to the exact request by ``hand_over``.

    Args:
        compiled: a compiled copy with the paged inputs (``pages``).
        weights: the weights file ``compiled`` maps (its IR's ``.bin``), whose pages its first pass reads to repack
            the weights and hands back as it goes (``run``); None: not known (nothing is handed back).
    """

    PREFIXES = ("key_cache.", "value_cache.")

    def __init__(self, compiled: ov.CompiledModel, weights: Path | None = None):
        self._compiled = compiled
        self._request: ov.InferRequest | None = None
        self._weights = weights
        self._ran = False
        # cache input name -> its element type and the shape of one block [kv_heads, block, head_dim]
        self._inputs = {port.get_any_name(): (port.get_element_type(), [d.get_length() for d in port.get_partial_shape()[1:]])
                        for port in compiled.inputs if port.get_any_name().startswith(self.PREFIXES)}
        self._block = next(iter(self._inputs.values()))[1][1]
        self._arrays: dict[str, np.ndarray] = {}
        self.start = self.length = 0

    @property
    def request(self) -> ov.InferRequest:
        """The copy's infer request, made when first asked for after ``release`` (or at the first pass) with every
        cache array set as its input."""
        if self._request is None:
            self._request = self._compiled.create_infer_request()
            _REQUESTS.setdefault(self._compiled, weakref.WeakSet()).add(self._request)
            for name, array in self._arrays.items():
                self._request.set_tensor(name, ov.Tensor(array, list(array.shape), self._inputs[name][0]))
        return self._request

    def release(self) -> None:
        """Drop the request and have the compiled copy free its intermediate memory (``CompiledModel.release_memory``:
        the buffers of its last pass, which it keeps for the next one; a 1,024-token pass of the default model's bf16
        copy: 16 MiB, Xeon with AMX, 2026-12-06) once no request of it is left (another ``PagedCopy`` of the same
        compiled copy may hold one: a request made before ``release_memory`` and run after it corrupted the heap,
        2026.4; a fresh one did not). The next pass makes a fresh request; the repacked weights are kept (it repacks
        nothing again)."""
        if self._request is None:
            return
        others = _REQUESTS[self._compiled]
        others.discard(self._request)
        self._request = None
        if not others:
            self._compiled.release_memory()

    @staticmethod
    def pages(compiled: ov.CompiledModel) -> bool:
        """Whether ``compiled`` is a paged copy (it reads ``past_lens``), not a stateful one."""
        return any("past_lens" in port.get_names() for port in compiled.inputs)

    def reset(self) -> None:
        """Hold no token; the request is dropped (``release``) and the arrays are freed."""
        self.release()
        self._arrays = {}
        self.start = self.length = 0

    def load(self, request: ov.InferRequest, length: int, upcoming: int) -> None:
        """Copy the first ``length`` slots of the exact ``request``'s states (all live: no dead slot) into fresh
        arrays with room for ``upcoming`` more tokens; ``request`` keeps its states.

        Raises:
            KeyError: a state variable has no cache input of the same layer in the copy (another IR).
        """
        self.reset()
        self._grow(length + upcoming)
        for state in request.query_state() if length else ():
            name = self._input_of(state.name)
            blocks = self._arrays[name]
            heads, size, head_dim = blocks.shape[1:]
            used = -(-length // size)
            flat = np.zeros((heads, used * size, head_dim), dtype=blocks.dtype)
            data = state.state.data[0, :, :length]  # [kv_heads, length, head_dim] float32
            flat[:, :length] = _to_bf16_bits(data) if blocks.dtype == np.uint16 else data
            blocks[:used] = flat.reshape(heads, used, size, head_dim).transpose(1, 0, 2, 3)
        self.start = self.length = length

    def feed(self, token_ids: list[int], first: int) -> None:
        """Set the inputs of a pass over ``token_ids`` at positions (and slots) ``first, first + 1, ...``; ``first``
        must be ``length`` (the tokens the copy holds). The caller sets ``logits_to_keep`` and runs the request."""
        count = len(token_ids)
        assert first == self.length, (first, self.length)
        self._grow(first + count)
        blocks = -(-(first + count) // self._block)
        r = self.request
        r.set_tensor("input_ids", ov.Tensor(np.asarray(token_ids, dtype=np.int64)))
        r.set_tensor("position_ids", ov.Tensor(np.arange(first, first + count, dtype=np.int64)))
        r.set_tensor("past_lens", ov.Tensor(np.array([first], dtype=np.int32)))
        r.set_tensor("subsequence_begins", ov.Tensor(np.array([0, count], dtype=np.int32)))
        r.set_tensor("block_indices", ov.Tensor(np.arange(blocks, dtype=np.int32)))
        r.set_tensor("block_indices_begins", ov.Tensor(np.array([0, blocks], dtype=np.int32)))
        r.set_tensor("max_context_len", ov.Tensor(np.array(first + count, dtype=np.int32)))
        self.length = first + count

    def run(self) -> None:
        """Run the request on the inputs ``feed`` set, handing back the weights file's pages it reads while it runs
        (``file_pages.released_while``). The first run repacks the compiled copy's 4-bit weights (OpenVINO's CPU
        plugin does it at a dynamic-shape graph's first inference: +92 MiB resident for the default model, bf16 or
        f32) reading the whole weights file (its peak 73 MiB lower handed back); each run after it reads the embedding
        rows of its tokens in place (1,024 tokens of the default model: 29 MiB of the file, Linux mapping pages around
        each one read; they stayed resident from the second long prompt on, Xeon with AMX, 2026-12-06)."""
        with released_while(self._weights, REPACK_RELEASE_PERIOD_S if not self._ran else RELEASE_PERIOD_S):
            self.request.infer()
        self._ran = True

    def hand_over(self, request: ov.InferRequest) -> list[np.ndarray]:
        """Append the tokens the copy computed (``[start, length)``) to the exact ``request``'s f32 states, one
        variable at a time through one buffer (``_state_buffer``), each layer's arrays freed once read; then hold
        none. The copy's request and its last pass's buffers go first (``release``), so that the exact cache grows
        where they were (``bench/memory_bar.py``'s 1,024-token peak was this hand-over). Each variable's new rows are
        read from the blocks straight into the buffer the state is set from (``_rows_from_blocks``: one pass, bf16
        widened on the way), not through a transposed copy, a widened one and a copy into the buffer: 1,024 tokens
        of the default model handed over in 39-41 instead of 76-104 ms with the bf16 copy (AMD EPYC Zen 4, quiet, 3-4
        runs each, 2026-12-07; ~25 ms of it OpenVINO's own copy of the states set; with the f32 copy, capped at AVX2,
        44-68 against 62-66 ms in a noisier run).

        Returns:
            the buffers ``request``'s states now reference (``_state_buffer``), to keep alive until they are set again.
        """
        self.release()
        buffers: list[np.ndarray] = []
        for state in request.query_state():
            name = self._input_of(state.name)
            blocks = self._arrays.pop(name)
            heads, head_dim = blocks.shape[1], blocks.shape[3]
            rows = _state_buffer(buffers, (1, heads, self.length, head_dim))
            if self.start:
                rows[:, :, : self.start] = state.state.data[:, :, : self.start]
            _rows_from_blocks(blocks, rows[0], self.start, self.length)
            state.state = ov.Tensor(rows, shared_memory=True)
            del blocks
        self.reset()
        return buffers

    def _input_of(self, state_name: str) -> str:
        """The cache input of the copy that holds state variable ``state_name`` (``key_cache.N`` / ``value_cache.N``
        for layer N: the transformation numbers the layers as the variable ids do)."""
        return self.PREFIXES[0 if _is_key_state(state_name) else 1] + str(_layer_index(state_name))

    def _grow(self, tokens: int) -> None:
        """Make every array hold at least ``tokens`` tokens (whole blocks), keeping what they hold."""
        blocks = -(-tokens // self._block)
        for name, (kind, block_shape) in self._inputs.items():
            old = self._arrays.get(name)
            if old is not None and old.shape[0] >= blocks:
                continue
            array = np.zeros((blocks, *block_shape), dtype=np.uint16 if kind == ov.Type.bf16 else np.float32)
            if old is not None:
                array[: old.shape[0]] = old
            self._arrays[name] = array
            self.request.set_tensor(name, ov.Tensor(array, list(array.shape), kind))


def _to_bf16_bits(data: np.ndarray) -> np.ndarray:
    """float32 ``data`` rounded to the nearest bf16 (ties to even), as uint16 bit patterns."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _rows_from_blocks(blocks: np.ndarray, rows: np.ndarray, start: int, stop: int) -> None:
    """Copy tokens ``[start, stop)`` of a paged cache's ``blocks`` (``[n_blocks, heads, block, head_dim]``, float32 or
    bf16 bit patterns as uint16, widened exactly) into ``rows[:, start:stop]`` (float32 ``[heads, tokens, head_dim]``,
    contiguous), one pass: the whole blocks in one copy through a view of ``rows`` split the blocks' way, a partial
    block at either end on its own."""
    size = blocks.shape[2]
    head_end = min(stop, -(-start // size) * size)  # the first block's part, up to its end or stop
    tail_start = max(head_end, stop // size * size)  # the last block's part, from its start or head_end
    for low, high in ((start, head_end), (head_end, tail_start), (tail_start, stop)):
        if low == high:
            continue
        if low % size == 0 and high % size == 0:
            source = blocks[low // size : high // size].transpose(1, 0, 2, 3)  # [heads, n, block, head_dim]
            target = rows[:, low:high].reshape(rows.shape[0], -1, size, rows.shape[2])  # a view: rows is contiguous
        else:
            first = low // size * size
            source, target = blocks[low // size, :, low - first : high - first], rows[:, low:high]
        if blocks.dtype == np.uint16:
            np.left_shift(source, 16, out=target.view(np.uint32), dtype=np.uint32)
        else:
            np.copyto(target, source)


__all__ = ["PagedCopy"]
