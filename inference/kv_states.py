"""A stateful OpenVINO request's KV state variables: copied or moved between two requests of one IR, emptied with
their memory freed, set through one reused buffer, and told apart (keys from values, their layer). What the KV cache
(``kv_cache.KVCache``) and the paged prefill copy (``paged_copy.PagedCopy``) do to states goes through here.
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from .rope import RopeUnsupportedError


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
