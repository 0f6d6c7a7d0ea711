"""The sampling a model's authors recommend: the ``generation_config.json`` of its folder.

Hugging Face repositories and optimum-intel exports carry this file (``transformers.GenerationConfig``). Of it,
SpecChat reads what its own sampling has: ``temperature``, ``top_p``, ``top_k`` and ``repetition_penalty``, and
``do_sample``: false there means greedy decoding (transformers then ignores the temperature), so it reads as
temperature 0. Values outside SpecChat's ranges (``SamplingSettings.validate``) are left out, never fatal.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

from .settings import SamplingSettings, SettingError

logger = logging.getLogger(__name__)

GENERATION_CONFIG_NAME = "generation_config.json"
#: What a model samples with where its generation_config.json says nothing: temperature 0.7, top-p 0.9 (common chat
#: defaults) and llama.cpp's repetition penalty 1.1. Without the penalty the default model still looped in 2 of 10
#: open-ended replies of 200 tokens, with it in none (bench/loop_check.py). The window's "Model default" preset and
#: a server request's omitted sampling fields use these.
CHAT_DEFAULTS = SamplingSettings(temperature=0.7, top_p=0.9, repetition_penalty=1.1)
#: The keys read, with the type each must have.
_KEYS = {"temperature": float, "top_p": float, "top_k": int, "repetition_penalty": float}


def sampling_defaults(folder: str | Path) -> dict[str, float | int]:
    """The sampling values ``folder/generation_config.json`` recommends, by ``SamplingSettings`` field name.

    Args:
        folder: a model folder.

    Returns:
        A subset of ``{"temperature", "top_p", "top_k", "repetition_penalty"}`` (floats; top_k an int); ``{}``
        when the folder has no such file, or it is unreadable (logged as a warning).
    """
    path = Path(folder) / GENERATION_CONFIG_NAME
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        logger.warning("ignoring %s: %s", path, error)
        return {}
    if not isinstance(config, dict):
        return {}
    values: dict[str, float | int] = {}
    for key, kind in _KEYS.items():
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or value == int(value)):
            candidate = {**values, key: kind(value)}
            try:
                replace(SamplingSettings(), **candidate).validate()
            except SettingError:
                continue
            values = candidate
    if config.get("do_sample") is False:
        values["temperature"] = 0.0
    return values


def recommended_sampling(folder: str | Path | None, base: SamplingSettings = CHAT_DEFAULTS) -> SamplingSettings:
    """``base`` (the chat defaults) with what ``folder/generation_config.json`` recommends on top (``base`` alone
    for None or a folder without one)."""
    return replace(base, **sampling_defaults(folder)) if folder is not None else base
