"""Horizontal fusion of a model's weight products at load: the products that read the same input become one.

A decode step of a small model is many small products: the default model runs 211 compressed FullyConnected
calls a token (30 layers x q, k, v, o, gate, up, down, and the LM head), and on 2 cores OpenVINO's CPU plugin
spends 5-50 us on each however small it is (``bench/fc_profile.py``). q, k and v read the same normed
hidden state, and so do gate and up: concatenating their weights along the output axis makes one product of each
group, followed by a ``VariadicSplit`` that hands every former consumer its own columns (as llama.cpp's and vLLM's
``qkv_proj``/``gate_up_proj`` do), 90 calls fewer a token.

Design rules:

- Same arithmetic. Each output column is the same dot product over the same input, with the same weights, in the
  same decompression graph; only the number of columns a call computes changes. The fused and unfused graphs
  agree bit for bit in the tests (``tests/test_fusion.py``), so greedy output and the exactness tests are
  unchanged.
- Fuse only what matches exactly: MatMuls with ``transpose_b`` whose weights are OpenVINO's decompression pattern
  ``Convert(codes) - zero point, * scale, Reshape, Convert`` with constant codes, zero points and scales of one
  element type and one block size, reading the very same input output. Anything else is left as it was.
- Rewrite the ``ov.Model`` before compiling, never the files: the model folder stays what was imported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from .file_pages import read_only_file_mappings, release_file_pages


def ordered_ops(model: ov.Model) -> list[ov.Node]:
    """``model.get_ordered_ops()``, the same nodes in the same order (each after the nodes it reads), walked in Python:
    OpenVINO's topological sort (``ov::topological_sort``: a stack started with the results, sinks and parameters,
    each node's inputs pushed last first) step by step.

    Why: ``get_ordered_ops`` is one C++ call that holds Python's GIL throughout, and the first one after a rewrite
    sorts the whole graph again: 4-7 ms on the default model's 5,000 nodes after fusion on this Xeon (quiet; ~3x
    that on an AVX2-only CPU 3x slower), every other Python thread, the window's included, waiting. Here each of the
    ~25,000 calls is short and the GIL goes to a waiting thread between them at the switch interval; the walk takes
    8-12 ms in all, against 1-2 ms for ``get_ordered_ops`` where the order is already sorted (a graph as read). Use
    it for a walk after a rewrite.
    """
    stack = [(node.get_instance_id(), node) for node in (*model.get_results(), *model.get_sinks(), *model.get_parameters())]
    done: set[int] = set()
    expanded: set[int] = set()
    order = []
    while stack:
        key, node = stack[-1]
        if key in done:
            stack.pop()
            continue
        ready = True
        if key not in expanded:  # its inputs not done yet go on top, input 0 topmost; it is added once they are
            expanded.add(key)
            for value in reversed(node.input_values()):
                source = value.get_node()
                source_key = source.get_instance_id()
                if source_key not in done:
                    ready = False
                    stack.append((source_key, source))
        if ready:
            order.append(node)
            done.add(key)
            stack.pop()
    return order


@dataclass(frozen=True)
class _Compressed:
    """A MatMul whose weights are OpenVINO's decompression pattern of constants (``codes``, ``zero_point``,
    ``scale``: ``[N, G, B]``, ``[N, G, 1]``, ``[N, G, 1]``), and what its output feeds."""

    matmul: ov.Node
    codes: ov.Node
    zero_point: ov.Node  # a Constant, or a Convert of one
    scale: ov.Node
    decompressed_type: ov.Type  # element type of the Subtract/Multiply (f16 or f32)

    @property
    def columns(self) -> int:
        return int(self.codes.get_output_shape(0)[0])

    def signature(self) -> tuple:
        """What must be equal for two products to be fused: the input, the block layout and every element type."""
        _, groups, block = self.codes.get_output_shape(0)
        zero_point_types = tuple(str(node.get_output_element_type(0)) for node in _chain(self.zero_point))
        return (
            self.matmul.input_value(0).get_node().get_instance_id(),
            self.matmul.input_value(0).get_index(),
            int(groups), int(block),
            str(self.codes.get_output_element_type(0)), zero_point_types,
            str(self.scale.get_output_element_type(0)), str(self.decompressed_type),
        )


def _chain(zero_point: ov.Node) -> list[ov.Node]:
    """The zero point's Constant, and the Convert above it when there is one."""
    return [zero_point.input_value(0).get_node(), zero_point] if zero_point.get_type_name() == "Convert" else [zero_point]


