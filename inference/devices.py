"""The process-wide OpenVINO ``Core`` and what it says about the devices of this machine."""

from __future__ import annotations

import openvino as ov

# OPTIMIZATION_CAPABILITIES entry that says a device computes a precision natively.
_CAPABILITY = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}

_core: ov.Core | None = None


def core() -> ov.Core:
    """The process-wide ``ov.Core`` (creating one is slow; devices and caches are shared)."""
    global _core
    if _core is None:
        _core = ov.Core()
    return _core


def available_devices() -> list[str]:
    """OpenVINO devices of this machine, e.g. ``['CPU', 'GPU']``, plus ``AUTO``."""
    return [*core().available_devices, "AUTO"]


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
    ``bench/openvino_settings.py``)."""
    properties: dict = {"PERFORMANCE_HINT": "LATENCY"}
    if device == "CPU":
        properties["ENABLE_CPU_PINNING"] = False
    return properties


def native_precisions(device: str) -> list[str]:
    """Compute precisions the device runs natively, e.g. ``['f32']`` on AVX2, ``['f32', 'bf16']`` with AMX;
    [] where the device does not say (AUTO, HETERO, an unknown device)."""
    try:
        capabilities = set(core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
    except RuntimeError:
        return []
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
