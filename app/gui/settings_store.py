"""The application's settings: what the settings pane edits, how they are checked, and where they persist.

Settings live in ``settings.json`` in the platformdirs user config folder (``$SPECCHAT_CONFIG_DIR`` overrides
it). Checks reuse the engine's own validation (``inference.settings``), field by field, so the pane can show
each error, with its allowed range, next to the field it concerns; settings with errors never reach the engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import platformdirs

from inference.models.store import SUPPORTED_BITS, user_dir
from inference.precision import PrecisionSettings
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    SamplingSettings,
    SpeculativeSettings,
)

logger = logging.getLogger(__name__)

SETTINGS_NAME = "settings.json"
SETTINGS_VERSION = 1
#: Decoding modes of the settings pane: key -> label.
DECODING_MODES = {
    "ar": "Autoregressive",
    "spec_model": "Speculative, draft model",
    "spec_lookup": "Speculative, prompt lookup",
}


def config_dir() -> Path:
    """SpecChat's config folder: ``$SPECCHAT_CONFIG_DIR`` if set, else ``platformdirs.user_config_dir("specchat")``."""
    return user_dir("SPECCHAT_CONFIG_DIR", platformdirs.user_config_dir)


@dataclass(frozen=True)
class AppSettings:
    """Everything the settings pane controls.

    Model settings (``target_device``, ``bits``, ``precision``, ``kv_cache_precision``, ``decoding`` when it
    involves a draft model, ``draft_model``, ``draft_device``) need a model reload; the others apply to the next
    reply.

    Attributes:
        target_device / draft_device: OpenVINO devices (``available_devices()``).
        bits: weight bit-width of the default target model, 4, 8 or 16.
        precision: compute precision of the target, ``auto`` (f32, exact; bf16 prefill where the CPU has bf16),
            ``f32``, ``bf16`` or ``f16`` where the device computes it (``inference.precision``).
        kv_cache_precision: ``auto`` (f32 with f32 compute, else the device's u8), ``u8``, ``f16`` or ``f32``.
        decoding: ``ar``, ``spec_model`` (draft model) or ``spec_lookup`` (prompt lookup).
        draft_model: folder of the draft model ("" = none chosen).
        k: draft tokens per step (K); adaptive_k: tune K from the acceptance rate.
        n_ctx / n_keep / n_discard: the rolling context (n_keep may be ``"auto"``, n_discard -1 = half).
        temperature / top_p / top_k / seed / max_new_tokens: sampling (seed None = random).
        highlight_draft: colour the text that came from accepted draft tokens.
    """

    target_device: str = "CPU"
    draft_device: str = "CPU"
    bits: int = 4
    precision: str = "auto"
    kv_cache_precision: str = "auto"
    decoding: str = "ar"
    draft_model: str = ""
    k: int = 4
    adaptive_k: bool = False
    n_ctx: int = 4096
    n_keep: int | str = 4
    n_discard: int = -1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_new_tokens: int = 512
    highlight_draft: bool = True

    @property
    def uses_draft_model(self) -> bool:
        """True when replies need the draft model loaded."""
        return self.decoding == "spec_model"

    def generation_settings(self, decoding: Decoding | None = None, seed: int | None = None) -> GenerationSettings:
        """The engine settings for the next reply (``decoding`` and ``seed`` override ours)."""
        return GenerationSettings(
            decoding=decoding or self.decoding,
            sampling=SamplingSettings(
                temperature=float(self.temperature),
                top_k=int(self.top_k),
                top_p=float(self.top_p),
                seed=self.seed if seed is None else seed,
                max_new_tokens=int(self.max_new_tokens),
            ),
            context=ContextSettings(n_ctx=int(self.n_ctx), n_keep=self.n_keep, n_discard=int(self.n_discard)),
            speculative=SpeculativeSettings(k=int(self.k), adaptive=bool(self.adaptive_k)),
        )

    def precision_settings(self) -> PrecisionSettings:
        """The target's numeric precision (dynamic quantization and fast prefill follow ``auto``)."""
        return PrecisionSettings(inference=self.precision, kv_cache=self.kv_cache_precision)

    def model_key(self) -> tuple:
        """What the loaded models depend on: a change of it needs a reload."""
        draft = (self.draft_model, self.draft_device) if self.uses_draft_model else (None, None)
        return (self.target_device, self.bits, self.precision, self.kv_cache_precision, *draft)

    def field_errors(
        self,
        max_position_embeddings: int | None = None,
        devices: list[str] | None = None,
    ) -> dict[str, str]:
        """Errors per field name (empty when everything is valid).

        Each field is checked on its own with the engine's validation, so several errors show at once and each
        message names the setting and its allowed range; n_keep and n_discard are checked against n_ctx.
        """
        errors: dict[str, str] = {}

        def check(name: str, validate) -> None:
            try:
                validate()
            except ValueError as error:
                errors[name] = str(error)
            except TypeError as error:  # a hand-edited settings file with a wrong type
                errors[name] = f"{name} has an invalid value ({error})"

        check("temperature", lambda: SamplingSettings(temperature=self.temperature).validate())
        check("top_p", lambda: SamplingSettings(top_p=self.top_p).validate())
        check("top_k", lambda: SamplingSettings(top_k=self.top_k).validate())
        check("seed", lambda: SamplingSettings(seed=self.seed).validate())
        check("max_new_tokens", lambda: SamplingSettings(max_new_tokens=self.max_new_tokens).validate())
        check("n_ctx", lambda: ContextSettings(n_ctx=self.n_ctx).validate(max_position_embeddings))
        if "n_ctx" not in errors:
            check("n_keep", lambda: ContextSettings(n_ctx=self.n_ctx, n_keep=self.n_keep).validate())
            if "n_keep" not in errors:
                check(
                    "n_discard",
                    lambda: ContextSettings(n_ctx=self.n_ctx, n_keep=self.n_keep, n_discard=self.n_discard).validate(),
                )
        check("k", lambda: SpeculativeSettings(k=self.k).validate())
        if self.bits not in SUPPORTED_BITS:
            errors["bits"] = f"bit-width must be one of {', '.join(map(str, SUPPORTED_BITS))}, got {self.bits}"
        if self.decoding not in DECODING_MODES:
            errors["decoding"] = f"decoding mode must be one of {', '.join(DECODING_MODES)}, got {self.decoding!r}"
        check("precision", lambda: PrecisionSettings(inference=self.precision).validate())
        check("kv_cache_precision", lambda: PrecisionSettings(kv_cache=self.kv_cache_precision).validate())
        if devices and self.target_device in devices and "precision" not in errors:
            check("precision", lambda: self.precision_settings().compile_properties(self.target_device))
        if devices:
            if self.target_device not in devices:
                errors["target_device"] = f"device must be one of {', '.join(devices)}, got {self.target_device!r}"
            if self.uses_draft_model and self.draft_device not in devices:
                errors["draft_device"] = f"device must be one of {', '.join(devices)}, got {self.draft_device!r}"
        if self.uses_draft_model:
            if not self.draft_model:
                errors["draft_model"] = (
                    "speculative decoding with a draft model needs a draft model: choose one with the same tokenizer "
                    "as the target, or use prompt lookup"
                )
            elif not Path(self.draft_model).is_dir():
                errors["draft_model"] = f"draft model folder {self.draft_model} does not exist"
        if not errors:
            check("general", lambda: self.generation_settings().validate(max_position_embeddings))
        return errors


