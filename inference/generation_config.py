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
