"""GGUF files: reading their header, deriving a Hugging Face config, converting to IR, re-encoding.

- :func:`read_gguf_header` reads the metadata and tensor list without the ``gguf`` package's full parse
  (milliseconds instead of seconds), :func:`hf_config_from_gguf` derives ``config.json`` from it (the rolling
  context needs the RoPE parameters), and the tables :data:`GGUF_ARCHITECTURES`, :data:`GGML_TYPE_NAMES`,
  :data:`SUPPORTED_GGUF_TYPES` and :data:`GGML_TYPE_BITS` say what openvino-genai can build.
- :func:`export_ir` converts a GGUF to OpenVINO IR with openvino-genai (the default model and GGUF imports).
- :func:`requantize_gguf` re-encodes a checkpoint at another weight bit-width, without torch.

The default model ships only as a 4-bit (Q4_1) GGUF. openvino-genai converts a
GGUF to OpenVINO IR keeping its weight format, so an 8- or 16-bit IR needs an
8- or 16-bit GGUF first. :func:`requantize_gguf` makes one with the pure-numpy ``gguf``
package: every tensor is dequantized to float32 and written again as F16 or
Q8_0.

The 8- and 16-bit variants derive from the 4-bit weights: they cannot regain
what the original Q4_1 quantization lost. F16 holds the Q4_1 weights exactly.
openvino-genai 2026.4's GGUF reader stores each Q4_1 block's offset as a 4-bit
integer zero point (rounded) where Q4_1 has an arbitrary float;
:func:`inference.models.q4_1.write_exact_q41_ir` gives the 4-bit IR the exact
offsets (perplexity on 20,000 tokens of Genesis: 13.18 before, 9.958 after,
9.958 for the 16-bit IR).
"""

from __future__ import annotations

import logging
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

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

from .errors import ModelImportError

logger = logging.getLogger(__name__)

#: GGUF ``general.architecture`` values openvino-genai's GGUF reader builds, with their transformers class.
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
#: GGUF tensor types openvino-genai 2026.4 reads (measured on tiny models: F32, BF16, Q5_0, Q5_1, Q2_K,
#: Q3_K, Q5_K and IQ types fail). 1-D tensors (norms) may also be F32.
SUPPORTED_GGUF_TYPES = ("F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K")
#: ``ggml_type`` values of a GGUF tensor info (``gguf.GGMLQuantizationType``) -> type name.
GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K",
    12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
    29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip
#: Bits per weight of each :data:`SUPPORTED_GGUF_TYPES` entry, as manifests report them.
GGML_TYPE_BITS = {"F16": 16, "Q4_0": 4, "Q4_1": 4, "Q8_0": 8, "Q4_K": 4, "Q6_K": 6}

# GGUF value type -> struct format (GGUFValueType: 0..12; 8 = string, 9 = array).
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
#: Deepest nesting of arrays in arrays a header may have (llama.cpp's reader takes none; gguf-py writes them).
MAX_GGUF_ARRAY_DEPTH = 4
#: Most dimensions a tensor may have (GGML_MAX_DIMS).
MAX_GGUF_DIMS = 4
_F32_MAX = float(np.finfo(np.float32).max)

#: One tensor of a GGUF header: ``(name, dims, ggml_type)``, ``dims`` innermost first.
TensorInfo = tuple[str, tuple[int, ...], int]


class _Corrupt(Exception):
    """What is wrong with a header, in words (turned into a ModelImportError that names the file)."""


