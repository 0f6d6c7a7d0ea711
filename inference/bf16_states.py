"""The bf16 prefill copy's KV-cache variables declared bf16, so that reading its states copies rows instead of
converting them.

The fast prefill copy (``precision.FAST_PREFILL_PRECISION``, bf16) keeps its KV cache in bf16 whatever
``KV_CACHE_PRECISION`` says (OpenVINO 2026.4: the fused attention's cache takes its compute precision; with f32 set,
every value read back has its low 16 bits zero). The IR declares the variables f32, so reading a state (``get_state``,
the KV hand-over of ``kv_cache._copy_states``) converts the cache to f32 one 64-value row at a time: 69 ms for the
default model's 1,024-token cache (60 variables) on a Xeon with AMX, against 16 ms for an f32 copy's rows of the same
size: half of the first decode step after a long prompt (``bench/handover_cost.py``,
``bench/results/xeon-amx/DECODE_AT_1024.md``). Declared bf16, the read copies the rows (9.8 ms) and the hand-over
widens them to f32 itself (a 16-bit shift, exact): the same values.

The form that compiles (OpenVINO 2026.4; the plain one, a ``Convert`` after the ``ReadValue`` and before the
``Assign``, which the stateful attention fusion's pattern allows, fails to compile at bf16 with "object is not
initialized"): for each variable read by ``ReadValue -> Gather -> Concat`` whose result is written back by an
``Assign`` and reaches a ``ScaledDotProductAttention`` (as its keys or values, directly or through the
``Unsqueeze``/``Broadcast``/``Reshape`` of grouped-query heads), the variable is retyped bf16 and the attention
computed on bf16 inputs explicitly: the ``ReadValue``'s initializer, the ``Concat``'s new keys or values and the
attention's other f32 inputs are converted to bf16, its output back to f32. The fusion still applies (the default
model: the same 30 fused attentions and 60 state nodes) and the bf16 compile computes the same numbers: logits and
widened states bit for bit those of the copy with f32 variables (1,024 tokens, default model, measured; asserted in
``tests/test_precision.py``). Variables or attentions of another form are left as they are (the hand-over converts
each variable by its own type).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import openvino as ov
import openvino.opset1 as ops

#: Nodes between a KV-cache Concat and the attention that reads it (grouped-query heads repeated).
_HEAD_REPEATS = ("Unsqueeze", "Broadcast", "Reshape")


@contextmanager
def bf16_kv_states(model: ov.Model) -> Iterator[int]:
    """Within the block, ``model``'s KV-cache variables of the form above are bf16 (module docstring); after it, the
    graph is as it was (the converts, no longer reachable, go with their last reference). Compile the bf16 prefill
    copy inside it; ``model`` itself is changed in place, so nothing else may use it meanwhile. Yields how many
    variables were retyped."""
    rewired: list[tuple[ov.Input, ov.Output]] = []  # (input, its original source)
    retyped: list[tuple[object, object]] = []  # (variable, its original VariableInfo)
    try:
        _retype(model, rewired, retyped)
        yield len(retyped)
    finally:
        for target, source in reversed(rewired):
            target.replace_source_output(source)
        for variable, info in retyped:
            variable.update(info)
        if retyped:
            model.validate_nodes_and_infer_types()


def _retype(model: ov.Model, rewired: list, retyped: list) -> None:
    chains = {}  # ReadValue -> (its Concat, the attentions it reaches)
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ReadValue" and (chain := _cache_chain(node)) is not None:
            chains[node] = chain
    fed: dict = {}  # attention -> ports 1 (keys) / 2 (values) fed by a chain
    for _, (_, attentions) in chains.items():
        for attention, port in attentions:
            fed.setdefault(attention, set()).add(port)
    attentions_kept = {attention for attention, ports in fed.items() if ports == {1, 2}}
    chosen = {read: chain for read, chain in chains.items() if all(a in attentions_kept for a, _ in chain[1])}
    attentions_kept = {a for _, attentions in chosen.values() for a, _ in attentions}
    if not chosen:
        return
    for read, (concat, _) in chosen.items():
        variable = model.get_variable_by_id(read.get_variable_id())
        info = variable.get_info()
        retyped.append((variable, _copy_info(info)))
        info.data_type = ov.Type.bf16
        variable.update(info)
        _to_bf16(read.input(0), rewired)
        _to_bf16(concat.input(1), rewired)
    for attention in attentions_kept:  # its keys and values are bf16 once the graph is validated
        for port in range(attention.get_input_size()):
            if port not in (1, 2) and attention.input(port).get_element_type() == ov.Type.f32:
                _to_bf16(attention.input(port), rewired)
        widened = ops.convert(attention.output(0), ov.Type.f32).output(0)
        for target in list(attention.output(0).get_target_inputs()):
            if target.get_node() is not widened.get_node():
                rewired.append((target, attention.output(0)))
                target.replace_source_output(widened)
    model.validate_nodes_and_infer_types()


def _cache_chain(read) -> tuple[object, list[tuple[object, int]]] | None:
    """``(Concat, [(attention, port)])`` of a KV-cache variable read by ``read`` (module docstring), or None where the
    graph around it has another form."""
    if read.get_output_element_type(0) != ov.Type.f32:
        return None
    readers = list(read.output(0).get_target_inputs())
    if len(readers) != 1 or readers[0].get_node().get_type_name() != "Gather":
        return None
    gathered = list(readers[0].get_node().output(0).get_target_inputs())
    if len(gathered) != 1 or gathered[0].get_node().get_type_name() != "Concat" or gathered[0].get_index() != 0:
        return None
    concat = gathered[0].get_node()
    if concat.get_input_size() != 2:
        return None
    attentions, assigned, frontier = [], False, [concat]
    while frontier:
        node = frontier.pop()
        for target in node.output(0).get_target_inputs():
            consumer, kind = target.get_node(), target.get_node().get_type_name()
            if kind == "Assign" and node is concat:
                assigned = assigned or consumer.get_variable_id() == read.get_variable_id()
            elif kind == "ScaledDotProductAttention" and target.get_index() in (1, 2):
                attentions.append((consumer, target.get_index()))
            elif kind in _HEAD_REPEATS and target.get_index() == 0:
                frontier.append(consumer)
            elif kind not in ("ShapeOf",):
                return None
    return (concat, attentions) if assigned and attentions else None


def _to_bf16(target: ov.Input, rewired: list) -> None:
    source = target.get_source_output()
    rewired.append((target, source))
    target.replace_source_output(ops.convert(source, ov.Type.bf16).output(0))


def _copy_info(info):
    copied = type(info)()
    copied.variable_id, copied.data_type, copied.data_shape = info.variable_id, info.data_type, info.data_shape
    return copied


__all__ = ["bf16_kv_states"]
