"""The default model's draft head: shipped inside the package, installed into the store beside the model.

SpecChat ships a draft head trained for SmolLM2-135M-Instruct (``inference.draft_head``; trained by
``tools/draft_head``, its manifest says how) in ``inference/models/data/SmolLM2-135M-Instruct-head``. It needs no
download: :func:`ensure_default_head` copies it into ``models/SmolLM2-135M-Instruct-head`` with a store manifest
(``kind="draft-head"``), so that ``specchat models list``, ``--draft NAME`` and the window's draft list see it like
any installed draft. :func:`inference.models.default_model.ensure_default_model` calls it, so fetching the
default model (``specchat models fetch-default``, the window's first start) installs it too; a newer version of
SpecChat that ships another head replaces the installed copy (their SHA-256s differ).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..draft_head import HEAD_MANIFEST, read_head_manifest
from ..model import MODEL_FILES, ModelLoadError
from . import store
from .progress import ProgressCallback

#: Name of the shipped head, in the package and in the store.
DEFAULT_HEAD_NAME = "SmolLM2-135M-Instruct-head"
#: Where the package keeps it.
SHIPPED_HEAD = Path(__file__).resolve().parent / "data" / DEFAULT_HEAD_NAME
HEAD_FILES = (*MODEL_FILES, "config.json", HEAD_MANIFEST)


def shipped_head() -> Path | None:
    """The head this build of SpecChat ships (a package folder), or None when it ships none."""
    return SHIPPED_HEAD if (SHIPPED_HEAD / HEAD_MANIFEST).is_file() else None


def default_head_dir() -> Path:
    """Where the shipped head is installed: ``models_dir() / "SmolLM2-135M-Instruct-head"``."""
    return store.models_dir() / DEFAULT_HEAD_NAME


def ensure_default_head(progress: ProgressCallback | None = None) -> Path | None:
    """Install the shipped head into the store unless the same one is there; return its folder.

    Returns None when this build of SpecChat ships no head (a source tree without its data files).

    Raises:
        OSError: the store cannot be written (disk full, permissions).
    """
    say = progress or (lambda message: None)
    if shipped_head() is None:
        return None
    final = default_head_dir()
    if _is_current(final):
        return final
    root = store.models_dir()
    with store.store_lock(say):
        if _is_current(final):
            return final
        work = store.new_staging_folder(root, final.name)
        try:
            for name in HEAD_FILES:
                shutil.copyfile(SHIPPED_HEAD / name, work / name)
            _write_store_manifest(work)
            store.install_folder(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    say(f"Draft head {DEFAULT_HEAD_NAME} installed in {final}")
    return final


def _is_current(folder: Path) -> bool:
    """Whether ``folder`` holds the shipped head (same model files, by the SHA-256s its manifest records)."""
    try:
        installed = read_head_manifest(folder)
        store.read_manifest(folder)
    except (ModelLoadError, OSError, ValueError):  # absent, partial or unreadable: reinstall
        return False
    shipped = json.loads((SHIPPED_HEAD / HEAD_MANIFEST).read_text(encoding="utf-8"))
    return installed.get("sha256") == shipped.get("sha256") and all((folder / name).is_file() for name in HEAD_FILES)


def _write_store_manifest(folder: Path) -> store.ModelManifest:
    """The store manifest of a head folder: what ``specchat models list`` and the draft lists read."""
    head = read_head_manifest(folder)
    target = head["target"]
    return store.write_plain_manifest(
        folder,
        name=DEFAULT_HEAD_NAME,
        source="shipped with SpecChat (trained by tools/draft_head)",
        kind=store.DRAFT_HEAD_KIND,
        bits=8,
        layout=store.DRAFT_HEAD_KIND,
        vocab_size=int(target["vocab_size"]),
        tokenizer_fingerprint=target["tokenizer_fingerprint"],
        rope_supported=True,
        architecture="EAGLE draft head (1 decoder layer)",
        head_for=target["name"],
        draft_vocab_size=len(head["draft_vocab"]),
        model_sha256=head["sha256"]["openvino_model.bin"],
    )