def read_gguf_header(path: Path, check_data: bool = False) -> tuple[dict[str, Any], dict[str, int], list[TensorInfo]]:
    """Read a little-endian GGUF (v2/v3) header: scalar metadata, array lengths and tensor infos.

    ``gguf.GGUFReader`` parses every element of the token and merge arrays (about 4 s for SmolLM2's
    49,152 tokens); this skips arrays, taking a few milliseconds. Nothing in the file is trusted: every count and
    length is checked against the bytes left before it is used (a damaged count can neither allocate nor loop
    beyond the file's size), value types must be GGUF's, arrays nest at most :data:`MAX_GGUF_ARRAY_DEPTH` deep and
    tensors have at most :data:`MAX_GGUF_DIMS` dimensions. With ``check_data``, every tensor's data must also end
    within the file (a file cut short), as converting it needs.

    Returns:
        ``(scalars, array_lengths, tensors)``: scalar keys to values (str, int, float, bool; floats may be
        infinite or NaN, as stored), array keys to element counts, and ``(name, dims, ggml_type)`` per tensor in
        file order (``dims`` in GGUF order, innermost first; ``ggml_type`` a ``gguf.GGMLQuantizationType`` value).

    Raises:
        ModelImportError: not a GGUF file of version 2 or 3, a truncated or corrupt header, or (``check_data``) a
            tensor's data past the end of the file (the message names the file and what is wrong).
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            return _read_header(fh, size, path, check_data)
    except OSError as error:
        raise ModelImportError(f"cannot read {path}: {error}") from error
    except _Corrupt as error:
        raise ModelImportError(f"{path.name} is not a valid GGUF file: its header is truncated or corrupt ({error})") from None


def _read_header(fh, size: int, path: Path, check_data: bool) -> tuple[dict[str, Any], dict[str, int], list[TensorInfo]]:
    """The parse of :func:`read_gguf_header` (raises _Corrupt, or ModelImportError for a file that is no GGUF)."""

    def left() -> int:
        return size - fh.tell()

    def unpack(fmt: str) -> Any:
        size_of = struct.calcsize("<" + fmt)
        data = fh.read(size_of)
        if len(data) < size_of:
            raise _Corrupt(f"it ends at byte {fh.tell()}, in the middle of a value")
        return struct.unpack("<" + fmt, data)[0]

    def read_string(what: str) -> str:
        length = unpack("Q")
        if length > left():
            raise _Corrupt(f"{what} claims {length} bytes, more than the {left()} left in the file")
        return fh.read(length).decode("utf-8", errors="replace")

    def value_type(code: int, key: str) -> int:
        if code not in _GGUF_SCALARS and code not in (_GGUF_STRING, _GGUF_ARRAY):
            raise _Corrupt(f"key {key!r} has the unknown value type {code}")
        return code

    def skip_array(key: str, depth: int) -> int:
        """Skip an array's elements (after its header is read: element type, then count); returns the count."""
        element, count = value_type(unpack("I"), key), unpack("Q")
        smallest = struct.calcsize("<" + _GGUF_SCALARS[element]) if element in _GGUF_SCALARS else (
            8 if element == _GGUF_STRING else 12
        )
        if count * smallest > left():
            raise _Corrupt(f"key {key!r} claims {count} array elements, more than the file holds")
        if element in _GGUF_SCALARS:
            fh.seek(count * smallest, os.SEEK_CUR)
        elif element == _GGUF_STRING:
            for _ in range(count):
                length = unpack("Q")
                if length > left():
                    raise _Corrupt(f"a string of key {key!r} claims {length} bytes, more than the file holds")
                fh.seek(length, os.SEEK_CUR)
        else:
            if depth >= MAX_GGUF_ARRAY_DEPTH:
                raise _Corrupt(f"key {key!r} nests arrays more than {MAX_GGUF_ARRAY_DEPTH} deep")
            for _ in range(count):
                skip_array(key, depth + 1)
        return count

    if fh.read(4) != b"GGUF" or size < 8 or unpack("I") not in (2, 3):
        raise ModelImportError(f"{path.name} is not a GGUF file of version 2 or 3")
    n_tensors, n_keys = unpack("Q"), unpack("Q")
    if n_keys * 12 > left() or n_tensors * 24 > left():  # a key: its name's length and a type at least
        raise _Corrupt(f"it claims {n_keys} keys and {n_tensors} tensors, more than the file holds")
    scalars: dict[str, Any] = {}
    array_lengths: dict[str, int] = {}
    for _ in range(n_keys):
        name = read_string("a key's name")
        kind = value_type(unpack("I"), name)
        if kind == _GGUF_STRING:
            scalars[name] = read_string(f"the value of {name!r}")
        elif kind == _GGUF_ARRAY:
            array_lengths[name] = skip_array(name, 1)
        else:
            scalars[name] = unpack(_GGUF_SCALARS[kind])
    tensors, offsets = [], []
    for _ in range(n_tensors):
        name = read_string("a tensor's name")
        n_dims = unpack("I")
        if n_dims > MAX_GGUF_DIMS:
            raise _Corrupt(f"tensor {name!r} claims {n_dims} dimensions (at most {MAX_GGUF_DIMS})")
        dims = tuple(unpack("Q") for _ in range(n_dims))
        ggml_type = unpack("I")
        offsets.append(unpack("Q"))  # its offset in the data section
        tensors.append((name, dims, ggml_type))
    if check_data:
        _check_tensor_data(tensors, offsets, scalars.get("general.alignment", 32), fh.tell(), size, path)
    return scalars, array_lengths, tensors