def compressed_product(matmul: ov.Node) -> _Compressed | None:
    """The decompression pattern behind a MatMul's weights, or None when it is something else."""
    if matmul.get_type_name() != "MatMul" or not matmul.get_attributes().get("transpose_b"):
        return None
    node = matmul.input_value(1).get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    if node.get_type_name() != "Reshape":
        return None
    multiply = node.input_value(0).get_node()
    if multiply.get_type_name() != "Multiply":
        return None
    subtract, scale = (multiply.input_value(i).get_node() for i in range(2))
    if subtract.get_type_name() != "Subtract" or scale.get_type_name() != "Constant":
        return None
    convert, zero_point = (subtract.input_value(i).get_node() for i in range(2))
    if convert.get_type_name() != "Convert" or _chain(zero_point)[0].get_type_name() != "Constant":
        return None
    codes = convert.input_value(0).get_node()
    if codes.get_type_name() != "Constant" or len(codes.get_output_shape(0)) != 3:
        return None
    n, groups, _ = codes.get_output_shape(0)
    if list(scale.get_output_shape(0)) != [n, groups, 1] or list(zero_point.get_output_shape(0)) != [n, groups, 1]:
        return None
    return _Compressed(matmul, codes, zero_point, scale, multiply.get_output_element_type(0))


def _concatenated(constants: list[ov.Node], mappings: list[tuple[int, int]]) -> ov.Node:
    """One Constant holding ``constants`` one after the other along axis 0 (row-major data: their bytes in turn;
    sub-byte types such as u4 stay packed, each part holding a whole number of bytes).

    Each part is copied straight into the new Constant, and the weights file's pages it was read from are handed
    back (``file_pages.release_file_pages``, within ``mappings``, the process's read-only file mappings): the parts
    leave the graph, so the fused model does not hold its q/k/v and gate/up weights twice in resident memory."""
    element_type = constants[0].get_output_element_type(0)
    shapes = [list(c.get_output_shape(0)) for c in constants]
    tensor = ov.Tensor(element_type, [sum(s[0] for s in shapes), *shapes[0][1:]])  # owns its memory
    destination = tensor.data.reshape(-1).view(np.uint8)
    parts = [np.asarray(c.get_data()).reshape(-1).view(np.uint8) for c in constants]
    offset = 0
    for part in parts:
        destination[offset:offset + part.size] = part
        offset += part.size
    release_file_pages(parts, mappings)
    return ov.op.Constant(tensor)


def _fuse(group: list[_Compressed], mappings: list[tuple[int, int]]) -> None:
    """Replace the MatMuls of ``group`` (same input, same layout) by one over their concatenated weights (the pages
    of the parts within ``mappings`` handed back: ``_concatenated``)."""
    first = group[0]
    codes = _concatenated([p.codes for p in group], mappings)
    zero_points = [_chain(p.zero_point)[0] for p in group]
    zero_point = _concatenated(zero_points, mappings)
    if first.zero_point.get_type_name() == "Convert":
        zero_point = ops.convert(zero_point, first.decompressed_type)
    scale = _concatenated([p.scale for p in group], mappings)
    n, groups, block = codes.get_output_shape(0)
    weights = ops.multiply(ops.subtract(ops.convert(codes, first.decompressed_type), zero_point), scale)
    weights = ops.reshape(weights, ops.constant(np.array([n, groups * block], dtype=np.int64)), special_zero=False)
    if first.decompressed_type != ov.Type.f32:
        weights = ops.convert(weights, ov.Type.f32)
    product = ops.matmul(first.matmul.input_value(0), weights, transpose_a=False, transpose_b=True)
    split = ops.variadic_split(
        product, ops.constant(np.int64(-1)), ops.constant(np.array([p.columns for p in group], dtype=np.int64))
    )
    for index, part in enumerate(group):
        part.matmul.output(0).replace(split.output(index))
        split.output(index).get_tensor().add_names(part.matmul.output(0).get_names())


def fuse_shared_input_products(model: ov.Model) -> int:
    """Fuse every group of compressed weight products that read the same input (see the module docstring).

    Args:
        model: an ``ov.Model`` (changed in place), e.g. as ``ov.Core.read_model`` returns it.

    Returns:
        How many MatMuls were removed (a Llama layer's q, k, v and gate, up: 3 each).
    """
    groups: dict[tuple, list[_Compressed]] = {}
    for node in model.get_ordered_ops():  # as read: read_model left the order sorted, this call only wraps the nodes
        found = compressed_product(node)
        if found is not None:
            groups.setdefault(found.signature(), []).append(found)
    removed = 0
    # read once (fusion allocates and copies, it unmaps nothing, so every file mapping stays where it was): 180
    # reads of /proc/self/maps took 170 ms of a 1.5-1.6 s load of the default model (now 1.3-1.4 s), Python code
    # that held the GIL in turns with the window
    mappings = read_only_file_mappings()
    for group in groups.values():
        if len(group) > 1:
            _fuse(group, mappings)
            removed += len(group) - 1
    # No model.validate_nodes_and_infer_types(): every new node inferred its types when built, the consumers see the
    # shapes they saw before, and that call holds Python's GIL for 100+ ms (compile_model validates without it).
    return removed
