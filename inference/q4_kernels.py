"""SpecChat's CPU kernels for 4-bit weights (``inference/kernels/``, an OpenVINO extension), and the graph rewrite
that puts them in place of OpenVINO's own at load (issue 33: decode speed on AVX2 CPUs).

Design rules:

* **Exact, row by row.** Each op computes every row (token) of a pass in a fixed order whatever the number of rows
  or threads (threads split outputs only), so a many-token verification pass computes each row bit for bit as a
  one-token decode pass does, and greedy speculative decoding stays identical to plain decoding. Their f32 result
  is OpenVINO's f32 graph up to f32 rounding (the bound in ``tests/test_q4_kernel.py``).
* **Fewer, larger calls.** One ``Q4F32Layer`` op a decoder layer from its attention output to the next RMSNorm (o
  projection, residual, RMSNorm, gate/up, SiLU * up, down, residual: ``kernels/layer_f32.hpp``), q/k/v one
  ``Q4F32MatMul``, the Q8_0 LM head one ``Q8F32MatMul``: 61 op calls a decode step against OpenVINO's 121
  products and ~290 more nodes. Measured on an AMD EPYC (2 cores, quiet): a decode step 1.30-1.36x faster under
  ``ONEDNN_MAX_CPU_ISA=AVX2``, 1.31x native (``bench/results/epyc-zen5/Q4_KERNEL_FINDINGS.md``).
* **Only where they are exact and found.** Used when the library was built at set-up (``tools/build_kernels.py``;
  never built at run time), the CPU has AVX2, FMA and F16C (the ops are compiled for them), the model is compiled
  for the exact f32 path (f32 compute, f32 KV cache, no dynamic quantization: never a bf16 fast-prefill copy or a
  draft model at device defaults), and the IR's products are the patterns the ops compute (Q4_1 blocks of 32 with
  f16 scales and zero points; anything else keeps OpenVINO's kernels). Everywhere else OpenVINO's kernels run as
  before, and :class:`Kernels` says why, for the status bar.
* **Decode with ours, prefill with theirs.** The ops are batch-1 kernels: a 1,024-token prefill took 1.5x
  OpenVINO's time through them. ``model.load_model`` therefore keeps a prefill copy with OpenVINO's kernels (the
  bf16 one where the CPU has bf16, else the unrewritten f32 graph, ~300 MB more resident) and hands its KV states
  over, as for the bf16 fast prefill; ``fast_prefill`` "off" or an explicit f32 runs everything through the ops.
* **One switch.** ``SPECCHAT_KERNELS=openvino`` in the environment keeps OpenVINO's kernels everywhere.
* **The weights live in Python.** The ops read their repacked weights where they lie (their addresses are op
  attributes: OpenVINO's CPU plugin would copy weights given as inputs on every call), so the arrays are kept by
  the caller (``Kernels.weights``, on ``LoadedModel.kernels``) as long as the compiled model.
"""

from __future__ import annotations

import os
import platform
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov
from openvino.utils.node_factory import NodeFactory

from .file_pages import read_only_file_mappings, release_file_pages
from .fusion import compressed_product, ordered_ops

#: The extension library that ``tools/build_kernels.py`` builds at set-up (gitignored; the installers ship it).
LIBRARY = Path(__file__).resolve().parent / "kernels" / "build" / "libspecchat_kernels.so"
#: Environment variable that, set to "openvino", keeps OpenVINO's kernels.
SWITCH = "SPECCHAT_KERNELS"
#: The CPU flags (as /proc/cpuinfo names them) the ops are compiled for.
CPU_FLAGS = ("avx2", "fma", "f16c")
#: Compile properties of the exact f32 path, the only one the ops run on.
EXACT_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
#: The element types of 4-bit weights in an IR (Q4_1 codes are u4; symmetric int4 i4; NF4 and FP4 their own).
FOUR_BIT_TYPES = (ov.Type.u4, ov.Type.i4, ov.Type.nf4, ov.Type.f4e2m1)


