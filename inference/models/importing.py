"""Importing a local model into the store: an OpenVINO IR folder or a GGUF file.

- An IR folder (optimum-intel or openvino-genai layout, see :mod:`inference.models.inspect`) is validated
  (model files present and readable, tokenizer IRs present or creatable), copied (hard-linked where the file
  system allows) and described in a manifest. Missing tokenizer IRs are created from the Hugging Face
  tokenizer files with the conversion extra (:func:`inference.models.convert.create_tokenizer_irs`).
- A GGUF file is checked first (magic, architecture, tensor types), then converted to IR by openvino-genai
  (``LLMPipeline(gguf, "CPU", enable_save_ov_model=True)``, the same path as the default model), with a
  ``config.json`` derived from its metadata so the rolling context knows its RoPE.

Both run in the calling thread (the GUI calls them from a worker thread) and take seconds for small models:
copying is bounded by the disk, and openvino-genai reads a 1 GB GGUF in about 10-30 s on 2 cores.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..model import MODEL_FILES, REQUIRED_FILES
from . import store
from .disk_space import require_space
from .errors import ModelImportError, advised
from .gguf import (
    GGML_TYPE_BITS,
    GGML_TYPE_NAMES,
    GGUF_ARCHITECTURES,
    SUPPORTED_GGUF_TYPES,
    export_ir,
    gguf_architecture,
    hf_config_from_gguf,
    read_gguf_header,
)
from .inspect import CONFIG_NAME, folder_layout, has_tokenizer_irs, missing_files, read_ir
from .progress import ProgressCallback, ProgressEvent, check_cancel, reporter
from .store import ModelBuild, build_model, copy_files, name_from


def classify_source(text: str) -> str:
    """What a model source names (the Models dialog's "Add" field, ``specchat models import``).

    Returns:
        ``"gguf"`` (a file), ``"ir"`` (a folder with ``openvino_model.xml``), ``"checkpoint"`` (a folder with
        ``config.json``: a Hugging Face checkpoint, to convert), ``"repo"`` (``organisation/name``), or ``""``
        (empty or unrecognised text).

    Raises:
        ModelImportError: a folder that holds neither, before anything suggests converting it; text that looks like
            a path (it starts with ``/``, ``~`` or ``.``, holds a path separator or ends in ``.gguf``, and is no
            repository id) and names nothing.
    """
    text = text.strip()
    if not text:
        return ""
    path = Path(text).expanduser()
    if path.is_file():
        return "gguf"
    if path.is_dir():
        if (path / MODEL_FILES[0]).is_file():
            return "ir"
        if (path / CONFIG_NAME).is_file():
            return "checkpoint"
        raise ModelImportError(
            f"{path} is not a model folder: no {MODEL_FILES[0]} (OpenVINO IR) nor {CONFIG_NAME} (a Hugging Face checkpoint)"
        )
    if text.count("/") == 1 and not text.startswith(("/", ".", "~")) and not text.lower().endswith(".gguf"):
        return "repo"
    if text.startswith(("/", "~", ".")) or "/" in text or "\\" in text or text.lower().endswith(".gguf"):
        raise ModelImportError(f"no such file or folder: {text}")
    return ""


def import_model(
    source: str | Path,
    name: str | None = None,
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Import a GGUF file or an OpenVINO IR folder into the store (dispatches on what ``source`` is).

    Returns:
        The installed model folder ``models_dir() / name``.

    Raises:
        ModelImportError: a folder that holds no model (:func:`classify_source`), a Hugging Face checkpoint (with the
            command that converts it: ``convert.convert_checkpoint``); see :func:`import_gguf` and
            :func:`import_ir_folder`.
        OperationCancelled: ``cancel`` was set; nothing was left in the store.
    """
    path = Path(source).expanduser()
    kind = classify_source(str(source))
    if kind == "checkpoint":  # refused with the command that converts it (it is the original checkpoint)
        raise advised(ModelImportError, f"{path} is a Hugging Face checkpoint, not an OpenVINO IR folder",
                      "convert-checkpoint", ": ", path=shlex.quote(str(path)))
    if kind == "ir":
        return import_ir_folder(path, name, replace=replace, progress=progress, cancel=cancel)
    if kind == "gguf":
        return import_gguf(path, name, replace=replace, progress=progress, cancel=cancel)
    raise ModelImportError(f"{path} does not exist; pass an OpenVINO IR folder or a .gguf file")


def import_ir_folder(
    folder: str | Path,
    name: str | None = None,
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Validate an OpenVINO IR folder and copy it into the store.

    Copies the regular files at the top of ``folder`` (sub-folders and hidden files are skipped). Tokenizer
    IRs missing from an optimum-intel layout are created with the conversion extra.

    Args:
        folder: holds ``openvino_model.xml``/``.bin`` and the tokenizer IRs or Hugging Face tokenizer files.
        name: model name in the store (default: the folder's name).
        replace: replace an installed model of the same name.
        progress: receives :class:`inference.models.progress.ProgressEvent` s (bytes copied).
        cancel: set it to stop; the partial copy is deleted.

    Returns:
        The installed model folder.

    Raises:
        ModelImportError: a required file is missing (named in the message), the IR is unreadable, the
            tokenizer IRs are missing and cannot be created (the message says how to install the extra),
            not enough disk space, or the name is taken.
        OperationCancelled: ``cancel`` was set.
    """
    folder = Path(folder).expanduser().resolve()
    name = name_from(folder.name) if name is None else name
    store.check_free_name(name, replace)  # before the IR is read (seconds)
    say = reporter(progress)
    say(ProgressEvent(f"Checking {folder}...", stage="check"))
    layout, needs_tokenizer = check_ir_folder(folder, "create the tokenizer IRs (openvino_tokenizer.xml) this folder lacks")
    files = [
        p for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.name != store.MANIFEST_NAME and p.suffix.lower() != ".gguf"
    ]  # fmt: skip
    store.models_dir().mkdir(parents=True, exist_ok=True)
    require_space(store.models_dir(), sum(p.stat().st_size for p in files), f"importing {folder.name}")
    return install_ir_files(
        files, name, f"ir:{folder}", "ir-import", needs_tokenizer=needs_tokenizer,
        replace=replace, progress=say, cancel=cancel, extra={"original_layout": layout},
    )  # fmt: skip


def check_ir_folder(folder: Path, purpose: str) -> tuple[str, bool]:
    """Validate an OpenVINO IR folder before installing it: its layout, a readable IR, and tokenizer IRs that
    are present or can be created (the conversion extra is installed).

    Args:
        folder: the IR folder.
        purpose: completes "to ..." in the message when the conversion extra is missing.

    Returns:
        ``(layout, needs_tokenizer)``: :func:`inference.models.inspect.folder_layout`'s name, and whether the
        tokenizer IRs must be created.

    Raises:
        ModelImportError: a required file is missing, the IR is unreadable or truncated.
        ConversionExtraMissing: the tokenizer IRs are missing and the conversion extra is not installed.
    """
    layout = folder_layout(folder)
    read_ir(folder)  # fails early on a truncated .bin
    needs_tokenizer = not has_tokenizer_irs(folder)
    if needs_tokenizer:
        from .convert import require_conversion_extra

        require_conversion_extra(purpose)
    return layout, needs_tokenizer


def install_ir_files(
    files: list[Path],
    name: str,
    source: str,
    kind: str,
    *,
    needs_tokenizer: bool,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Copy a checked IR folder's ``files`` into a new model of the store (:func:`inference.models.store.build_model`),
    creating the tokenizer IRs first if ``needs_tokenizer`` (see :func:`check_ir_folder`).

    Returns:
        The installed model folder.

    Raises:
        ModelImportError: the name is taken, or the copied folder is not a loadable model.
        ConversionError: creating the tokenizer IRs failed.
        OperationCancelled: ``cancel`` was set; nothing was left in the store.
    """
    say = reporter(progress)
    with build_model(name, source, kind, replace=replace, progress=say, extra=extra) as build:
        copy_files(files, build.folder, say, cancel)
        if needs_tokenizer:
            from .convert import create_tokenizer_irs

            say(ProgressEvent("Creating the tokenizer IRs from the Hugging Face tokenizer files...", stage="convert"))
            create_tokenizer_irs(build.folder, progress=say, cancel=cancel)
        check_cancel(cancel)
    return build.final


def inspect_gguf(path: str | Path) -> dict:
    """Check a GGUF file before converting it.

    Returns:
        ``{"architecture", "file_type", "tensor_types": {type name: count}, "bits", "config"}`` (``config``:
        the Hugging Face style config.json derived from its metadata).

    Raises:
        ModelImportError: not a GGUF file (bad magic or truncated header), an architecture openvino-genai
            cannot build, or tensor types it cannot read (the message names the types that work).
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as error:
        raise ModelImportError(f"cannot read {path}: {error}") from error
    if magic != b"GGUF":
        raise ModelImportError(
            f"{path.name} is not a GGUF file (it does not start with the GGUF magic bytes); pass a .gguf model file "
            "or an OpenVINO IR folder"
        )
    scalars, _, tensors = read_gguf_header(path)
    arch = gguf_architecture(scalars, path)
    counts: dict[str, int] = {}
    bad: set[str] = set()
    for tensor_name, dims, ggml_type in tensors:
        type_name = GGML_TYPE_NAMES.get(ggml_type, f"type {ggml_type}")
        counts[type_name] = counts.get(type_name, 0) + 1
        is_vector = sum(1 for d in dims if d > 1) <= 1
        if type_name in SUPPORTED_GGUF_TYPES or (is_vector and type_name == "F32"):
            continue
        bad.add(type_name)
    if bad:
        raise ModelImportError(
            f"{path.name} holds tensors of type {', '.join(sorted(bad))}, which openvino-genai cannot read. "
            f"GGUF files whose weight matrices are {', '.join(SUPPORTED_GGUF_TYPES)} work (e.g. Q4_0, Q4_1, Q4_K_M, "
            "Q8_0 or F16 files): download one of those quantizations instead."
        )
    file_type = scalars.get("general.file_type")
    if not isinstance(file_type, int) or isinstance(file_type, bool):
        raise ModelImportError(
            f"{path.name} lacks the general.file_type key (a whole number), which openvino-genai needs; re-save it "
            "with a current gguf tool"
        )
    matrix_types = [
        GGML_TYPE_NAMES.get(t, "") for _, dims, t in tensors if sum(1 for d in dims if d > 1) >= 2
    ]
    layer_types = [t for t in matrix_types if t in GGML_TYPE_BITS]
    bits = min((GGML_TYPE_BITS[t] for t in layer_types), default=None)
    config = hf_config_from_gguf(path)
    return {
        "architecture": arch,
        "file_type": file_type,
        "tensor_types": counts,
        "bits": bits,
        "config": config,
    }


def import_gguf(
    path: str | Path,
    name: str | None = None,
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    source: str | None = None,
    extra_manifest: Mapping[str, Any] | None = None,
) -> Path:
    """Convert a GGUF file to an OpenVINO IR folder in the store (the GGUF itself is not kept).

    Args:
        path: the ``.gguf`` file (its tensor types must be in :data:`SUPPORTED_GGUF_TYPES`).
        name: model name (default: the file name without ``.gguf``).
        replace, progress, cancel: see :func:`import_ir_folder` (cancel takes effect before and after the
            conversion step, which cannot be interrupted).
        source: what the manifest records as the source (default ``gguf:<path>``).
        extra_manifest: more manifest fields (e.g. ``kind``, ``repo_id`` for a hub download).

    Returns:
        The installed model folder.

    Raises:
        ModelImportError: not a GGUF, a file cut short (said before anything is copied), unsupported architecture
            or tensor type, openvino-genai failed, not enough disk space, or the name is taken.
        OperationCancelled: ``cancel`` was set.
    """
    path = Path(path).expanduser().resolve()
    name = name_from(path.name) if name is None else name
    store.check_free_name(name, replace)  # before the file is read
    say = reporter(progress)
    say(ProgressEvent(f"Checking {path.name}...", stage="check"))
    info = inspect_gguf(path)
    read_gguf_header(path, check_data=True)  # a file cut short is refused before it is copied
    size = path.stat().st_size
    store.models_dir().mkdir(parents=True, exist_ok=True)
    # The GGUF copy, the IR (about the GGUF's size) and the tokenizer IRs coexist for a moment.
    require_space(store.models_dir(), 2 * size, f"importing {path.name}")
    extra = {"bits": info["bits"], "gguf_file_type": info["file_type"], "gguf_tensor_types": info["tensor_types"], **(extra_manifest or {})}
    with build_model(name, source or f"gguf:{path}", "gguf-import", replace=replace, progress=say, extra=extra) as build:
        _convert_gguf_into(path, build, info["config"], info["tensor_types"], say, cancel)
    return build.final


def _make_q4_1_exact(gguf_path: Path, folder: Path, say: ProgressCallback) -> None:
    """Give the IR openvino-genai built from ``gguf_path`` each Q4_1 block's exact offset in place of its rounded
    4-bit zero point (:func:`inference.models.q4_1.write_exact_q41_ir`, as the default model's 4-bit IR has); an IR
    it cannot match is kept as openvino-genai built it, which is said."""
    from .errors import ModelFetchError
    from .q4_1 import write_exact_q41_ir

    say(ProgressEvent("Copying the GGUF's exact 4-bit weights into the model...", stage="convert"))
    try:
        write_exact_q41_ir(gguf_path, folder)
    except ModelFetchError as error:
        say(ProgressEvent(f"Kept openvino-genai's rounded Q4_1 offsets ({error})", stage="convert"))


def _convert_gguf_into(
    path: Path, build: ModelBuild, config: dict, tensor_types: Mapping[str, int], say: ProgressCallback, cancel: threading.Event | None
) -> None:
    gguf_copy = build.folder / path.name
    copy_files([path], build.folder, say, cancel)
    check_cancel(cancel)
    say(ProgressEvent(f"Converting {path.name} to OpenVINO IR (openvino-genai)...", stage="convert"))
    try:
        export_ir(gguf_copy)
    except ModelImportError:  # export_ir's own refusal (the copy's data checked): already said for the user
        raise
    except (RuntimeError, IndexError) as error:
        first = str(error).strip().splitlines()
        detail = next((line for line in reversed(first) if line.strip()), type(error).__name__) if first else type(error).__name__
        raise ModelImportError(
            f"openvino-genai could not convert {path.name}: {detail}. GGUF files of architectures "
            f"{', '.join(GGUF_ARCHITECTURES)} with weights in {', '.join(SUPPORTED_GGUF_TYPES)} work."
        ) from error
    if "Q4_1" in tensor_types:
        _make_q4_1_exact(gguf_copy, build.folder, say)
    os.unlink(gguf_copy)
    missing = missing_files(build.folder, REQUIRED_FILES)
    if missing:
        raise ModelImportError(
            f"openvino-genai did not write {', '.join(missing)} for {path.name}; check that openvino-genai and "
            "openvino-tokenizers are installed at matching versions"
        )
    store.write_json(build.folder / CONFIG_NAME, config)
    check_cancel(cancel)

