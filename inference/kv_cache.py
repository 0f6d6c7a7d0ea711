"""The KV cache of one stateful OpenVINO model, with cheap rollback and the attention-sink roll.

A stateful IR (openvino-genai GGUF reader or optimum-intel export) keeps its KV cache in state variables, one
key and one value tensor ``[batch, kv_heads, seq, head_dim]`` per layer, and appends the keys/values of every
token it is fed. Rewriting those states costs about one decode step at a few hundred cached tokens and grows
with the cache (measured on the default model, 2 cores: replacing all 60 states with trimmed copies took ~6 ms at
220 cached tokens), too much to do after every rejected draft. So:

* **Rollback is a mask.** Rejected positions stay in the states but get 0 in ``attention_mask``; later tokens
  are fed with the logical positions they would have had, so they never attend to the dead slots. Rolling
  back costs nothing.
* **Dead slots are squeezed out rarely**: when ``physical length`` would exceed ``n_ctx + slack``, or at a
  roll, which rewrites the states anyway.
* **A roll** (StreamingLLM, arXiv 2309.17453, section 3.2) keeps the first ``n_keep`` tokens, drops the next
  ``n_discard``, and re-rotates the keys of the remaining tokens by ``-n_discard`` positions (shift-RoPE), so
  positions stay contiguous and nothing is recomputed.
* **Sliding-window attention counts slots.** In an exported IR a sliding window (Mistral, Phi-3, Gemma 2/3)
  spans physical slots, dead ones included, so dead slots would push live tokens out of it (measured on a tiny
  Mistral with a 16-token window: logits off by up to 3.8). The physical length is therefore kept inside the
  window: dead slots are squeezed out before a pass would cross it.
* **Fast prefill hands states over.** Given a second, faster compiled copy of the model (bf16; see
  ``precision``), a long prompt is computed by that copy and its states are copied into this request. Both
  copies see the same slots, mask and positions, so the bookkeeping is unchanged; a copy costs ~0.23 ms per
  cached token (1,024 tokens: 233 ms against 2.5 s saved, Xeon with AMX). A prompt prefilled in several passes
  (the engine keeps each pass short so that Stop answers quickly) stays in the copy from pass to pass: the
  states are moved in before its first pass and back only when this request needs them (the next decode pass,
  a roll, a compaction), not twice per pass. A move empties each variable of the side it leaves as soon as it is
  read, so the cache is resident once (``_copy_states``).
* **The copy pages its attention** where it can (``model._paged_attention_copy``): compiled through OpenVINO's
  ``paged_attention_transformation``, as openvino-genai runs its models, it has no state but a block-layout cache
  that this module allocates (``PagedCopy``), and attends causally block by block instead of multiplying every
  cached key (1,024 tokens, 2 Xeon cores capped at AVX2: 2,153 -> 1,457 ms, genai 1,460;
  ``bench/results/xeon-amx/PAGED_PREFILL.md``). It has no attention mask, so dead slots are squeezed out before it
  reads the cache; tokens cached before its first pass are copied into its blocks and stay in this request, and
  only the tokens it computed are appended here after it (the exact states are never rounded to its bf16).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openvino as ov

from .file_pages import RELEASE_PERIOD_S, released_while
from .rope import RopeParameters, RopeUnsupportedError

# Shortest chunk the fast prefill copy computes. Below it the copy still saves some time with the one-pass
# hand-over (a 32-token prompt: prefill 42 instead of 71 ms, the first step 16 instead of 12; 16 tokens: 48 against
# 52 ms for both; AMD EPYC Zen 4, bf16 copy, quiet, 2026-12-07), but the copy's first pass repacks its weights (+92
# MiB resident: PagedCopy.run), which every short chat would then pay, and a 32-token reply's peak would pass
# openvino-genai's (issue 33's memory bar); both waits are under a tenth of a second.
FAST_PREFILL_MIN_TOKENS = 64
# How often the paged copy's first pass hands its weights file's pages back, seconds: it reads the file to repack the
# weights faster than later passes read their embedding rows; every 10 ms, 13 MiB of it piled up (the first
# 1,024-token pass peaked at 531 MiB, 518 every 2 ms, the default model, Xeon with AMX, 2026-12-06)
REPACK_RELEASE_PERIOD_S = 0.002
# A paged prefill copy's compiled model -> the requests of it that PagedCopy objects hold (PagedCopy.release)
_REQUESTS: weakref.WeakKeyDictionary[ov.CompiledModel, weakref.WeakSet[ov.InferRequest]] = weakref.WeakKeyDictionary()


class KVCache:
    """One inference request of a stateful causal LM and the bookkeeping of its cached tokens.

    Logical token ``i`` (``tokens[i]``) always has position id ``i``; it lives at physical slot
    ``slots[i]`` of the state tensors. Slots not in ``slots`` are dead (masked).

    Args:
        compiled_model: an ``ov.CompiledModel`` with inputs input_ids, attention_mask, position_ids, beam_idx
            and output logits ``[1, S, vocab]``.
        rope: RoPE parameters for rolls, or None when the model cannot roll (``roll`` then raises).
        slack: how many dead slots may accumulate beyond ``n_ctx`` before they are squeezed out.
        window: the model's sliding-window size in tokens, or None; the physical length never exceeds it.
        prefill_model: a faster compiled copy of the same IR that ``prefill`` may use, stateful or with paged attention
            (``PagedCopy.pages``), or None.
        kept_outputs: names of outputs with one row per fed token (the target's hidden states, which a draft head
            reads, and a fused head's layer features) whose rows are kept for every cached token (``rows``). Names
            the model has no output of are ignored.
        prefill_weights: the weights file ``prefill_model`` maps, when it is a paged copy (``PagedCopy``'s
            ``weights``), or None.
    """

    def __init__(
        self,
        compiled_model: ov.CompiledModel,
        rope: RopeParameters | None,
        slack: int = 64,
        window: int | None = None,
        prefill_model: ov.CompiledModel | None = None,
        kept_outputs: Sequence[str] = (),
        prefill_weights: Path | None = None,
    ):
        self._request = compiled_model.create_infer_request()
        paged = prefill_model is not None and PagedCopy.pages(prefill_model)
        self._paged = PagedCopy(prefill_model, prefill_weights) if paged else None
        # a stateful copy's request (a sliding-window model's copy, model.load_model); a paged copy holds its own
        stateful = prefill_model is not None and not paged
        self._prefill_request = prefill_model.create_infer_request() if stateful else None
        self._rope = rope
        self._slack = slack
        self._window = window
        input_names = {name for port in compiled_model.inputs for name in port.get_names()}
        self._has_beam_idx = "beam_idx" in input_names
        self._has_logits_to_keep = "logits_to_keep" in input_names
        output_names = {name for port in compiled_model.outputs for name in port.get_names()}
        # name -> float32 [capacity, *row shape]: that output's row of each cached token
        self._rows = {name: np.zeros((0, 0), dtype=np.float32) for name in kept_outputs if name in output_names}
        self.tokens: list[int] = []
        self._slots: list[int] = []
        self._alive = np.zeros(0, dtype=np.int64)
        self.fast_prefilled = 0  # tokens computed by the prefill copy since the cache was created
        self._states_in_copy = False  # the prefill copy holds the current states (this request's are stale)
        # "exact"/"copy" -> the buffers that request's states were last set through (_set_state), kept alive
        self._held: dict[str, list[np.ndarray]] = {"exact": [], "copy": []}

    @property
    def request(self) -> ov.InferRequest:
        """The decode request (a benchmark reads its profiling info; ``bench/fc_profile.py``)."""
        return self._request

    @property
    def physical_length(self) -> int:
        """Slots held in the state tensors, dead ones included."""
        return int(self._alive.shape[0])

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        """Empty the cache; the memory of its states is freed (``_empty_states``)."""
        _empty_states(self._request)
        self._held["exact"] = []
        if self._paged is not None:
            self._paged.reset()
        elif self._prefill_request is not None:
            _empty_states(self._prefill_request)
            self._held["copy"] = []
        self._states_in_copy = False
        self.tokens, self._slots = [], []
        self._alive = np.zeros(0, dtype=np.int64)

    def forward(
        self,
        token_ids: list[int],
        n_ctx: int | None = None,
        last_only: bool = False,
        inputs: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Feed tokens at the next logical positions and return their logits.

        Args:
            token_ids: ids to append (at least one).
            n_ctx: when given, dead slots are squeezed out first if the physical length would pass
                ``n_ctx + slack``. The caller must have rolled so that ``len(self) + len(token_ids) <= n_ctx``.
            last_only: compute and return only the last row (a prefill needs nothing else).
            inputs: further model inputs by name (a draft head's ``hidden_states``, ``[1, len(token_ids), ...]``).

        Returns:
            float32 ``[len(token_ids), vocab]`` logits (``[1, vocab]`` with last_only), a copy; row i predicts
            the token after token_ids[i].
        """
        self._make_room(len(token_ids), n_ctx)
        self._take_states_back()
        return self._infer(self._request, token_ids, last_only, inputs)

    def output(self, name: str) -> np.ndarray:
        """A copy of output ``name`` of the last ``forward`` pass, without its batch axis (e.g. float32
        ``[rows, hidden]``)."""
        return self._request.get_tensor(name).data[0].copy()

    def rows(self, start: int, end: int, name: str | None = None) -> np.ndarray:
        """A kept output's rows of cached tokens ``[start, end)``: float32 ``[end - start, *row shape]`` (e.g.
        ``[end - start, hidden]``), a view valid until the next pass (see ``kept_outputs``).

        Args:
            start, end: the range of logical tokens.
            name: the output (None: the first of ``kept_outputs`` the model has).

        Raises:
            ValueError: the cache keeps no such output, or the range is not within the cached tokens.
        """
        if not self._rows or (name is not None and name not in self._rows):
            raise ValueError(f"this KV cache keeps no per-token output {name or ''}".rstrip())
        if not 0 <= start <= end <= len(self.tokens):
            raise ValueError(f"rows [{start}, {end}) are not cached (the cache holds {len(self.tokens)} tokens)")
        return self._rows[name if name is not None else next(iter(self._rows))][start:end]

    def prefill(self, token_ids: list[int], n_ctx: int | None = None, upcoming: int = 0) -> np.ndarray:
        """Like ``forward(token_ids, n_ctx, last_only=True)``, computed by the fast prefill copy when it pays.

        It pays when the prompt still to prefill (``upcoming``, this pass included) is at least
        FAST_PREFILL_MIN_TOKENS long and large against the states to copy (two copies of the cache against the
        compute saved per token; see the module docstring). Once the copy holds the states, the following passes
        of the prompt stay there.

        Args:
            token_ids: ids to append (at least one).
            n_ctx: as for ``forward``.
            upcoming: prompt tokens still to prefill, ``token_ids`` included (fewer counts as ``len(token_ids)``).

        Returns:
            float32 ``[1, vocab]``: the logits after the last token (from the copy that computed it).
        """
        count = len(token_ids)
        upcoming = max(upcoming, count)
        self._make_room(count, n_ctx)
        if not self.prefills_in_copy(upcoming):
            self._take_states_back()
            return self._infer(self._request, token_ids, last_only=True)
        if not self._states_in_copy:
            if self._paged is not None:
                self.compact()  # the paged copy attends to every slot it holds
                self._paged.load(self._request, self.physical_length, upcoming)
            elif self.physical_length:
                self._held["copy"] = _move_states(self._request, self._prefill_request)
                self._held["exact"] = []
            else:
                self._prefill_request.reset_state()
            self._states_in_copy = True
        request = self._paged.request if self._paged is not None else self._prefill_request
        logits = self._infer(request, token_ids, last_only=True)
        self.fast_prefilled += count
        return logits

    def prefills_in_copy(self, upcoming: int) -> bool:
        """Whether ``prefill`` would compute its next pass with the fast prefill copy, ``upcoming`` prompt tokens
        being left to prefill."""
        if self._paged is None and self._prefill_request is None:
            return False
        return self._states_in_copy or (upcoming >= FAST_PREFILL_MIN_TOKENS and upcoming * 8 >= self.physical_length)

    def _take_states_back(self) -> None:
        """Move the states from the prefill copy into this request if the copy holds the current ones (``_move_states``:
        the copy keeps none of them, so a long prompt's states are never resident twice; kept, they were ~55 MB of a
        3,000-token prompt until the next one, the default model, measured 2026-12-05)."""
        if self._states_in_copy:
            if self._paged is not None:
                self._held["exact"] = self._paged.hand_over(self._request)
            else:
                self._held["exact"] = _move_states(self._prefill_request, self._request)
                self._held["copy"] = []
            self._states_in_copy = False

    def _make_room(self, count: int, n_ctx: int | None) -> None:
        """Squeeze dead slots out if feeding ``count`` tokens would pass n_ctx + slack or the sliding window."""
        limit = n_ctx + self._slack if n_ctx is not None else None
        if self._window is not None:
            limit = min(limit, self._window) if limit is not None else self._window
        if limit is not None and self.physical_length + count > limit:
            self.compact()

    def _infer(
        self, request: ov.InferRequest, token_ids: list[int], last_only: bool, inputs: dict | None = None
    ) -> np.ndarray:
        count = len(token_ids)
        start = len(self.tokens)
        first_slot = self.physical_length
        mask = np.concatenate([self._alive, np.ones(count, dtype=np.int64)])[None, :]
        paged = self._paged is not None and request is not self._request
        if paged:  # no dead slot in the copy (prefill compacts): slots are positions
            self._paged.feed(token_ids, first_slot)
        else:
            request.set_tensor("input_ids", ov.Tensor(np.asarray([token_ids], dtype=np.int64)))
            request.set_tensor("attention_mask", ov.Tensor(mask))
            request.set_tensor("position_ids", ov.Tensor(np.arange(start, start + count, dtype=np.int64)[None, :]))
            if self._has_beam_idx:
                request.set_tensor("beam_idx", ov.Tensor(np.zeros(1, dtype=np.int32)))
        if self._has_logits_to_keep:
            request.set_tensor("logits_to_keep", ov.Tensor(np.array([1 if last_only else count], dtype=np.int64)))
        for name, value in (inputs or {}).items():
            request.set_tensor(name, ov.Tensor(np.ascontiguousarray(value)))
        if paged:
            self._paged.run()
        else:
            request.infer()
        self._alive = mask[0]
        self.tokens.extend(int(t) for t in token_ids)
        self._slots.extend(range(first_slot, first_slot + count))
        for name in self._rows:
            self._keep_rows(name, start, _rows_of(request, name, paged))
        return _rows_of(request, "logits", paged)[-1 if last_only else -count :].copy()

    def _keep_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Store ``rows`` ``[count, *row shape]`` as output ``name``'s kept rows of logical tokens
        ``[start, start + count)``."""
        kept = self._rows[name]
        end = start + rows.shape[0]
        if end > kept.shape[0] or kept.shape[1:] != rows.shape[1:]:
            grown = np.zeros((max(end, 2 * kept.shape[0], 256), *rows.shape[1:]), dtype=np.float32)
            if kept.shape[1:] == rows.shape[1:]:
                grown[:start] = kept[:start]
            self._rows[name] = kept = grown
        kept[start:end] = rows

    def truncate(self, length: int) -> None:
        """Roll back to the first ``length`` logical tokens by masking the rest (no state is rewritten)."""
        if length >= len(self.tokens):
            return
        self._alive[self._slots[length:]] = 0
        del self.tokens[length:]
        del self._slots[length:]

    def compact(self) -> None:
        """Rewrite the states without dead slots (cost grows with the cache; done rarely)."""
        if len(self._slots) == self.physical_length:
            return
        self._rewrite(np.asarray(self._slots, dtype=np.int64), shift_from=len(self._slots), delta=0)

    def roll(self, n_keep: int, n_discard: int) -> int:
        """Attention-sink roll: drop logical tokens ``[n_keep, n_keep + n_discard)`` and shift the rest back.

        Args:
            n_keep: tokens kept at the start (attention sinks).
            n_discard: tokens dropped after them; clipped to what is cached.

        Returns:
            the number of tokens actually dropped.

        Raises:
            RopeUnsupportedError: the model's config gave no usable RoPE parameters.
        """
        if self._rope is None:
            raise RopeUnsupportedError(
                "this model's RoPE parameters are unknown, so its KV cache cannot be rolled; "
                "raise n_ctx to cover the whole chat"
            )
        dropped = max(0, min(n_discard, len(self.tokens) - n_keep))
        if dropped == 0:
            return 0
        kept = self._slots[:n_keep] + self._slots[n_keep + dropped :]
        self._rewrite(np.asarray(kept, dtype=np.int64), shift_from=n_keep, delta=-dropped)
        length = len(self.tokens)
        for kept in self._rows.values():
            kept[n_keep : length - dropped] = kept[n_keep + dropped : length]
        del self.tokens[n_keep : n_keep + dropped]
        return dropped

    def _rewrite(self, slots: np.ndarray, shift_from: int, delta: int) -> None:
        """Replace every state by its ``slots`` entries; rotate keys from index ``shift_from`` by ``delta``."""
        self._take_states_back()
        buffers: list[np.ndarray] = []
        for state in self._request.query_state():
            data = state.state.data
            new = np.ascontiguousarray(data[:, :, slots, :])
            if delta and _is_key_state(state.name) and shift_from < new.shape[2]:
                new[:, :, shift_from:, :] = self._rope.shift_keys(new[:, :, shift_from:, :], delta)
            _set_state(state, new, buffers)
        self._held["exact"] = buffers
        self._slots = list(range(len(slots)))
        self._alive = np.ones(len(slots), dtype=np.int64)

    def copy_from(self, other: "KVCache") -> None:
        """Make this cache a copy of ``other`` (a cache of the same compiled IR): states, tokens, slots, mask."""
        other._take_states_back()
        self._held["exact"] = _copy_states(other._request, self._request)
        self._states_in_copy = False
        self.tokens, self._slots = list(other.tokens), list(other._slots)
        self._alive = other._alive.copy()
        self._rows = {name: rows.copy() for name, rows in other._rows.items()}

    def layer_keys(self, layer: int = 0) -> np.ndarray:
        """float32 ``[batch, kv_heads, len(self), head_dim]`` cached keys of one layer, live slots only."""
        self._take_states_back()
        keys = [s for s in self._request.query_state() if _is_key_state(s.name)]
        keys.sort(key=lambda s: _layer_index(s.name))
        return keys[layer].state.data[:, :, self._slots, :].copy()


def _rows_of(request: ov.InferRequest, name: str, paged: bool) -> np.ndarray:
    """Output ``name`` of the last pass of ``request`` as ``[rows, *row shape]`` (a view): a stateful graph's outputs
    are ``[1, rows, ...]``, a paged copy's ``[rows, 1, ...]`` (the tokens are its batch axis)."""
    data = request.get_tensor(name).data
    return data[:, 0] if paged else data[0]


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


def _copy_states(source: ov.InferRequest, destination: ov.InferRequest, move: bool = False) -> list[np.ndarray]:
    """Copy every state variable of ``source`` into the same-named variable of ``destination`` (two requests of
    the same IR, possibly compiled at different precisions; states are read and written as f32), one variable at a
    time through one buffer (``_set_state``). With ``move`` each variable of ``source`` is emptied (no slot kept)
    right after it is read, so a long prompt's KV cache is never resident twice (1,024 tokens of the default model:
    47 MB).

    Returns:
        the buffers ``destination``'s states now reference (``_set_state``), to keep alive until they are set again.
    """
    targets = {state.name: state for state in destination.query_state()}
    buffers: list[np.ndarray] = []
    for state in source.query_state():
        data = state.state.data
        _set_state(targets[state.name], data, buffers)
        if move and data.ndim == 4:  # [batch, kv_heads, seq, head_dim]: keep no slot
            state.state = ov.Tensor(np.zeros((*data.shape[:2], 0, *data.shape[3:]), dtype=np.float32))
    return buffers


def _empty_states(request: ov.InferRequest) -> None:
    """Reset every state variable of ``request`` and free its memory: each KV variable is set to no slot.

    ``InferRequest.reset_state`` alone keeps the CPU plugin's memory of each variable (2026.4): a reset cache held its
    last prompt's KV cache resident, so the next long prompt's prefill copy ran on top of it (1,024 tokens of the
    default model: 47 MB; ``bench/memory_bar.py``'s peak 579 -> 551 MiB, Xeon with AMX, 2026-12-06).
    """
    states = request.query_state()
    shapes = [_slots_shape(state) for state in states]  # read before the reset, which zeroes them
    request.reset_state()
    for state, shape in zip(states, shapes):
        if shape is not None and len(shape) == 4 and shape[2]:  # [batch, kv_heads, seq, head_dim] holding slots
            state.state = ov.Tensor(np.zeros((1, shape[1], 0, shape[3]), dtype=np.float32))
    request.reset_state()  # read back, an emptied variable fails a stride check in the plugin (2026.4); a reset one not


def _slots_shape(state: ov.VariableState) -> list[int] | None:
    """The shape of ``state``'s tensor, or None where the variable was emptied and not reset since (``_move_states``
    leaves the stateful prefill copy so: reading it fails the plugin's stride check, 2026.4; it holds no slot)."""
    try:
        return list(state.state.shape)
    except RuntimeError:
        return None


def _move_states(source: ov.InferRequest, destination: ov.InferRequest) -> list[np.ndarray]:
    """``_copy_states`` with ``move``: ``source`` keeps no slot after it (its states are stale from then on)."""
    return _copy_states(source, destination, move=True)


def _state_buffer(buffers: list[np.ndarray], shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` (float32: the exact request's states) over the last of ``buffers``, which
    is grown (a larger one appended) to fit: what a state is set from (``ov.Tensor(..., shared_memory=True)``).

    OpenVINO's CPU plugin copies a state set into its own memory and also keeps the tensor it was given until the
    variable is set again ("to extend the lifetime", ``VariableStateKVcache::set_state_impl``, 2026.4). A tensor
    made from a copy of each variable's data (``ov.Tensor(array)``) therefore kept a second copy of the whole KV
    cache resident (+47 MB at 1,024 tokens of the default model); one buffer reused for every variable costs the
    size of one. The plugin never reads the kept tensor again, but the buffers are kept alive by the caller (the
    KV cache) until the variables are set again all the same, so that no kept tensor ever points at freed memory.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if not buffers or buffers[-1].nbytes < nbytes:
        buffers.append(np.empty(nbytes, dtype=np.uint8))
    return buffers[-1][:nbytes].view(dtype).reshape(shape)


def _set_state(state: ov.VariableState, data: np.ndarray, buffers: list[np.ndarray]) -> None:
    """Set ``state`` to ``data`` (copied) through ``_state_buffer(buffers, ...)``."""
    view = _state_buffer(buffers, data.shape, data.dtype)
    np.copyto(view, data)
    state.state = ov.Tensor(view, shared_memory=True)


def _is_key_state(name: str) -> bool:
    """Whether a state variable holds keys (not values).

    Variable ids join the input and output names: optimum-intel writes ``past_key_values.3.keypresent.3.key`` /
    ``...valuepresent.3.value``, but openvino-genai's GGUF reader writes ``past_key_values.3.valuepresent.3.key``
    for *values*. So the first of "key"/"value" after the ``past_key_values`` prefix decides.
    """
    rest = name.replace("past_key_values", "")
    key, value = rest.find("key"), rest.find("value")
    if key < 0 and value < 0:
        raise RopeUnsupportedError(f"cannot tell keys from values in KV-cache state '{name}'; this model cannot roll")
    return value < 0 or 0 <= key < value


def _layer_index(name: str) -> int:
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return 0


__all__ = ["KVCache"]
