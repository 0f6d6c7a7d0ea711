"""The process-wide OpenVINO ``Core`` and what it says about the devices of this machine."""

from __future__ import annotations

import os

import openvino as ov

#: Entries of the CPU plugin's two caches of what it compiled per input shape: its runtime cache
#: (``CPU_RUNTIME_CACHE_CAPACITY``, 5,000 by default) and oneDNN's primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``,
#: 1,024). Auto decoding verifies passes of 1-3 tokens at every cache length, and with the defaults a server's
#: resident memory grew by ~500 MB before the caches filled (Xeon, 300 short requests under Auto, 2026-12-05: RSS 637 ->
#: 1,169 MB and still growing; 100 entries each: 637 -> 787 MB, flat from request 100 (770, 774, 787 at 100, 200,
#: 300), requests 6% slower on that loaded machine (85.6 against 80.6 ms); no cache at all: 699 MB, 2.6x slower).
SHAPE_CACHE_ENTRIES = 100

# OPTIMIZATION_CAPABILITIES entry that says a device computes a precision natively.
_CAPABILITY = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}
#: ``ONEDNN_MAX_CPU_ISA`` values that cap the CPU plugin's kernels below bf16 compute (oneDNN's ISA names). The plugin
#: still reports BF16 under such a cap (OpenVINO 2026.4 on the AMD EPYC Zen 5: ``OPTIMIZATION_CAPABILITIES`` holds
#: BF16 and a bf16 hint compiles as bf16 with ``ONEDNN_MAX_CPU_ISA=AVX2``), so an AVX2 CPU emulated this way
#: (tools/slow_cpu.py) would get the bf16 prefill copy a real one never compiles.
_ISA_CAPS_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"}

_core: ov.Core | None = None


def core() -> ov.Core:
    """The process-wide ``ov.Core`` (creating one is slow; devices and caches are shared). oneDNN's primitive cache
    is bounded to ``SHAPE_CACHE_ENTRIES`` unless ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` is set (read when the CPU plugin
    compiles its first model)."""
    global _core
    if _core is None:
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(SHAPE_CACHE_ENTRIES))
        _core = ov.Core()
    return _core


def available_devices() -> list[str]:
    """OpenVINO devices of this machine, e.g. ``['CPU', 'GPU']``, plus ``AUTO``."""
    return [*core().available_devices, "AUTO"]


def unavailable_device(device: str) -> str | None:
    """Why OpenVINO cannot run on ``device`` here (a sentence that says what to do), or None when it can: a plain
    device name (``GPU``, ``GPU.1``, ``NPU``) that OpenVINO does not find. ``AUTO`` and composite names
    (``HETERO:GPU,CPU``) are left to OpenVINO. (A newcomer's ``--device GPU`` on a machine without OpenCL failed
    while the draft head loaded, with "reinstall it".)"""
    if ":" in device or device.split(".")[0] in ("AUTO", "MULTI", "HETERO", "BATCH"):
        return None
    found = core().available_devices
    if any(name.split(".")[0] == device.split(".")[0] for name in found):  # (GPU for GPU.0, an index OpenVINO judges)
        return None
    return (f"device {device} is not available here: OpenVINO finds {', '.join(found) or 'none'} (a GPU or NPU needs "
            "its driver installed: for an Intel GPU, the compute runtime with OpenCL); choose one of those")


def is_cpu(device: str) -> bool:
    """True for ``CPU`` (the only device whose precisions SpecChat chooses itself)."""
    return device.split(".")[0] == "CPU"


def base_properties(device: str) -> dict:
    """Compile properties every model gets on ``device`` besides its precision: OpenVINO's latency hint (one
    request at a time), and on CPUs inference threads free to move between cores (``ENABLE_CPU_PINNING`` off;
    OpenVINO pins them by default). A pinned thread cannot leave a core another program keeps busy, and a decode
    step waits for its slowest thread. Beside two niced busy processes on 2 AMD EPYC cores, unpinned threads decoded
    faster in two of three side-by-side runs (20.9 vs 23.6 and 22.1 vs 28.0 ms per token) and the same in the third
    (22.3 vs 22.3); quiet, the two differ by less than the runs' noise (``bench/steadiness.py``,
    ``bench/openvino_settings.py``). On CPUs the plugin's runtime cache of per-shape executors is bounded to
    ``SHAPE_CACHE_ENTRIES`` (see there). Where ``ONEDNN_MAX_CPU_ISA`` caps the kernels below bf16, the CPU's default
    precision is f32 (the plugin's own default, bf16 on a CPU that has it, finds no kernel then: the draft head's
    Softmax failed to compile)."""
    properties: dict = {"PERFORMANCE_HINT": "LATENCY"}
    if device == "CPU":
        properties["ENABLE_CPU_PINNING"] = False
        properties["CPU_RUNTIME_CACHE_CAPACITY"] = SHAPE_CACHE_ENTRIES
        if capped_below_bf16():
            properties["INFERENCE_PRECISION_HINT"] = "f32"
    return properties


def capped_below_bf16() -> bool:
    """Whether ``ONEDNN_MAX_CPU_ISA`` caps the CPU plugin's kernels below bf16 compute (e.g. ``AVX2``, as
    ``tools/slow_cpu.py`` sets it to stand in for an AVX2-only CPU): bf16 is then not native, and kernels the plugin
    would pick from the CPU's real flags (its dynamic quantization on a CPU with AMX) may find no implementation."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in _ISA_CAPS_WITHOUT_BF16


def native_precisions(device: str) -> list[str]:
    """Compute precisions the device runs natively, e.g. ``['f32']`` on AVX2, ``['f32', 'bf16']`` with AMX;
    [] where the device does not say (AUTO, HETERO, an unknown device). On a CPU whose kernels
    ``ONEDNN_MAX_CPU_ISA`` caps below bf16 (e.g. ``AVX2``), bf16 is not native, whatever the plugin reports."""
    try:
        capabilities = set(core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
    except RuntimeError:
        return []
    if is_cpu(device) and capped_below_bf16():
        capabilities.discard("BF16")
    return [name for name, capability in _CAPABILITY.items() if capability in capabilities]


def device_computes(device: str, precision: str) -> bool:
    """Whether ``device`` computes ``precision`` natively; devices that do not report capabilities are trusted."""
    natives = native_precisions(device)
    return not natives or precision in natives


def device_name(device: str) -> str:
    """``FULL_DEVICE_NAME`` of a device (e.g. the CPU model), or the device string itself."""
    try:
        return str(core().get_property(device, "FULL_DEVICE_NAME"))
    except RuntimeError:
        return device
