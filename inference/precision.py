"""Numeric precision of a compiled model: what OpenVINO computes in, how it stores the KV cache, whether it
quantizes activations on the fly, and whether a faster copy of the model prefills long prompts.

Design rules, from measurements on the default model (SmolLM2-135M, INT4) on both kinds of CPU we ship on:

* **Exact by default.** OpenVINO's CPU plugin picks its own precision per CPU: bf16 compute where the CPU has
  AVX512_BF16 or AMX (Xeon 4th gen and later, AMD Zen 4 and later), f32 elsewhere; a u8 KV cache everywhere;
  dynamic quantization of activations in groups of 32. Each of these makes a one-token decode pass and a K-token
  verification pass round the same logits differently (measured median differences of 0.13-0.52 logits), so the
  greedy output of speculative decoding would depend on the CPU. ``auto`` therefore computes in f32, keeps the KV
  cache in f32 and turns dynamic quantization off: the two pass shapes then agree within 1.3e-4 logits on either
  CPU (so greedy speculative output equals autoregressive output), and a rolled key equals a fresh prefill's
  within 5e-5.
* **That costs no decode speed**: a decode step reads the weights, not the activations (AMD EPYC, AVX2: 31.7
  tokens/s exact and default; Intel Xeon, AMX: about equal). It costs prefill time where bf16 hardware exists:
  1,024 prompt tokens took 3.5 s in f32 against 1.0 s in bf16 on the Xeon.
* **Fast prefill, exact decode.** Where the device computes bf16 natively, ``auto`` also compiles a bf16 copy of
  the model. Long prompts are prefilled by that copy and its KV states handed to the exact one (1,024 tokens:
  1.0 s + 0.23 s hand-over, 2.8x sooner than an exact prefill; next-token logits within 0.17 of an exact
  prefill's, same argmax). Autoregressive and speculative decoding share that prefill, so greedy identity is
  untouched; see ``KVCache.prefill``.
* **Report what the device really does.** A hint the device cannot honour is ignored silently by OpenVINO (bf16
  on an AVX2 CPU computes f32), so the engine refuses such a request with a message, and what it reports is read
  back from the compiled model, never assumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import openvino as ov

from .devices import device_computes, device_name, is_cpu, native_precisions

INFERENCE_PRECISIONS = ("auto", "f32", "bf16", "f16")
KV_CACHE_PRECISIONS = ("auto", "u8", "f16", "f32")
SWITCHES = ("auto", "on", "off")
FAST_PREFILL_PRECISION = "bf16"


class PrecisionError(ValueError):
    """A precision the device cannot compute in was requested; the message names the setting and what to use."""


@dataclass(frozen=True)
class PrecisionSettings:
    """What a target model is compiled with (the draft model runs at the device's own defaults: its rounding
    only changes which tokens are proposed, never the output).

    Attributes:
        inference: compute precision (OpenVINO's INFERENCE_PRECISION_HINT): ``f32``, ``bf16`` or ``f16``
            where the device computes it natively, or ``auto`` = ``f32`` (exact) on CPUs and the device's own
            choice elsewhere (GPUs compute f16).
        kv_cache: KV-cache storage (KV_CACHE_PRECISION): ``u8``, ``f16``, ``f32``, or ``auto`` = ``f32`` when
            computing in f32, else the device default (``u8`` on CPUs).
        dynamic_quantization: quantize activations on the fly (DYNAMIC_QUANTIZATION_GROUP_SIZE): ``on``
            (device default, 32 on CPUs), ``off``, or ``auto`` = ``off`` when computing in f32, else ``on``.
        fast_prefill: prefill long prompts with a bf16 copy of the model and hand its KV states over: ``on``,
            ``off``, or ``auto`` = on where the device computes bf16 natively and ``inference`` is ``auto``
            (an explicit ``f32`` computes everything in f32: a reply then never depends on how its prompt was
            split into prefill passes). ``on`` where the device has no native bf16 is refused (the copy would
            cost memory and load time and prefill no faster). Without native bf16, ``auto`` with ``inference``
            ``auto`` prefills with an f32 copy running OpenVINO's kernels where the model decodes with SpecChat's
            (``model.LoadedModel.prefill_compiled``); ``off`` prefills with SpecChat's.
    """

    inference: str = "auto"
    kv_cache: str = "auto"
    dynamic_quantization: str = "auto"
    fast_prefill: str = "auto"

    def validate(self) -> None:
        """Raise ``PrecisionError`` (a ValueError) naming the first setting outside its allowed values."""
        for name, allowed in (
            ("inference", INFERENCE_PRECISIONS),
            ("kv_cache", KV_CACHE_PRECISIONS),
            ("dynamic_quantization", SWITCHES),
            ("fast_prefill", SWITCHES),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise PrecisionError(f"{name} precision must be one of {', '.join(allowed)}, got {value!r}")

    def compile_properties(self, device: str) -> dict:
        """OpenVINO properties for ``compile_model`` on ``device``.

        Raises:
            PrecisionError: a setting is invalid, or the device does not compute the requested precision.
        """
        self.validate()
        inference = self.inference if self.inference != "auto" else ("f32" if is_cpu(device) else None)
        if inference and not device_computes(device, inference):
            raise PrecisionError(
                f"inference precision {inference} is not native on {device} "
                f"({device_name(device)} computes {', '.join(native_precisions(device))}): choose auto or f32"
            )
        properties: dict = {"INFERENCE_PRECISION_HINT": inference} if inference else {}
        exact_compute = inference == "f32"
        kv = self.kv_cache if self.kv_cache != "auto" else ("f32" if exact_compute else None)
        if kv:
            properties["KV_CACHE_PRECISION"] = kv
        quantize = self.dynamic_quantization if self.dynamic_quantization != "auto" else ("off" if exact_compute else "on")
        if quantize == "off":
            properties["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
        return properties

    def wants_fast_prefill(self, device: str) -> bool:
        """Whether a bf16 prefill copy is compiled beside the model (see the ``fast_prefill`` attribute).

        Raises:
            PrecisionError: ``fast_prefill="on"`` where the device is no CPU or has no native bf16.
        """
        native = is_cpu(device) and device_computes(device, FAST_PREFILL_PRECISION)
        if self.fast_prefill == "on" and not native:
            raise PrecisionError(
                f"fast prefill needs a CPU that computes bf16 natively (AVX512_BF16 or AMX); {device_name(device)} "
                f"computes {', '.join(native_precisions(device)) or 'its default only'}: choose auto or off"
            )
        return self.fast_prefill == "on" or (self.fast_prefill == "auto" and self.inference == "auto" and native)


#: Properties of the fast prefill copy: bf16, and an f32 KV cache so that the states it hands over lose nothing.
FAST_PREFILL_PROPERTIES = {"INFERENCE_PRECISION_HINT": FAST_PREFILL_PRECISION, "KV_CACHE_PRECISION": "f32"}
#: The KV cache of a prefill copy with paged attention (``model._paged_attention_copy``), by its compute precision:
#: the CPU plugin's bf16 paged attention refuses an f32 cache ("expect kvcache type bf16", 2026.4), and a bf16 copy's
#: keys and values are bf16 numbers anyway (its stateful twin's f32 states equal the paged copy's bf16 ones bit for
#: bit after 1,024 tokens of the default model, ``bench/results/xeon-amx/PAGED_PREFILL.md``); the f32 copy keeps f32.
PAGED_PREFILL_KV_CACHE = {FAST_PREFILL_PRECISION: {"KV_CACHE_PRECISION": "bf16"}, "f32": {"KV_CACHE_PRECISION": "f32"}}


@dataclass(frozen=True)
class NumericPrecision:
    """The precision a compiled model actually uses, read back from OpenVINO.

    Attributes:
        inference: compute precision, e.g. ``f32`` or ``bf16`` ("" if the device does not say).
        kv_cache: KV-cache storage, e.g. ``f32`` or ``u8`` ("" if the device does not say).
        dynamic_quantization_group_size: activations quantized in groups of this many values; 0 = off,
            -1 = the device does not say.
        prefill: compute precision of the fast-prefill copy, or "" when prompts are prefilled by the model itself.
        kernels: which kernels compute the 4-bit weight products (``q4_kernels.Kernels.describe``: "SpecChat's",
            "OpenVINO's (not built)" and the like), "" where not said.
    """

    inference: str
    kv_cache: str
    dynamic_quantization_group_size: int
    prefill: str = ""
    kernels: str = ""

    @classmethod
    def read(cls, compiled: ov.CompiledModel, prefill: ov.CompiledModel | None = None, kernels: str = "") -> "NumericPrecision":
        """What ``compiled`` (and the prefill copy, if any) report, with ``kernels`` as the loader chose them."""
        group = _property(compiled, "DYNAMIC_QUANTIZATION_GROUP_SIZE")
        return cls(
            inference=_type_name(_property(compiled, "INFERENCE_PRECISION_HINT")),
            kv_cache=_type_name(_property(compiled, "KV_CACHE_PRECISION")),
            dynamic_quantization_group_size=int(group) if group is not None else -1,
            prefill=_type_name(_property(prefill, "INFERENCE_PRECISION_HINT")) if prefill is not None else "",
            kernels=kernels,
        )

    @property
    def exact(self) -> bool:
        """True when a one-token and a multi-token pass compute the same logits up to f32 summation order."""
        return self.inference == "f32" and self.kv_cache == "f32" and self.dynamic_quantization_group_size == 0

    def describe(self) -> str:
        """``f32, KV cache f32, no dynamic quantization (exact); prefill bf16; 4-bit kernels: SpecChat's`` and the
        like: every precision says ``(exact)`` or ``(fast)`` (not exact: the status bar's words), ``bf16, KV cache
        u8, dynamic quantization 32 (fast)``."""
        parts = [self.inference or "device default", f"KV cache {self.kv_cache or 'device default'}"]
        if self.dynamic_quantization_group_size == 0:
            parts.append("no dynamic quantization")
        elif self.dynamic_quantization_group_size > 0:
            parts.append(f"dynamic quantization {self.dynamic_quantization_group_size}")
        text = ", ".join(parts) + (" (exact)" if self.exact else " (fast)")
        text += f"; prefill {self.prefill}" if self.prefill else ""
        return text + (f"; 4-bit kernels: {self.kernels}" if self.kernels else "")

    def as_dict(self) -> dict:
        """JSON-ready fields plus ``exact``."""
        return {**asdict(self), "exact": self.exact}


def _property(compiled: ov.CompiledModel | None, name: str):
    if compiled is None:
        return None
    try:
        return compiled.get_property(name)
    except RuntimeError:
        return None


def _type_name(value) -> str:
    if value is None:
        return ""
    return value.get_type_name() if isinstance(value, ov.Type) else str(value)
