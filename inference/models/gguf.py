"""Re-encode a GGUF checkpoint at another weight bit-width, without torch.

The default model ships only as a 4-bit (Q4_1) GGUF. openvino-genai converts a
GGUF to OpenVINO IR keeping its weight format, so an 8- or 16-bit IR needs an
8- or 16-bit GGUF first. This module makes one with the pure-numpy ``gguf``
package: every tensor is dequantized to float32 and written again as F16 or
Q8_0.

The 8- and 16-bit variants derive from the 4-bit weights: they cannot regain
what the original Q4_1 quantization lost. They do avoid a loss of openvino-genai
2026.4's GGUF reader, which stores each Q4_1 block's offset as a 4-bit integer
zero point (rounded) where Q4_1 has an arbitrary float: on 20,000 tokens of
Genesis the 4-bit IR scores perplexity 13.19, the 8- and 16-bit IRs 9.98 and
9.96 (bench/results/REPORT.md). F16 holds the Q4_1 weights exactly.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
from gguf import (
    GGML_QUANT_SIZES,
    GGMLQuantizationType,
    GGUFEndian,
    GGUFReader,
    GGUFValueType,
    GGUFWriter,
    Keys,
    LlamaFileType,
)
from gguf.quants import dequantize, quantize

logger = logging.getLogger(__name__)

#: Bit-widths :func:`requantize_gguf` can write, with the GGML type used for matrices
#: and the matching ``general.file_type`` value.
MATRIX_TYPES: dict[int, tuple[GGMLQuantizationType, LlamaFileType]] = {
    8: (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    16: (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
}


class _TensorPlan(NamedTuple):
    """How one tensor of the source is written to the destination."""

    index: int  # position in GGUFReader.tensors
    name: str
    shape: tuple[int, ...]  # logical numpy shape (rows first), e.g. (49152, 576)
    src_type: GGMLQuantizationType
    dst_type: GGMLQuantizationType
    nbytes: int


def requantize_gguf(src: Path, dst: Path, bits: int) -> None:
    """Write a copy of a GGUF file whose matrices are stored at ``bits`` bits.

    Every metadata key of ``src`` is copied (arrays included: tokenizer tokens,
    merges, token types, the chat template...), except ``general.file_type``,
    which is set to the new type (openvino-genai fails with
    ``IndexError: unordered_map::at`` without it). Tensors are dequantized to
    float32 with ``gguf.quants.dequantize``, then:

    * 1-D tensors (norm weights, biases) are written as F32;
    * matrices are written as F16 (``bits=16``) or re-quantized to Q8_0 with
      ``gguf.quants.quantize`` (``bits=8``; blocks of 32 values along a row,
      one f16 scale each, 8.5 bits per weight). A matrix whose row length is
      not a multiple of 32 falls back to F16.

    A tensor already stored in its target type is copied byte for byte.

    The 8- and 16-bit results derive from the source's (e.g. 4-bit) weights:
    F16 holds them exactly, Q8_0 within its rounding (see the module doc).

    Tensors are converted one at a time, so peak memory is about one
    dequantized tensor (the 49152 x 576 embedding of SmolLM2: 113 MB) on top of
    the memory-mapped source.

    Args:
        src: Path of the source GGUF (any type ``gguf.quants`` can dequantize).
        dst: Path of the GGUF to write; overwritten if present, removed again
            if writing fails.
        bits: 8 or 16.

    Raises:
        ValueError: ``bits`` is not 8 or 16, or ``src`` is a big-endian GGUF.
        NotImplementedError: ``src`` holds a tensor type ``gguf`` cannot
            dequantize.
        OSError: reading ``src`` or writing ``dst`` failed (e.g. disk full).
    """
    if bits not in MATRIX_TYPES:
        allowed = ", ".join(str(b) for b in MATRIX_TYPES)
        raise ValueError(f"bits must be one of {allowed} (got {bits!r})")
    matrix_type, file_type = MATRIX_TYPES[bits]

    reader = GGUFReader(src, "r")
    if reader.endianess != GGUFEndian.LITTLE:
        raise ValueError(f"{src}: big-endian GGUF files are not supported")

    arch = reader.get_field(Keys.General.ARCHITECTURE)
    if arch is None:
        raise ValueError(f"{src}: no {Keys.General.ARCHITECTURE} key; not a model GGUF")
    writer = GGUFWriter(dst, arch=arch.contents(), endianess=GGUFEndian.LITTLE)
    try:
        _copy_metadata(reader, writer, file_type)
        plans = [_plan_tensor(i, reader, matrix_type) for i in range(len(reader.tensors))]
        for plan in plans:
            # A placeholder dtype with raw_dtype set keeps `shape` as the logical shape.
            writer.add_tensor_info(plan.name, plan.shape, np.dtype(np.float32), plan.nbytes, raw_dtype=plan.dst_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for plan in plans:
            writer.write_tensor_data(_convert(reader.tensors[plan.index].data, plan))
        writer.close()
    except BaseException:
        writer.close()
        Path(dst).unlink(missing_ok=True)
        raise
    logger.info("wrote %s (%d tensors, matrices as %s)", dst, len(plans), matrix_type.name)


def _copy_metadata(reader: GGUFReader, writer: GGUFWriter, file_type: LlamaFileType) -> None:
    """Copy every key of ``reader`` to ``writer``, with a new ``general.file_type``."""
    for field in reader.fields.values():
        # GGUF.* are virtual (header) fields; the writer adds the architecture itself.
        if field.name.startswith("GGUF.") or field.name in (
            Keys.General.ARCHITECTURE,
            Keys.General.FILE_TYPE,
        ):
            continue
        if field.name == Keys.General.ALIGNMENT:
            writer.data_alignment = int(field.contents())
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
    writer.add_file_type(int(file_type))


def _plan_tensor(index: int, reader: GGUFReader, matrix_type: GGMLQuantizationType) -> _TensorPlan:
    """Choose the destination type and byte size of tensor ``index``."""
    tensor = reader.tensors[index]
    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))  # GGUF lists ne0 first
    if len(shape) == 1:
        dst_type = GGMLQuantizationType.F32
    else:
        dst_type = matrix_type
        block_size, _ = GGML_QUANT_SIZES[dst_type]
        if shape[-1] % block_size:
            dst_type = GGMLQuantizationType.F16
    block_size, type_size = GGML_QUANT_SIZES[dst_type]
    nbytes = math.prod(shape) // block_size * type_size
    return _TensorPlan(index, tensor.name, shape, tensor.tensor_type, dst_type, nbytes)


def _convert(data: np.ndarray, plan: _TensorPlan) -> np.ndarray:
    """Return the bytes of one tensor in its destination type.

    Args:
        data: The tensor as ``GGUFReader`` exposes it (raw blocks for quantized
            types, shape ``(rows, bytes_per_row)`` uint8; typed values otherwise).
        plan: Where it goes.

    Returns:
        An array whose ``nbytes`` equals ``plan.nbytes``.
    """
    if plan.src_type == plan.dst_type:
        return data
    values = dequantize(data, plan.src_type).reshape(plan.shape)
    return quantize(values, plan.dst_type)