#: Fields of AppSettings and the types a settings file may give them.
_TYPES: dict[str, tuple[type, ...]] = {
    "target_device": (str,),
    "draft_device": (str,),
    "bits": (int,),
    "precision": (str,),
    "kv_cache_precision": (str,),
    "decoding": (str,),
    "draft_model": (str,),
    "k": (int,),
    "adaptive_k": (bool,),
    "n_ctx": (int,),
    "n_keep": (int, str),
    "n_discard": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": (int,),
    "seed": (int, type(None)),
    "max_new_tokens": (int,),
    "highlight_draft": (bool,),
}


class SettingsStore:
    """Reads and writes ``settings.json`` (atomically: a crash mid-write keeps the previous file).

    The file holds ``{"version": 1, "settings": {...AppSettings...}, "ui": {...window state...}}``.

    Args:
        path: the settings file; default ``config_dir() / "settings.json"``.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else config_dir() / SETTINGS_NAME
        self.warnings: list[str] = []
        self._ui: dict[str, Any] = {}

    def load(self) -> AppSettings:
        """The stored settings; missing, unknown or mistyped entries fall back to defaults (see ``warnings``)."""
        self.warnings = []
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return AppSettings()
        except (OSError, ValueError) as error:
            self.warnings.append(f"{self.path} is unreadable ({error}); using default settings")
            return AppSettings()
        if not isinstance(raw, dict):
            self.warnings.append(f"{self.path} does not hold a JSON object; using default settings")
            return AppSettings()
        self._ui = raw.get("ui") if isinstance(raw.get("ui"), dict) else {}
        stored = raw.get("settings") if isinstance(raw.get("settings"), dict) else {}
        values = {}
        for f in fields(AppSettings):
            if f.name not in stored:
                continue
            value = stored[f.name]
            allowed = _TYPES[f.name]
            if isinstance(value, bool) and bool not in allowed:
                value = object()  # JSON true/false is not a number here
            if not isinstance(value, allowed):
                self.warnings.append(f"setting {f.name} has an invalid value {stored[f.name]!r}; using the default")
                continue
            values[f.name] = value
        if isinstance(values.get("n_keep"), str) and values["n_keep"] != "auto":
            self.warnings.append(f"setting n_keep has an invalid value {values['n_keep']!r}; using the default")
            del values["n_keep"]
        return replace(AppSettings(), **values)

    def save(self, settings: AppSettings) -> None:
        """Write the settings (and the last UI state) to the file."""
        self._write({"version": SETTINGS_VERSION, "settings": asdict(settings), "ui": self._ui})

    @property
    def ui_state(self) -> dict[str, Any]:
        """Window geometry and splitter positions saved by the main window (after :meth:`load`)."""
        return dict(self._ui)

    def save_ui_state(self, settings: AppSettings, ui: dict[str, Any]) -> None:
        """Store the window state together with the settings."""
        self._ui = dict(ui)
        self.save(settings)

    def _write(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".settings-", suffix=".json", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=2)
                file.write("\n")
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

