"""The model store's write side: building a model folder atomically, manifests, removing, finding.

Every way in (:mod:`inference.models.importing`, :mod:`inference.models.hub`, :mod:`inference.models.convert`) builds
its folder through :func:`build_model`:

1. under the store lock (``models/.lock``, shared with :func:`inference.models.store.ensure_default_model`)
   leftovers of crashed builds are removed, the final name is checked free, and a hidden temporary folder
   ``models/.partial-<name>-XXXX`` is created; the builder holds a lock file inside it for as long as it
   works, so another process's clean-up leaves it alone;
2. the caller fills the folder (minutes, without the store lock);
3. the folder is described (:func:`inference.models.inspect.describe_folder`), its manifest written, and it is
   renamed to ``models/<name>`` under the store lock. On any error or cancellation it is deleted instead,
   so the store never shows a half model.

Manifest (``specchat_manifest.json``) of a user model::

    name, source, kind ("ir-import" | "gguf-import" | "hub-download" | "hub-convert" | "convert"),
    bits (4, 8, 16 or 32: the dominant weight type), weight_types ({element type: element count}),
    size_bytes (files of the folder, manifest excluded), tokenizer_fingerprint (SHA-256 hex), vocab_size,
    special_tokens ({"bos", "eos", "pad"}), rope_supported (bool), rope_note (why not), architecture,
    sliding_window (tokens, or null),
    layout, created (ISO 8601 UTC), plus what the way in adds (e.g. group_size, revision).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import store
from .inspect import ModelImportError, describe_folder

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")


class OperationCancelled(ModelImportError):
    """The user cancelled a download, import or conversion; nothing was left in the store."""


@dataclass(frozen=True)
class ProgressEvent:
    """One progress report of a long operation.

    Attributes:
        message: a human-readable line (the CLI prints it when it changes).
        done, total: work units so far and in all (bytes for downloads and copies; None when unknown,
            e.g. during a conversion step).
        stage: a short machine-readable step name ("check", "download", "verify", "copy", "convert",
            "describe", "install", "done").
    """

    message: str
    done: int | None = None
    total: int | None = None
    stage: str = ""

    @property
    def fraction(self) -> float | None:
        """``done / total`` in [0, 1], or None when unknown."""
        if self.done is None or not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))


ProgressCallback = Callable[[ProgressEvent], None]


def _quiet(event: ProgressEvent) -> None:
    pass


def check_cancel(cancel: threading.Event | None) -> None:
    """Raise :class:`OperationCancelled` if ``cancel`` is set."""
    if cancel is not None and cancel.is_set():
        raise OperationCancelled("cancelled; nothing was added to the model store")


def check_name(name: str) -> str:
    """Validate a model name (a folder name under :func:`inference.models.store.models_dir`).

    Raises:
        ValueError: empty, longer than 100 characters, or with characters other than letters, digits,
            ``.``, ``_``, ``+`` and ``-`` (and not starting with one of the punctuation characters).
    """
    if not _NAME_RE.match(name or ""):
        raise ValueError(
            f"invalid model name {name!r}: use 1-100 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
        )
    return name


def name_from(text: str) -> str:
    """A valid model name derived from a path, file name or repository id (``org/Model-7B`` -> ``Model-7B``)."""
    base = text.rstrip("/\\").replace("\\", "/").split("/")[-1]
    if base.lower().endswith(".gguf"):
        base = base[: -len(".gguf")]
    base = re.sub(r"[^A-Za-z0-9._+-]+", "-", base).strip(".-_+") or "model"
    return base[:100]


def model_path(name: str) -> Path:
    """``models_dir() / name`` (after :func:`check_name`)."""
    return store.models_dir() / check_name(name)


def find_model(name_or_path: str | Path) -> Path:
    """Resolve an installed model's name, or a folder path, to its folder.

    Raises:
        ModelImportError: no such installed model or folder.
    """
    text = str(name_or_path)
    candidate = Path(text).expanduser()
    if candidate.is_dir() and (os.sep in text or "/" in text or text.startswith(".")):
        return candidate
    if _NAME_RE.match(text) and (store.models_dir() / text).is_dir():
        return store.models_dir() / text
    if candidate.is_dir():
        return candidate
    installed = ", ".join(m.get("name") or Path(m["path"]).name for m in store.list_models()) or "none"
    raise ModelImportError(f"no installed model or folder named {text!r} (installed: {installed}); see `specchat models list`")


def folder_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder``, the manifest excluded."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != store.MANIFEST_NAME)


def write_manifest(folder: Path, name: str, source: str, kind: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Describe a finished folder (:func:`inference.models.inspect.describe_folder`) and write its manifest.

    Returns:
        The manifest written (see the module doc).

    Raises:
        ModelImportError: the folder's IR or tokenizer is missing or unreadable.
    """
    manifest: dict[str, Any] = {"name": name, "source": source, "kind": kind}
    manifest.update(describe_folder(folder))
    manifest.update(extra or {})
    manifest["size_bytes"] = folder_size(folder)
    manifest["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    store._write_json(folder / store.MANIFEST_NAME, manifest)
    return manifest


@contextlib.contextmanager
def _store_lock(progress: ProgressCallback) -> Iterator[Path]:
    root = store.models_dir()
    root.mkdir(parents=True, exist_ok=True)
    with store._exclusive_lock(root / store._LOCK_NAME, lambda m: progress(ProgressEvent(m, stage="wait"))):
        yield root


class ModelBuild:
    """A model folder being built (see :func:`build_model`); ``folder`` is where to put the files."""

    def __init__(self, name: str, folder: Path, final: Path) -> None:
        self.name = name
        self.folder = folder
        self.final = final
        self.manifest: dict[str, Any] | None = None


@contextlib.contextmanager
def build_model(
    name: str,
    source: str,
    kind: str,
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    extra: Callable[[], dict[str, Any]] | dict[str, Any] | None = None,
) -> Iterator[ModelBuild]:
    """Build ``models/<name>`` atomically (see the module doc).

    Usage::

        with build_model("MyModel", "gguf:/x.gguf", "gguf-import") as build:
            ...write files into build.folder...
        build.final, build.manifest   # installed

    Args:
        name: the model's name (:func:`check_name`).
        source: where it came from (written to the manifest).
        kind: the way in (written to the manifest).
        replace: replace an installed model of the same name (else refuse before any work).
        progress: receives :class:`ProgressEvent` s.
        extra: more manifest fields, or a callable returning them once the folder is filled.

    Raises:
        ModelImportError: a model of that name exists (and ``replace`` is false), or the finished folder is
            not a loadable model (the message names the missing or unreadable file).
        ValueError: invalid name.
    """
    check_name(name)
    say = progress or _quiet
    final = store.models_dir() / name
    with _store_lock(say) as root:
        store._remove_stale_builds(root, lambda m: say(ProgressEvent(m, stage="check")))
        if (final.exists() or final.is_symlink()) and not replace:
            raise ModelImportError(
                f"a model named {name!r} is already installed ({final}); choose another name (--name) or "
                "replace it (--replace), or remove it first with `specchat models remove`"
            )
        work = Path(tempfile.mkdtemp(prefix=f"{store._TEMP_PREFIX}{name}-", dir=root))
    lock_path = work / store.BUILDING_LOCK_NAME
    lock_handle = open(lock_path, "a+b")
    try:
        _lock_file(lock_handle)
        build = ModelBuild(name, work, final)
        yield build
        say(ProgressEvent("Checking the model folder...", stage="describe"))
        fields = extra() if callable(extra) else dict(extra or {})
        _unlock_file(lock_handle)
        lock_handle.close()
        lock_path.unlink(missing_ok=True)
        manifest = write_manifest(work, name, source, kind, fields)
        work.chmod(0o755)  # mkdtemp made it private; a model folder is an ordinary folder
        with _store_lock(say):
            if (final.exists() or final.is_symlink()) and not replace:
                raise ModelImportError(f"a model named {name!r} was installed by another process meanwhile; choose another name")
            store._install(work, final)
        build.manifest = manifest
        say(ProgressEvent(f"{name} is ready in {final}", stage="done"))
    finally:
        if not lock_handle.closed:
            with contextlib.suppress(OSError):
                _unlock_file(lock_handle)
            lock_handle.close()
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _lock_file(handle) -> None:
    if os.name == "nt":
        import msvcrt

        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _unlock_file(handle) -> None:
    if os.name == "nt":
        import msvcrt

        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def remove_model(name_or_path: str | Path, progress: ProgressCallback | None = None) -> Path:
    """Delete an installed model folder (only folders inside :func:`inference.models.store.models_dir`).

    The folder is first renamed to a hidden temporary name under the store lock, so it disappears from the
    store at once, then deleted.

    Returns:
        The removed folder's former path.

    Raises:
        ModelImportError: no such installed model, or the path is outside the model store.
    """
    say = progress or _quiet
    folder = find_model(name_or_path)
    root = store.models_dir().resolve()
    if folder.resolve().parent != root:
        raise ModelImportError(f"{folder} is not in the model store ({root}); SpecChat only removes models it installed")
    with _store_lock(say):
        trash = Path(tempfile.mkdtemp(prefix=f"{store._TEMP_PREFIX}removed-", dir=root))
        os.replace(folder, trash / folder.name)
    shutil.rmtree(trash, ignore_errors=True)
    say(ProgressEvent(f"Removed {folder.name}", stage="done"))
    return folder


def copy_files(files: list[Path], dest: Path, progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> None:
    """Copy files into ``dest`` (hard-linking when on the same file system), reporting bytes.

    Raises:
        OperationCancelled: ``cancel`` was set (the caller's :func:`build_model` deletes the partial folder).
    """
    say = progress or _quiet
    total = sum(f.stat().st_size for f in files)
    done = 0
    for file in files:
        check_cancel(cancel)
        target = dest / file.name
        say(ProgressEvent(f"Copying {file.name}...", done, total, "copy"))
        try:
            os.link(file, target)
        except OSError:
            with open(file, "rb") as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 22):
                    check_cancel(cancel)
                    dst.write(chunk)
                    done += len(chunk)
                    say(ProgressEvent(f"Copying {file.name}...", done, total, "copy"))
            shutil.copystat(file, target)
            continue
        done += file.stat().st_size
    say(ProgressEvent("Copied", total, total, "copy"))


def available_bytes(folder: Path) -> int:
    """Bytes SpecChat may still write under ``folder``'s file system.

    The free space of the disk, capped by ``$SPECCHAT_DISK_QUOTA_BYTES`` minus what the data folder already
    holds when that variable is set (a quota; the tests use it to simulate a full disk).
    """
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    quota = os.environ.get("SPECCHAT_DISK_QUOTA_BYTES")
    if quota:
        root = store.data_dir()
        used = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0
        free = min(free, max(0, int(quota) - used))
    return free


def require_space(folder: Path, needed: int, what: str) -> None:
    """Refuse to start when fewer than ``needed`` bytes (plus 5% and 50 MB of headroom) are free.

    Raises:
        ModelImportError: with both numbers and what to do.
    """
    margin = int(needed * 0.05) + 50 * 2**20
    free = available_bytes(folder)
    if free < needed + margin:
        raise ModelImportError(
            f"not enough disk space for {what}: it needs about {_mb(needed + margin)}, and only {_mb(free)} is free "
            f"under {folder}. Free some space (e.g. `specchat models remove NAME`) or set SPECCHAT_DATA_DIR to a "
            "folder on a larger disk, then try again."
        )


def _mb(n: int) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"
