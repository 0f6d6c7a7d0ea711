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
  a roll, a compaction, a rollback), not twice per pass. A move empties each variable of the side it leaves as soon as it is
  read, so the cache is resident once (``kv_states._copy_states``).
* **The copy pages its attention** where it can (``model._paged_attention_copy``): compiled through OpenVINO's
  ``paged_attention_transformation``, as openvino-genai runs its models, it has no state but a block-layout cache
  that ``paged_copy.PagedCopy`` allocates, and attends causally block by block instead of multiplying every
  cached key (1,024 tokens, 2 Xeon cores capped at AVX2: 2,153 -> 1,457 ms, genai 1,460;
  ``bench/results/xeon-amx/PAGED_PREFILL.md``). It has no attention mask, so dead slots are squeezed out before it
  reads the cache; tokens cached before its first pass are copied into its blocks and stay in this request, and
  only the tokens it computed are appended here after it (the exact states are never rounded to its bf16).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openvino as ov

from .kv_states import _copy_states, _empty_states, _is_key_state, _layer_index, _move_states, _set_state
from .paged_copy import PagedCopy
from .rope import RopeParameters, RopeUnsupportedError

# Shortest chunk the fast prefill copy computes. Below it the copy still saves some time with the one-pass
# hand-over (a 32-token prompt: prefill 42 instead of 71 ms, the first step 16 instead of 12; 16 tokens: 48 against
# 52 ms for both; AMD EPYC Zen 4, bf16 copy, quiet, 2026-12-07), but the copy's first pass repacks its weights (+92
# MiB resident: PagedCopy.run), which every short chat would then pay, and a 32-token reply's peak would pass
# openvino-genai's (issue 33's memory bar); both waits are under a tenth of a second.
FAST_PREFILL_MIN_TOKENS = 64


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
        """Roll back to the first ``length`` logical tokens by masking the rest (no state is rewritten). States left
        in the prefill copy (a prompt answered with no decode pass after it) are taken back first: the paged copy has
        no attention mask, and a prefill going on in it read the masked tokens (a newcomer's one-token reply to a
        long prompt turned every later reply to garbage)."""
        if length >= len(self.tokens):
            return
        self._take_states_back()
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


__all__ = ["KVCache"]