@dataclass
class Kernels:
    """Which kernels compute a model's 4-bit weight products.

    Attributes:
        ours: True when SpecChat's ops replaced OpenVINO's products.
        reason: why not (e.g. "not built"), "" when ``ours``.
        ops: how many ops were put in (0 when not ``ours``).
        weights: the ops' repacked weights (numpy arrays), which must outlive the compiled model.
        four_bit: False when the model has no 4-bit weights (an 8- or 16-bit model): no 4-bit product to compute.
    """

    ours: bool
    reason: str = ""
    ops: int = 0
    weights: list = field(default_factory=list, repr=False)
    four_bit: bool = True

    def describe(self) -> str:
        """"SpecChat's" or "OpenVINO's (not built)" and the like; "" for a model without 4-bit weights (an 8-bit
        model said "4-bit kernels: OpenVINO's (no Q4_1 layers)", as if 4-bit kernels computed it)."""
        if not self.four_bit:
            return ""
        return "SpecChat's" if self.ours else f"OpenVINO's ({self.reason})" if self.reason else "OpenVINO's"


def has_four_bit_weights(model: ov.Model) -> bool:
    """Whether any constant of ``model`` holds 4-bit values (:data:`FOUR_BIT_TYPES`): the weights of a 4-bit model
    (a look, nothing changed). A walk of the graph's ops that holds the GIL: 17.5 ms for the default model's 8-bit
    copy, 11.5 ms to the first u4 constant of its 4-bit one (this Xeon, shared), so it is asked only where
    SpecChat's ops went in nowhere, never on the exact path of a 4-bit model."""
    return any(op.get_type_name() == "Constant" and op.get_output_element_type(0) in FOUR_BIT_TYPES
               for op in model.get_ops())


def _openvinos(reason: str, model: ov.Model) -> Kernels:
    """OpenVINO's kernels, SpecChat's not used for ``reason``; ``four_bit`` says whether the model has 4-bit
    weights at all."""
    return Kernels(False, reason, four_bit=has_four_bit_weights(model))


def cpu_has_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU has every flag of ``CPU_FLAGS`` (read from ``/proc/cpuinfo``; False where there is none)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return all(flag in flags for flag in CPU_FLAGS)


_factory: NodeFactory | None = None
_lock = threading.Lock()


def load_library(core: ov.Core, library: Path = LIBRARY) -> NodeFactory:
    """Add the extension to ``core`` (once a process) and return a NodeFactory that creates its ops. ``core`` must
    outlive every model compiled with the ops (the process-wide ``devices.core()`` does).

    Raises:
        RuntimeError: OpenVINO cannot load the library (e.g. built against another OpenVINO version).
    """
    global _factory
    with _lock:
        if _factory is None:
            factory = NodeFactory()
            core.add_extension(str(library))
            factory.add_extension(str(library))
            _factory = factory
        return _factory


def unavailable(device: str, properties: dict) -> str:
    """Why SpecChat's ops cannot run for a model compiled with ``properties`` on ``device`` (the switch, the path,
    the library at ``LIBRARY``, built on Linux x86-64 only, the CPU), "" when they can where the IR's layers fit."""
    if os.environ.get(SWITCH, "").lower() == "openvino":
        return f"{SWITCH}=openvino"
    if not device.startswith("CPU") or any(str(properties.get(k)) != str(v) for k, v in EXACT_PROPERTIES.items()):
        return "not the exact f32 path"
    if not LIBRARY.is_file():  # also on Windows and macOS, where set-up does not build it
        return "not built"
    return "" if platform.machine().lower() in ("x86_64", "amd64") and cpu_has_flags() else "CPU without AVX2, FMA and F16C"


def use_kernels(model: ov.Model, core: ov.Core, device: str, properties: dict) -> Kernels:
    """Put SpecChat's ops (the library at ``LIBRARY``) into ``model`` (in place) where the design rules allow, and
    say which kernels it uses (``four_bit`` False for a model without 4-bit weights).

    ``properties`` are the compile properties the model gets on ``device``. Run after every other change to the graph
    that reads the layers' nodes (``fusion``, ``layer_features``): the layer op replaces them.
    """
    reason = unavailable(device, properties)
    if reason:
        return _openvinos(reason, model)
    try:
        factory = load_library(core, LIBRARY)
    except RuntimeError as error:
        return Kernels(False, f"library not loadable: {str(error).splitlines()[0] if str(error) else 'error'}")
    weights: list[np.ndarray] = []
    mappings = read_only_file_mappings()
    products = matmuls(model)  # one walk for both passes: use_layers leaves in it what use_kernel takes
    count = use_layers(model, factory, weights, mappings, products)
    if count == 0:
        return _openvinos("no Q4_1 layers", model)
    return Kernels(True, ops=count + use_kernel(model, factory, weights, mappings=mappings, products=products),
                   weights=weights)