def _check_tensor_data(tensors: list[TensorInfo], offsets: list[int], alignment: Any, header_end: int, size: int,
                       path: Path) -> None:
    """Raise ModelImportError when a tensor's data would end past the file's ``size`` bytes (a file cut short:
    openvino-genai's reader crashed the process on one, a newcomer's window with it; _Corrupt for a bad alignment).
    The data section starts at the header's end rounded up to ``alignment`` (``general.alignment``, 32 by default);
    a tensor's bytes are its elements over its type's block size times the block's bytes (types gguf-py does not
    know are not checked)."""
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        raise _Corrupt(f"general.alignment is {alignment!r}, not a positive integer")
    data_start = -(-header_end // alignment) * alignment
    for (name, dims, ggml_type), offset in zip(tensors, offsets):
        try:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            continue
        end = data_start + offset + math.prod(dims) // block * block_bytes
        if end > size:
            raise ModelImportError(f"{path.name} is incomplete: tensor {name!r} ends at byte {end:,}, past the end of the "
                                   f"file ({size:,} bytes): it was cut short (an interrupted download or copy); download "
                                   "it again")


def gguf_architecture(scalars: Mapping[str, Any], path: Path) -> str:
    """The ``general.architecture`` of a GGUF header's ``scalars`` (see :func:`read_gguf_header`), e.g. ``"llama"``.

    Raises:
        ModelImportError: the key is missing (a damaged file, or not a model), or it is not one of
            :data:`GGUF_ARCHITECTURES` (the message names those).
    """
    arch = scalars.get("general.architecture")
    if arch is None:
        raise ModelImportError(f"{path.name} has no general.architecture key: it is damaged or not a model")
    if arch not in GGUF_ARCHITECTURES:
        raise ModelImportError(
            f"{path.name} is a {arch!r} model; SpecChat reads GGUF files of these architectures: {', '.join(GGUF_ARCHITECTURES)}"
        )
    return arch


def hf_config_from_gguf(gguf_path: Path) -> dict[str, Any]:
    """Derive a Hugging Face style ``config.json`` dict from a GGUF's metadata (llama, qwen2, qwen3).

    ``head_dim`` comes from ``<arch>.attention.key_length``, else ``<arch>.rope.dimension_count``,
    else ``hidden_size // num_attention_heads``; ``partial_rotary_factor`` is the rotated share of
    it (1.0 for SmolLM2). ``rope_scaling`` is null unless the GGUF names a scaling type. Every value used is
    checked: sizes are whole numbers >= 1 (a head count of 0 would divide by zero), floats finite and positive
    (an infinite RoPE base would make every position the same), token ids whole numbers >= 0.

    Raises:
        ModelImportError: not a GGUF, a corrupt header, an architecture not in :data:`GGUF_ARCHITECTURES`, or a
            required key missing or of the wrong type or range (the message names the file and the key).
    """
    meta, array_lengths, tensors = read_gguf_header(gguf_path)
    arch = gguf_architecture(meta, gguf_path)

    def wrong(name: str, value: Any, should: str) -> ModelImportError:
        said = "missing" if value is None else f"{value!r}"
        return ModelImportError(f"{gguf_path.name}: metadata key {name} is {said}; it must be {should} (the file is "
                                "incomplete or damaged)")  # fmt: skip

    def count(name: str, default: Any = None, required: bool = True, minimum: int = 1) -> int | None:
        value = meta.get(name, default)
        if value is None and not required:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value < 2**63:
            raise wrong(name, value, f"a whole number >= {minimum}")
        return value

    def positive(name: str, default: float) -> float:
        value = meta.get(name, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= _F32_MAX:
            raise wrong(name, value, "a finite number > 0")  # (NaN fails the comparison too)
        return _f32(value)

    def key(name: str) -> str:
        return f"{arch}.{name}"

    hidden = count(key("embedding_length"))
    heads = count(key("attention.head_count"))
    rope_dims = count(key("rope.dimension_count"), required=False)
    head_dim = count(key("attention.key_length"), required=False) or rope_dims or hidden // heads
    if head_dim < 1:
        raise wrong(key("attention.head_count"), heads, f"at most {key('embedding_length')} ({hidden})")
    scaling_type = meta.get(key("rope.scaling.type"))
    rope_scaling = None
    if scaling_type is not None and not isinstance(scaling_type, str):
        raise wrong(key("rope.scaling.type"), scaling_type, "a name such as linear or yarn")
    if scaling_type and scaling_type != "none":
        rope_scaling = {"rope_type": scaling_type, "factor": positive(key("rope.scaling.factor"), 1.0)}
        original = count(key("rope.scaling.original_context_length"), required=False)
        if original:
            rope_scaling["original_max_position_embeddings"] = original
    vocab = count(key("vocab_size"), required=False) or array_lengths.get("tokenizer.ggml.tokens")
    if not vocab:
        raise wrong("tokenizer.ggml.tokens", None, f"the vocabulary (or {key('vocab_size')} its size)")
    return {
        "model_type": arch,
        "architectures": [GGUF_ARCHITECTURES[arch]],
        "hidden_size": hidden,
        "intermediate_size": count(key("feed_forward_length")),
        "num_hidden_layers": count(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": count(key("attention.head_count_kv"), heads),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rope_theta": positive(key("rope.freq_base"), 10000.0),
        "partial_rotary_factor": (rope_dims / head_dim) if rope_dims else 1.0,
        "rope_scaling": rope_scaling,
        "max_position_embeddings": count(key("context_length")),
        "vocab_size": vocab,
        "rms_norm_eps": positive(key("attention.layer_norm_rms_epsilon"), 1e-6),
        "bos_token_id": count("tokenizer.ggml.bos_token_id", required=False, minimum=0),
        "eos_token_id": count("tokenizer.ggml.eos_token_id", required=False, minimum=0),
        "tie_word_embeddings": "output.weight" not in {name for name, _, _ in tensors},
    }


def _f32(value: float) -> float:
    """Shortest decimal that rounds to the same float32 (GGUF stores 1e-5 as 9.99999974e-06)."""
    return float(str(np.float32(value)))


def export_ir(gguf_path: Path) -> None:
    """Convert a GGUF to OpenVINO IR files written beside it (:data:`inference.model.MODEL_FILES` and
    :data:`inference.model.TOKENIZER_FILES`), with ``openvino_genai.LLMPipeline(gguf, "CPU",
    enable_save_ov_model=True)``.

    Takes about 3-10 s for SmolLM2-135M on 2 CPU cores.

    Raises:
        ModelImportError: a tensor's data ends past the end of the file (checked first: openvino-genai's reader
            crashed the process on such a file, a newcomer's window with it).
        RuntimeError, IndexError: openvino-genai cannot build the GGUF (openvino also reports write failures,
            e.g. a full disk, as RuntimeError).
    """
    import openvino_genai  # deferred: a heavy import, not needed to list models

    read_gguf_header(gguf_path, check_data=True)

    pipeline = openvino_genai.LLMPipeline(str(gguf_path), "CPU", enable_save_ov_model=True)
    del pipeline

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
