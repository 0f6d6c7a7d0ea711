"""The default model's draft head: shipped inside the package, installed into the store beside the model.

SpecChat ships a draft head trained for SmolLM2-135M-Instruct (``inference.draft_head``; trained by
``tools/draft_head``, its manifest says how) in ``inference/models/data/SmolLM2-135M-Instruct-head``. It needs no
download: :func:`ensure_default_head` copies it into ``models/SmolLM2-135M-Instruct-head`` with a store manifest
(``kind="draft-head"``), so that ``specchat models list``, ``--draft NAME`` and the window's draft list see it like
any installed draft. :func:`inference.models.default_model.ensure_default_model` calls it, so fetching the
default model (``specchat models fetch-default``, the window's first start) installs it too; a newer version of
SpecChat that ships another head replaces the installed copy (their manifests differ).

Its manifest records the SHA-256 of every other file. Both copies are hashed against it (once per process while a
file's size and modification time stay the same): the package's before it is copied (a damaged package is an
error that says to reinstall SpecChat), the installed one at every install and before it is loaded
(:func:`repair_default_head`); an installed copy that differs is reinstalled from the package, with a log line.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..draft_head import HEAD_MANIFEST, damaged_files, read_head_manifest
from ..model import MODEL_FILES, ModelLoadError
from . import store
from .errors import ModelImportError
from .manifest import DRAFT_HEAD_KIND
from .progress import ProgressCallback

logger = logging.getLogger(__name__)

#: Name of the shipped head, in the package and in the store (which only this module installs:
#: :func:`inference.models.store.reserved_name`).
DEFAULT_HEAD_NAME = store.DEFAULT_HEAD_NAME
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
    """Install the shipped head into the store unless the same one, undamaged, is there; return its folder.

    An installed copy whose files differ from its manifest's SHA-256s, or whose manifest differs from the shipped
    one, is replaced (logged, and said through ``progress``).

    Returns None when this build of SpecChat ships no head (a source tree without its data files).

    Raises:
        ModelImportError: the package's own copy is damaged (a file missing or differing from its manifest's
            SHA-256): the message says to reinstall SpecChat.
        OSError: the store cannot be written (disk full, permissions).
    """
    say = progress or (lambda message: None)
    if shipped_head() is None:
        return None
    final = default_head_dir()
    if _mismatch(final) is None:
        return final
    with store.store_lock(say):
        mismatch = _mismatch(final)
        if mismatch is None:
            return final
        _check_shipped()
        if final.exists():
            logger.warning("The draft head in %s %s: reinstalling it from the package", final, mismatch)
            say(f"The draft head in {final} {mismatch}: reinstalling it")
        work = store.new_staging_folder(store.models_dir(), final.name)
        try:
            for name in HEAD_FILES:
                shutil.copyfile(SHIPPED_HEAD / name, work / name)
            _write_store_manifest(work)
            store.install_folder(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    say(f"Draft head {DEFAULT_HEAD_NAME} installed in {final}")
    return final


def repair_default_head(folder: str | Path) -> None:
    """Before a draft head is loaded: when ``folder`` is the installed shipped head, check it and reinstall it if it
    differs (:func:`ensure_default_head`); any other folder is left as it is.

    Raises:
        ModelImportError, OSError: as :func:`ensure_default_head`.
    """
    if shipped_head() is not None and Path(folder).expanduser().resolve() == default_head_dir().resolve():
        ensure_default_head()


def _mismatch(folder: Path) -> str | None:
    """How ``folder`` differs from the shipped head, e.g. ``"is damaged: openvino_model.bin (its SHA-256
    differs)"``, or None when it holds the same manifest and files of the bytes it records."""
    try:
        installed = read_head_manifest(folder)
        store.read_manifest(folder)
    except (ModelLoadError, OSError, ValueError):  # absent, partial or unreadable
        return "is incomplete or unreadable"
    if installed != read_head_manifest(SHIPPED_HEAD):
        return "is another version"
    damaged = damaged_files(folder, installed)
    return f"is damaged: {', '.join(damaged)}" if damaged else None


def _check_shipped() -> None:
    """Raise ModelImportError unless the package's head matches its own manifest's SHA-256s."""
    try:
        manifest = read_head_manifest(SHIPPED_HEAD)
    except ModelLoadError as error:
        raise ModelImportError(
            f"the draft head shipped with SpecChat is damaged ({error}): reinstall SpecChat"
        ) from error
    damaged = damaged_files(SHIPPED_HEAD, manifest)
    unrecorded = [name for name in HEAD_FILES if name != HEAD_MANIFEST and name not in manifest.get("sha256", {})]
    if damaged or unrecorded:
        what = ", ".join(damaged + [f"{name} (no SHA-256 recorded)" for name in unrecorded])
        raise ModelImportError(
            f"the draft head shipped with SpecChat in {SHIPPED_HEAD} is damaged: {what}; reinstall SpecChat"
        )


def _write_store_manifest(folder: Path) -> store.ModelManifest:
    """The store manifest of a head folder: what ``specchat models list`` and the draft lists read."""
    head = read_head_manifest(folder)
    target = head["target"]
    return store.write_plain_manifest(
        folder,
        name=DEFAULT_HEAD_NAME,
        source="shipped with SpecChat (trained by tools/draft_head)",
        kind=DRAFT_HEAD_KIND,
        bits=8,
        layout=DRAFT_HEAD_KIND,
        vocab_size=int(target["vocab_size"]),
        tokenizer_fingerprint=target["tokenizer_fingerprint"],
        rope_supported=True,
        architecture="EAGLE draft head (1 decoder layer)",
        head_for=target["name"],
        draft_vocab_size=len(head["draft_vocab"]),
        model_sha256=head["sha256"]["openvino_model.bin"],
    )