def matmuls(model: ov.Model) -> list[ov.Node]:
    """The MatMuls of ``model`` in graph order (``fusion.ordered_ops``), what :func:`use_layers` and :func:`use_kernel`
    search: one walk serves both (use_kernel's own ``get_ordered_ops`` after use_layers' rewrite held the GIL
    5.3-5.8 ms, the longest hold of the model load: default model, this Xeon, quiet, ``tools/gil_watch.py
    model_load``)."""
    return [node for node in ordered_ops(model) if node.get_type_name() == "MatMul"]


def _release_weights(found, mappings: list[tuple[int, int]] | None) -> None:
    """Hand back the weights file's pages of a replaced product's constants (codes, scales, zero points), which were
    read once to repack them (``file_pages.release_file_pages``, within ``mappings``; None: nothing is done). A
    prefill copy compiled from them keeps its own copy; what a compiled model reads in place maps again."""
    if mappings:
        constants = [found.codes, found.scale, found.zero_point.input_value(0).get_node()
                     if found.zero_point.get_type_name() == "Convert" else found.zero_point]
        release_file_pages([np.asarray(node.get_data()) for node in constants], mappings)


def _zero_point(found) -> np.ndarray:
    """The zero points of a compressed MatMul's weights as f32 ``[N, G]``; u4 ones (openvino-genai's IR of a
    Q4_1 GGUF) are stored two a byte, the first in the low nibble (an imported Q4_1 GGUF failed to load: "cannot
    reshape array of size 8640 into shape (960,18)")."""
    node = found.zero_point.input_value(0).get_node() if found.zero_point.get_type_name() == "Convert" else found.zero_point
    n, groups = found.codes.get_output_shape(0)[:2]
    data = np.asarray(node.get_data())
    if node.get_output_element_type(0) == ov.Type.u4:
        data = _nibbles(data)[: n * groups]
    return data.astype(np.float32).reshape(n, groups)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """u4 values as an IR stores them, two a byte (the first in the low nibble), one a byte: u8, the last axis
    twice as long."""
    return np.stack([packed & 15, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)


def product_node(factory: NodeFactory, op: str, x: ov.Output, weights: tuple[np.ndarray, ...], keep: list) -> ov.Node:
    """One of the ops on ``x``: ``Q4MatMul`` (``weights`` = codes u8 ``[N, K / 2]``, scales and offsets f32
    ``[N, K / 32]``), ``Q4F32MatMul`` (codes, scales and zero points f16 ``[N, K / 32]``) or ``Q8F32MatMul`` (codes
    i8 ``[N, K]``, scales f16). The op reads the weights where they lie (their addresses are its attributes: see
    ``kernels/q4_matmul.cpp`` for why they are not graph inputs), so their contiguous copies are appended to
    ``keep``, which must outlive every model compiled from the op.

    Raises:
        ValueError: weights of the wrong dtype or shape for ``op``.
    """
    arrays = [np.ascontiguousarray(a) for a in weights]
    codes, scales, *rest = arrays
    n, k = scales.shape[0], scales.shape[1] * 32
    codes_type, scale_type, rest_names = {"Q4MatMul": (np.uint8, np.float32, ["offsets"]),
                                          "Q4F32MatMul": (np.uint8, np.float16, ["zeros"]),
                                          "Q8F32MatMul": (np.int8, np.float16, [])}[op]
    if codes.dtype != codes_type or codes.shape != ((n, k) if op == "Q8F32MatMul" else (n, k // 2)) \
            or scales.dtype != scale_type or len(rest) != len(rest_names) \
            or any(a.dtype != scale_type or a.shape != scales.shape for a in rest):
        raise ValueError(f"{op}: weights {[(a.dtype, a.shape) for a in arrays]} do not fit")
    # (on 4 KB pages, where malloc puts them: the same weights copied into one arena of 2 MB pages, MADV_HUGEPAGE,
    # 120 MB of them huge, changed a pass by -1.5% at one token and -0.3% at two, within its noise: per-pass
    # alternation of the two in one process, 290 pairs each, AMD EPYC Zen 4, 2026-12-07; not kept)
    keep.extend(arrays)
    addresses = {"codes": codes.ctypes.data, "scales": scales.ctypes.data,
                 **{name: a.ctypes.data for name, a in zip(rest_names, rest)}}
    return factory.create(op, [x], {"n": n, "k": k, **addresses})


def _q4_1(found) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A compressed MatMul's u4 weights with blocks of 32 and f16 scales as Q4_1: codes u8 ``[N, G, 32]`` (one a
    byte, unpacked), scales d and zero points z f16 ``[N, G]`` (``w = d * (q - z)``, as the IR computes it); None for
    other weights (or zero points that f16 does not hold exactly)."""
    if found is None or found.codes.get_output_shape(0)[2] != 32 or found.codes.get_output_element_type(0) != ov.Type.u4 \
            or found.scale.get_output_element_type(0) != ov.Type.f16:
        return None
    n, groups, _ = found.codes.get_output_shape(0)
    scale = np.asarray(found.scale.get_data()).reshape(n, groups)
    zero_point = _zero_point(found)
    if np.any(zero_point.astype(np.float16).astype(np.float32) != zero_point):
        return None
    codes = _nibbles(np.asarray(found.codes.get_data()).reshape(n, groups, 16))
    return codes, scale, zero_point.astype(np.float16)


def ggml_layout(codes: np.ndarray) -> np.ndarray:
    """Q4_1 codes ``[N, G, 32]`` packed as ``Q4MatMul`` reads them, ggml's block layout ``[N, G * 16]``: byte j of a
    block holds code j in its low nibble and code j + 16 in its high one."""
    return (codes[..., :16] | (codes[..., 16:] << 4)).reshape(len(codes), -1)


def f32_layout(codes: np.ndarray) -> np.ndarray:
    """Q4_1 codes ``[N, G, 32]`` packed as the f32 ops read them (``kernels/block_f32.hpp``), ``[N, G * 16]``: each
    block in two halves of 8 bytes, byte i of half h holding code 16h + i in its low nibble and 16h + 8 + i in its
    high one."""
    halves = codes.reshape(len(codes), -1, 2, 2, 8)
    return (halves[..., 0, :] | (halves[..., 1, :] << 4)).reshape(len(codes), -1)


def _q4_1_f32(codes: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`_q4_1`'s weights as ``Q4MatMul`` takes them: codes in ggml's layout, d and ``m = -z * d`` in f32
    (exact)."""
    d = scale.astype(np.float32)
    return ggml_layout(codes), d, -zero_point.astype(np.float32) * d


def _signed_codes(codes: np.ndarray, zero_point: np.ndarray, mappings: list[tuple[int, int]] | None = None,
                  rows: int = 2048) -> np.ndarray | None:
    """u8 codes ``[N, G, 32]`` minus their (integral) zero points f32 ``[N, G]``, as int8 ``[N, G * 32]``; None where a
    difference does not fit in int8. Computed ``rows`` rows at a time, each part's file pages handed back once read
    (within ``mappings``: ``file_pages.release_file_pages``): the whole int16 difference of the default model's LM
    head (49,152 x 576) and its copies took ~110 MB more at load than the result, and its codes 28 MB of file pages
    (the load's peak)."""
    n = codes.shape[0]
    signed = np.empty((n, codes.shape[1] * codes.shape[2]), dtype=np.int8)
    for start in range(0, n, rows):
        part = codes[start : start + rows].astype(np.int16) - zero_point[start : start + rows].astype(np.int16)[..., None]
        if mappings:
            release_file_pages([codes[start : start + rows]], mappings)
        if part.min() < -128 or part.max() > 127:
            return None
        signed[start : start + rows] = part.reshape(len(part), -1)
    return signed


def use_kernel(model: ov.Model, factory: NodeFactory, keep: list, activations: str = "f32",
               mappings: list[tuple[int, int]] | None = None, products: list[ov.Node] | None = None) -> int:
    """Replace the compressed MatMuls with blocks of 32 by the ops; returns how many. Every u4 one (Q4_1) becomes
    ``Q4F32MatMul`` (``activations`` "f32") or ``Q4MatMul`` ("q8_1"); with "f32" the u8 ones whose codes minus zero
    point fit in int8 (Q8_0: the LM head) become ``Q8F32MatMul``. The repacked weights go to ``keep``
    (:func:`product_node`); the file pages of the weights replaced are handed back within ``mappings``
    (:func:`_release_weights`). ``products``: the model's MatMuls in graph order as :func:`use_layers` left them
    (None: :func:`matmuls`)."""
    count = 0
    for node in matmuls(model) if products is None else products:
        found = compressed_product(node)
        if found is None or found.codes.get_output_shape(0)[2] != 32:
            continue
        q4_1 = _q4_1(found)
        if q4_1 is not None:
            codes, *scales = q4_1
            op, weights = ("Q4F32MatMul", (f32_layout(codes), *scales)) if activations == "f32" \
                else ("Q4MatMul", _q4_1_f32(*q4_1))
        elif found.codes.get_output_element_type(0) == ov.Type.u8 and activations == "f32":
            n, groups, _ = found.codes.get_output_shape(0)
            zero_point = _zero_point(found)
            if np.any(zero_point != np.round(zero_point)) or found.scale.get_output_element_type(0) != ov.Type.f16:
                continue
            signed = _signed_codes(np.asarray(found.codes.get_data()), zero_point, mappings)
            if signed is None:
                continue
            scale = np.asarray(found.scale.get_data()).reshape(n, groups)
            op, weights = "Q8F32MatMul", (signed, scale)
        else:
            continue
        found.matmul.output(0).replace(product_node(factory, op, found.matmul.input_value(0), weights, keep).output(0))
        _release_weights(found, mappings)
        count += 1
    return count


def _only_consumer(output: ov.Output, kind: str) -> ov.Node | None:
    """The node reading ``output`` when it is the only one and of type ``kind``, else None."""
    targets = list(output.get_target_inputs())
    node = targets[0].get_node() if len(targets) == 1 else None
    return node if node is not None and node.get_type_name() == kind else None


def _other_input(node: ov.Node, output: ov.Output) -> ov.Output:
    """The input of a two-input ``node`` that is not ``output``."""
    first = node.input_value(0)
    return node.input_value(1) if (first.get_node().get_instance_id(), first.get_index()) == \
        (output.get_node().get_instance_id(), output.get_index()) else first


def _constant(output: ov.Output) -> np.ndarray | None:
    """The f32 value of a Constant, or of a Convert of one; None for anything else."""
    node = output.get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return np.asarray(node.get_data(), dtype=np.float32) if node.get_type_name() == "Constant" else None


def _scalar(output: ov.Output) -> float | None:
    """The value of a one-element constant (:func:`_constant`), else None."""
    value = _constant(output)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def _compressed_consumer(output: ov.Output):
    """The compressed MatMul (``inference.fusion``'s pattern) that alone reads ``output``, or None."""
    matmul = _only_consumer(output, "MatMul")
    return matmul and compressed_product(matmul)


def _layer_tail(o_proj) -> dict | None:
    """The subgraph from a layer's output projection to its second residual Add, as the Llama IR writes it:
    ``r1 = residual + o(attn)``, RMSNorm ``(r1 * (1 / sqrt(mean(r1 ** 2) + eps))) * gamma``, the fused gate/up
    product, ``VariadicSplit``, ``Swish(gate) * up``, the down product, ``y = r1 + down``. Returns its parts, or None
    where anything differs (then the layer is left to :func:`use_kernel`)."""
    if _q4_1(o_proj) is None or o_proj.codes.get_output_shape(0)[1] * 32 != o_proj.columns:
        return None
    add1 = _only_consumer(o_proj.matmul.output(0), "Add")
    if add1 is None:
        return None
    readers = {t.get_node().get_type_name(): t.get_node() for t in add1.output(0).get_target_inputs()}
    if sorted(readers) != ["Add", "Multiply", "Power"] or len(add1.output(0).get_target_inputs()) != 3:
        return None
    power, scaled, add2 = readers["Power"], readers["Multiply"], readers["Add"]
    mean = _only_consumer(power.output(0), "ReduceMean")
    plus_eps = mean and _only_consumer(mean.output(0), "Add")
    root = plus_eps and _only_consumer(plus_eps.output(0), "Sqrt")
    inverse = root and _only_consumer(root.output(0), "Divide")
    normed = _only_consumer(scaled.output(0), "Multiply")
    if inverse is None or normed is None or _other_input(scaled, add1.output(0)).get_node().get_instance_id() \
            != inverse.get_instance_id() or _scalar(power.input_value(1)) != 2.0 or _scalar(inverse.input_value(0)) != 1.0:
        return None
    eps, gamma = _scalar(_other_input(plus_eps, mean.output(0))), _constant(_other_input(normed, scaled.output(0)))
    gate_up = _compressed_consumer(normed.output(0))
    split = gate_up and _only_consumer(gate_up.matmul.output(0), "VariadicSplit")
    if eps is None or gamma is None or split is None or len(split.outputs()) != 2 \
            or _scalar(mean.input_value(1)) not in (-1.0, 2.0) or _scalar(split.input_value(1)) not in (-1.0, 2.0):
        return None  # the mean and the split must be over the last axis of [batch, tokens, features]
    swish = _only_consumer(split.output(0), "Swish")
    product = swish and _only_consumer(swish.output(0), "Multiply")
    if product is None or len(swish.inputs()) != 1 or _other_input(product, swish.output(0)).get_node().get_instance_id() \
            != split.get_instance_id() or _other_input(product, swish.output(0)).get_index() != 1:
        return None
    down = _compressed_consumer(product.output(0))
    if down is None or _other_input(add2, add1.output(0)).get_node().get_instance_id() != down.matmul.get_instance_id():
        return None
    return {"o": o_proj, "gate_up": gate_up, "down": down, "residual": _other_input(add1, o_proj.matmul.output(0)),
            "eps": eps, "gamma": gamma.reshape(-1), "end": add2}


def has_layers(model: ov.Model) -> bool:
    """Whether :func:`use_layers` would find a layer to replace in ``model`` (a look, nothing changed)."""
    return any(_layer_tail(compressed_product(node)) is not None for node in matmuls(model))


def use_layers(model: ov.Model, factory: NodeFactory, keep: list, mappings: list[tuple[int, int]] | None = None,
               products: list[ov.Node] | None = None) -> int:
    """Replace each layer's output projection, residual, RMSNorm and SwiGLU MLP (:func:`_layer_tail`) by one
    ``Q4F32Layer`` op (``kernels/layer_f32.hpp``); returns how many. Their repacked weights go to ``keep``, as in
    :func:`product_node`, and the file pages of the weights replaced are handed back within ``mappings``
    (:func:`_release_weights`). Run before :func:`use_kernel`, which then takes the products left (q/k/v, the LM
    head).

    ``products``: the model's MatMuls in graph order (:func:`matmuls`; None: walked here); on return it holds those
    not replaced, for :func:`use_kernel`. Each is dropped from it as it is passed, so the nodes a layer op replaced
    are freed layer by layer: held to the end, the 30 layers' were freed at once when the list went, holding the GIL
    ~4 ms (default model, this Xeon, ``tools/gil_watch.py model_load``)."""
    if products is None:
        products = matmuls(model)
    pending = products[::-1]
    products.clear()
    replaced: set[int] = set()  # the instance ids of the gate/up and down products of the layers replaced
    count = 0
    while pending:
        node = pending.pop()
        if node.get_instance_id() in replaced:
            continue
        tail = _layer_tail(compressed_product(node))
        if tail is None or tail["gamma"].size != tail["o"].columns:
            products.append(node)
            continue
        hidden, inner = tail["o"].columns, tail["down"].codes.get_output_shape(0)[1] * 32
        gate_up = _q4_1(tail["gate_up"])
        down = _q4_1(tail["down"])
        if gate_up is None or down is None or tail["gate_up"].columns != 2 * inner:
            products.append(node)
            continue
        parts = {"o": _q4_1(tail["o"]), "gate": [a[:inner] for a in gate_up], "up": [a[inner:] for a in gate_up],
                 "down": down}
        parts = {name: (f32_layout(codes), *scales) for name, (codes, *scales) in parts.items()}
        attributes = {"hidden": hidden, "inner": inner, "eps": tail["eps"]}
        for name, arrays in [*parts.items(), ("gamma", [tail["gamma"]])]:
            arrays = [np.ascontiguousarray(a, dtype=a.dtype) for a in arrays]
            keep.extend(arrays)
            if name == "gamma":
                attributes["gamma"] = arrays[0].ctypes.data
            else:
                attributes.update({f"{name}_{part}": a.ctypes.data for part, a in zip(("codes", "scales", "zeros"), arrays)})
        layer = factory.create("Q4F32Layer", [tail["o"].matmul.input_value(0), tail["residual"]], attributes)
        tail["end"].output(0).replace(layer.output(0))
        for product in ("o", "gate_up", "down"):
            _release_weights(tail[product], mappings)
        replaced.update(tail[product].matmul.get_instance_id() for product in ("gate_up", "down"))
        count += 1
    return count

