"""Sampling presets: named sets of the values that choose tokens (temperature, top-p, top-k, penalties).

A preset holds ``PRESET_KEYS`` only; seed, reply length and stop strings are not part of it. Three ship with the
app (``BUILTIN_PRESETS``), the user saves more (``SettingsStore.presets``), and ``MODEL_DEFAULT`` stands for what
the loaded model's ``generation_config.json`` recommends over ``CHAT_DEFAULTS`` (``inference.generation_config``).
New settings start from ``MODEL_DEFAULT``.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from inference.generation_config import CHAT_DEFAULTS, sampling_defaults
from inference.settings import SamplingSettings

#: Flat setting names a preset holds, in display order.
PRESET_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "presence_penalty", "frequency_penalty")
#: The preset that follows the loaded model.
MODEL_DEFAULT = "Model default"


def _values(settings: SamplingSettings) -> dict[str, Any]:
    every = asdict(settings)
    return {key: every[key] for key in PRESET_KEYS}


#: The shipped presets, by name: greedy with llama.cpp's repetition penalty 1.1 (still deterministic; plain greedy
#: repeated a whole paragraph word for word from about the 200th word of "Tell me a story about a dragon.", the
#: penalty none in 400 tokens); the chat defaults with the same penalty; hotter and wider.
BUILTIN_PRESETS: dict[str, dict[str, Any]] = {
    "Precise": _values(SamplingSettings(repetition_penalty=1.1)),
    "Balanced": _values(SamplingSettings(temperature=0.7, top_p=0.9, repetition_penalty=1.1)),
    "Creative": _values(SamplingSettings(temperature=1.0, top_p=0.95)),
}


def model_default(folder: str | Path | None) -> dict[str, Any]:
    """The values of ``MODEL_DEFAULT`` for a model folder: what its ``generation_config.json`` recommends, the rest
    from ``CHAT_DEFAULTS`` (all of them for None or a folder without one)."""
    values = _values(CHAT_DEFAULTS)
    if folder is not None:
        values.update(sampling_defaults(folder))
    return values


def preset_values(values: dict[str, Any]) -> dict[str, Any]:
    """A complete preset from a partial one: missing keys take the engine's neutral values (greedy, no penalty)."""
    return {**_values(SamplingSettings()), **{key: values[key] for key in PRESET_KEYS if key in values}}
