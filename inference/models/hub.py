"""Bringing a model from a Hugging Face repository into the store.

Three kinds of repository are recognised from their file list (:func:`inspect_repo`):

- ``openvino``: pre-converted (``openvino_model.xml`` at the top): downloaded as-is and imported like a local
  IR folder (tokenizer IRs created with the conversion extra if the repository lacks them);
- ``transformers``: a plain checkpoint (``config.json`` + ``*.safetensors``): downloaded, then converted at 4,
  8 or 16 bits by :func:`inference.models.convert.convert_checkpoint` (needs the conversion extra, checked before
  anything is downloaded);
- ``gguf``: one or more ``.gguf`` files: the chosen one is downloaded and imported by
  :func:`inference.models.importing.import_gguf`.

Downloads use huggingface_hub for the repository metadata (``HfApi.model_info`` with file sizes, LFS SHA-256
and git blob ids), URLs, authentication headers (``HF_TOKEN``) and its HTTP session; the bytes are streamed by
this module into ``data_dir()/downloads/hub/<org>--<name>@<commit>/<file>.part`` because huggingface_hub 1.x
discards a partial file when a download is interrupted. So:

- progress is reported in bytes over all files;
- ``cancel`` stops within one chunk (1 MiB) and deletes the staging folder: nothing is left behind;
- an interrupted download (network error, killed process) keeps its ``.part`` files, and the next call for the
  same repository and commit resumes each with an HTTP ``Range`` request;
- before the first byte, the free disk space (or ``$SPECCHAT_DISK_QUOTA_BYTES``) is checked against what is
  left to download plus the installed copy;
- each file is verified against the metadata: its size, and its SHA-256 (LFS files) or git blob SHA-1 (small
  files). A mismatch deletes the file and refuses the model;
- the metadata is not trusted as paths: the commit id (it names the staging folder) must be 40 hex digits, a file
  name must be a plain relative path (no absolute or drive path, no ``..``, no backslash or colon), and every
  path resolved in the staging folder must stay inside it (:func:`local_path`); a repository that breaks one
  of these is refused before anything is written;
- one download of a repository at a commit runs at a time: it holds the lock :func:`download_lock`
  (:func:`inference.models.locking.exclusive_lock`) from the first byte to the installation, so two processes never append to the same ``.part`` file
  nor delete each other's folder; the second waits, then finds the files verified and installs them.

The endpoint is the ``endpoint`` argument, else ``$HF_ENDPOINT``, else https://huggingface.co.

huggingface_hub's telemetry is off (``HF_HUB_DISABLE_TELEMETRY``, unless the environment sets it): a local app
sends nothing about itself, and with it on, huggingface_hub fetched ``{endpoint}/api/agent-harnesses`` from
whatever endpoint was given and kept the answer in HF_HOME for a day, so one wrong endpoint that answered a JSON
list there broke every download of the next 24 hours (``'list' object has no attribute 'get'``).
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from . import store
from .disk_space import require_space
from .errors import ModelImportError, OperationCancelled, advised
from .locking import exclusive_lock
from .progress import ProgressCallback, ProgressEvent, check_cancel, reporter
from .store import name_from

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # read when huggingface_hub is first imported (module docstring)

_CHUNK = 1 << 20
#: A full git commit id, the only revision a download pins.
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
#: A Hugging Face repository id, ``org/name``.
_REPO_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
#: Files never downloaded (documentation, images, git attributes).
_SKIP_PATTERNS = ("*.md", ".gitattributes", "*.png", "*.jpg", "*.jpeg", "*.gif", "*.svg", "*.pdf", "LICENSE*", "NOTICE*")
#: Files of a transformers checkpoint worth downloading for a conversion.
_CHECKPOINT_PATTERNS = (
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer*",
    "special_tokens_map.json", "vocab.json", "merges.txt", "*.model", "*.tiktoken", "chat_template*", "added_tokens.json",
)  # fmt: skip


@dataclass(frozen=True)
class HubFile:
    """One file of a repository: ``path`` (relative), ``size`` (bytes), ``sha256`` (LFS files) or ``blob_id``
    (git blob SHA-1 of small files)."""

    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


@dataclass(frozen=True)
class HubRepo:
    """A repository at one commit.

    Attributes:
        repo_id: ``org/name``.
        revision: the commit SHA the files belong to (downloads pin it, so a push mid-download cannot mix files).
        files: every file with its size and hashes.
        kind: ``"openvino"``, ``"transformers"``, ``"gguf"`` or ``"unknown"``.
        endpoint: the hub's address used.
    """

    repo_id: str
    revision: str
    files: tuple[HubFile, ...]
    kind: str
    endpoint: str

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def gguf_files(self) -> list[str]:
        return [f.path for f in self.files if f.path.lower().endswith(".gguf")]


def _endpoint(endpoint: str | None) -> str:
    from huggingface_hub import constants

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _classify(paths: list[str]) -> str:
    top = {p for p in paths if "/" not in p}
    if "openvino_model.xml" in top:
        return "openvino"
    if "config.json" in top and any(p.endswith(".safetensors") or fnmatch.fnmatch(p, "pytorch_model*.bin") for p in top):
        return "transformers"
    if any(p.lower().endswith(".gguf") for p in paths):
        return "gguf"
    return "unknown"


def inspect_repo(repo_id: str, revision: str = "main", *, endpoint: str | None = None, token: str | None = None) -> HubRepo:
    """Fetch a repository's file list with sizes and hashes (one HTTP request).

    Raises:
        ModelImportError: the repository or revision does not exist, is gated or private without a token, or
            the hub is unreachable (the message says which and what to do).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if not _REPO_ID_RE.fullmatch(repo_id) or ".." in repo_id:
        raise ModelImportError(f"{repo_id!r} is not a Hugging Face repository id; expected 'organisation/name'")
    base = _endpoint(endpoint)
    try:
        info = HfApi(endpoint=base, token=token).model_info(repo_id, revision=revision, files_metadata=True)
    except GatedRepoError as error:
        raise ModelImportError(
            f"{repo_id} is gated: accept its licence on its page at {base}/{repo_id}, then set HF_TOKEN to an access token"
        ) from error
    except RepositoryNotFoundError as error:
        raise ModelImportError(f"no repository {repo_id} at {base} (or it is private: set HF_TOKEN); check the id") from error
    except RevisionNotFoundError as error:
        raise ModelImportError(f"{repo_id} has no revision {revision!r}") from error
    except HfHubHTTPError as error:
        raise ModelImportError(f"the hub at {base} refused the request for {repo_id}: {_first_line(error)}") from error
    except (OSError, ValueError) as error:
        raise ModelImportError(_unreachable(base, error)) from error
    except (KeyError, AttributeError, TypeError) as error:  # JSON that is no repository's metadata (newcomer trial)
        raise ModelImportError(
            f"the hub at {base} answered with something that is not a repository's metadata ({type(error).__name__}: "
            f"{error}); check HF_ENDPOINT or --endpoint: it may not be a Hugging Face hub"
        ) from error
    except Exception as error:  # httpx transport errors
        if type(error).__module__.startswith("httpx"):
            raise ModelImportError(_unreachable(base, error)) from error
        raise
    files = []
    for sibling in info.siblings or []:
        check_file_name(sibling.rfilename, repo_id, base)
        lfs = sibling.lfs
        size = sibling.size if sibling.size is not None else (lfs.size if lfs else 0)
        files.append(HubFile(sibling.rfilename, int(size or 0), lfs.sha256 if lfs else None, sibling.blob_id))
    if not info.sha:
        raise ModelImportError(f"the hub at {base} did not say which commit {repo_id}@{revision} is")
    if not isinstance(info.sha, str) or not _COMMIT_RE.fullmatch(info.sha):
        raise ModelImportError(
            f"the hub at {base} named the commit of {repo_id}@{revision} {info.sha!r}, which is not a 40-hex-digit "
            "commit id; the repository was refused (check HF_ENDPOINT: it may not be a Hugging Face hub)"
        )
    return HubRepo(repo_id, info.sha, tuple(files), _classify([f.path for f in files]), base)


def check_file_name(name: object, repo_id: str, base: str) -> str:
    """Return a repository file name if it is a plain relative path, safe to join to a folder on every system.

    Raises:
        ModelImportError: it is not a string, empty, absolute, a drive path, has a backslash, a colon, a control
            character, or an empty, ``.`` or ``..`` part (the message names it).
    """
    parts = name.split("/") if isinstance(name, str) else []
    if (
        not parts
        or any(part in ("", ".", "..") for part in parts)
        or any(ch in name for ch in "\\:") or any(ord(ch) < 32 for ch in name)
    ):
        raise ModelImportError(
            f"the hub at {base} lists a file {name!r} in {repo_id}, which is not a plain relative path (absolute, "
            "drive or backslash paths, '..' and ':' are refused); the repository was refused"
        )
    return name


def local_path(folder: Path, relative: str) -> Path:
    """``folder / relative``, checked to stay inside ``folder`` once resolved (symbolic links followed).

    Raises:
        ModelImportError: the resolved path leaves ``folder``.
    """
    path = folder / relative
    if not path.resolve().is_relative_to(folder.resolve()):
        raise ModelImportError(f"{relative!r} resolves to {path.resolve()}, outside {folder}; the download was refused")
    return path


def _unreachable(base: str, error: BaseException) -> str:
    return (
        f"cannot reach the model hub at {base} ({_first_line(error)}); check the internet connection, or set "
        "HF_ENDPOINT to a reachable mirror"
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def select_files(repo: HubRepo, gguf_file: str | None = None) -> list[HubFile]:
    """The files worth downloading for the repository's kind (top-level files only).

    Raises:
        ModelImportError: an unknown kind, or a GGUF repository with several files and no ``gguf_file``.
    """
    top = [f for f in repo.files if "/" not in f.path and not any(fnmatch.fnmatch(f.path, p) for p in _SKIP_PATTERNS)]
    if repo.kind == "openvino":
        return top
    if repo.kind == "transformers":
        chosen = [f for f in top if any(fnmatch.fnmatch(f.path, p) for p in _CHECKPOINT_PATTERNS)]
        if not any(f.path.endswith(".safetensors") for f in chosen):
            chosen += [f for f in top if fnmatch.fnmatch(f.path, "pytorch_model*.bin") or f.path == "pytorch_model.bin.index.json"]
        return chosen
    if repo.kind == "gguf":
        ggufs = repo.gguf_files()
        if gguf_file is None and len(ggufs) == 1:
            gguf_file = ggufs[0]
        if gguf_file not in ggufs:
            raise ModelImportError(
                f"{repo.repo_id} holds several GGUF files; choose one with --file: {', '.join(ggufs)}"
                if gguf_file is None
                else f"{repo.repo_id} has no file {gguf_file!r}; its GGUF files: {', '.join(ggufs)}"
            )
        return [f for f in repo.files if f.path == gguf_file]
    raise ModelImportError(
        f"{repo.repo_id} is neither an OpenVINO model (openvino_model.xml), a transformers checkpoint "
        "(config.json + *.safetensors) nor a GGUF repository; SpecChat cannot use it"
    )


def staging_dir(repo: HubRepo) -> Path:
    """Where a repository's files are downloaded before installation (kept for resuming).

    Raises:
        ModelImportError: ``repo`` has an invalid id or commit (:func:`inspect_repo` refuses those already).
    """
    if not _REPO_ID_RE.fullmatch(repo.repo_id) or ".." in repo.repo_id or not _COMMIT_RE.fullmatch(repo.revision):
        raise ModelImportError(f"refusing to download {repo.repo_id!r} at {repo.revision!r}: not a repository id and commit id")
    hub_root = store.downloads_dir() / "hub"
    return local_path(hub_root, f"{repo.repo_id.replace('/', '--')}@{repo.revision}")


def download_files(
    repo: HubRepo,
    files: list[HubFile],
    dest: Path,
    *,
    token: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    extra_space: int = 0,
) -> None:
    """Download and verify ``files`` into ``dest``, resuming ``.part`` files left by an earlier attempt.

    Args:
        repo, files: from :func:`inspect_repo` and :func:`select_files`.
        dest: the staging folder (created).
        token: Hugging Face access token (default: huggingface_hub's, e.g. ``$HF_TOKEN``).
        progress: receives byte counts over all files (``stage="download"``).
        cancel: set it to stop; the caller deletes ``dest``.
        extra_space: bytes needed after the download (e.g. the installed copy), added to the disk check.

    Raises:
        ModelImportError: not enough disk space (before any byte is fetched), a network error (the partial
            files are kept: call again to resume), an HTTP error, or a file that fails verification (deleted).
        OperationCancelled: ``cancel`` was set.
    """
    say = reporter(progress)
    dest.mkdir(parents=True, exist_ok=True)
    total = sum(f.size for f in files)
    have = {f.path: _present_bytes(dest, f) for f in files}
    remaining = total - sum(have.values())
    require_space(dest, remaining + extra_space, f"downloading {repo.repo_id} ({total / 2**20:.0f} MiB)")
    done = sum(have.values())
    if done:
        say(ProgressEvent(f"Resuming: {done / 2**20:.1f} MiB of {total / 2**20:.1f} MiB already downloaded", done, total, "download"))
    for file in files:
        check_cancel(cancel)
        final = local_path(dest, file.path)
        if final.is_file() and final.stat().st_size == file.size:
            continue
        base = done - have[file.path]

        def report(n: int, name: str = file.path, base: int = base) -> None:
            say(ProgressEvent(f"Downloading {name}...", base + n, total, "download"))

        _fetch(repo, file, dest, token, report, cancel)
        done = base + file.size
        say(ProgressEvent(f"Verifying {file.path}...", done, total, "verify"))
        _verify(repo, file, dest)
    say(ProgressEvent(f"Downloaded and verified {len(files)} file{'' if len(files) == 1 else 's'}", total, total, "download"))


def _present_bytes(dest: Path, file: HubFile) -> int:
    final = local_path(dest, file.path)
    if final.is_file() and final.stat().st_size == file.size:
        return file.size
    part = local_path(dest, f"{file.path}.part")
    if part.is_file():
        size = part.stat().st_size
        if size <= file.size:
            return size
        part.unlink()
    return 0


def _fetch(repo: HubRepo, file: HubFile, dest: Path, token: str | None, report, cancel: threading.Event | None) -> None:
    """Stream one file into ``dest/<path>.part`` (resuming), then verify and rename it."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    final = local_path(dest, file.path)
    part = local_path(dest, f"{file.path}.part")
    part.parent.mkdir(parents=True, exist_ok=True)
    start = part.stat().st_size if part.is_file() else 0
    url = hf_hub_url(repo.repo_id, file.path, revision=repo.revision, endpoint=repo.endpoint)
    headers = build_hf_headers(token=token, library_name="specchat")
    headers["Accept-Encoding"] = "identity"
    if start >= file.size > 0:
        os.replace(part, final)
        return
    if start:
        headers["Range"] = f"bytes={start}-"
    report(start)
    try:
        with get_session().stream("GET", url, headers=headers, follow_redirects=True, timeout=60) as response:
            if response.status_code == 416:  # the part file is complete already
                start = file.size
            else:
                hf_raise_for_status(response)
                mode = "ab"
                if start and response.status_code != 206:  # the server ignored Range: start over
                    start, mode = 0, "wb"
                with open(part, mode) as out:
                    written = start
                    for chunk in response.iter_bytes():  # as received: an interruption loses nothing
                        if cancel is not None and cancel.is_set():
                            raise OperationCancelled("download cancelled; nothing was added to the model store")
                        out.write(chunk)
                        written += len(chunk)
                        report(written)
                        if written > file.size:
                            break
    except OperationCancelled:
        raise
    except Exception as error:
        kept = part.stat().st_size if part.is_file() else 0
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise _disk_full(dest, f"downloading {file.path}, {kept / 2**20:.1f} MiB of it kept", error) from error
        if type(error).__module__.startswith(("httpx", "huggingface_hub")) or isinstance(error, OSError):
            raise ModelImportError(
                f"downloading {file.path} from {repo.repo_id} was interrupted ({_first_line(error)}). "
                f"{kept / 2**20:.1f} MiB of it are kept: run the same download again to resume."
            ) from error
        raise
    os.replace(part, final)


def _verify(repo: HubRepo, file: HubFile, dest: Path) -> None:
    """Check a downloaded file's size and hash against the repository metadata; delete it if wrong."""
    path = local_path(dest, file.path)
    size = path.stat().st_size
    problem = None
    if size != file.size:
        problem = f"it has {size} bytes instead of {file.size}"
    elif file.sha256:
        digest = _hash_file(path, hashlib.sha256())
        if digest != file.sha256:
            problem = f"its SHA-256 is {digest}, the repository says {file.sha256}"
    elif file.blob_id:
        digest = _hash_file(path, hashlib.sha1(f"blob {size}\0".encode()))  # noqa: S324 - git's blob id
        if digest != file.blob_id:
            problem = f"its git blob id is {digest}, the repository says {file.blob_id}"
    if problem:
        path.unlink(missing_ok=True)
        raise ModelImportError(
            f"{file.path} from {repo.repo_id} is corrupted ({problem}); it was deleted and the model refused. "
            "Try again; if it fails again, the server or a proxy is serving a damaged file."
        )


def _hash_file(path: Path, digest) -> str:
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_name(base_name: str, suffix: str = "") -> str:
    """The store name a download takes unless named: ``base_name`` + ``suffix`` (``-int4`` for a 4-bit conversion),
    or ``base_name-hub`` + ``suffix`` where the first is one of SpecChat's own models' names
    (:func:`~inference.models.store.reserved_name`): the default model's own checkpoint,
    ``HuggingFaceTB/SmolLM2-135M-Instruct``, converted at 4 bits would otherwise be named as the built-in model,
    which the store refuses to build over."""
    name = f"{base_name}{suffix}"
    return f"{base_name}-hub{suffix}" if store.reserved_name(name) else name


def install_from_hub(
    repo_id: str,
    *,
    bits: int | None = None,
    name: str | None = None,
    revision: str = "main",
    gguf_file: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    replace: bool = False,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Download (and, for a transformers checkpoint, convert) a repository into the store.

    Args:
        repo_id: ``org/name``.
        bits: for a transformers checkpoint, 4, 8 or 16 (default 4); pre-converted OpenVINO and GGUF
            repositories keep their own bit-width (a differing request is reported, not applied).
        name: model name (default: the repository's name, a GGUF repository's too whichever file is chosen, plus
            ``-int4``... for conversions; ``-hub`` after the repository's name where that default is one of
            SpecChat's own models' names (:func:`download_name`)).
        revision: branch, tag or commit.
        gguf_file: which ``.gguf`` file of a GGUF repository (needed when it has several).
        endpoint: the hub's address (default ``$HF_ENDPOINT`` or huggingface.co).
        token: access token for gated or private repositories (default: huggingface_hub's).
        replace: replace an installed model of the same name.
        progress, cancel: see :func:`download_files`; a cancelled call leaves nothing behind.

    Returns:
        The installed model folder.

    Raises:
        ModelImportError: see :func:`inspect_repo`, :func:`download_files`, :mod:`inference.models.importing`.
        ConversionExtraMissing: a transformers checkpoint without the conversion extra (before downloading).
        OperationCancelled: ``cancel`` was set.
    """
    from . import convert, importing

    say = reporter(progress)
    say(ProgressEvent(f"Looking up {repo_id}...", stage="check"))
    repo = inspect_repo(repo_id, revision, endpoint=endpoint, token=token)
    files = select_files(repo, gguf_file)
    base_name = name_from(repo_id)
    source = f"hf:{repo_id}@{repo.revision}"
    provenance = {"repo_id": repo_id, "revision": repo.revision}
    stage = staging_dir(repo)
    extra_space = sum(f.size for f in files)  # the installed copy (or the converted model, see below)
    if repo.kind == "transformers":
        convert.require_conversion_extra(f"convert {repo_id} (a transformers checkpoint)")
        bits = store.check_bits(4 if bits is None else bits)
        params_bytes = sum(f.size for f in files if f.path.endswith((".safetensors", ".bin")))
        extra_space = params_bytes + params_bytes * bits // 16
    elif bits is not None:
        say(ProgressEvent(f"{repo_id} is a pre-converted {repo.kind} repository: it is installed at its own bit-width, not {bits}", stage="check"))
    if name is None:
        # a GGUF too takes the repository's name, not its file's: LM Studio lists it so and ollama's hf.co/ORG/NAME
        # names it so (a newcomer's --model tiny-gguf found nothing: the download was named tiny.F16)
        name = download_name(base_name, f"-{store.BITS_SUFFIX[bits]}" if repo.kind == "transformers" else "")
    store.check_free_name(name, replace)  # before downloading what could not be installed under it
    lock = download_lock(stage)
    with exclusive_lock(lock, lambda message: say(ProgressEvent(f"Waiting for another download of {repo_id}...", stage="wait"))):
        try:
            download_files(repo, files, stage, token=token, progress=say, cancel=cancel, extra_space=extra_space)
            check_cancel(cancel)
            if repo.kind == "transformers":
                folder = convert.convert_checkpoint(
                    stage, bits, name,
                    source=source, replace=replace, progress=say, cancel=cancel,
                    extra_manifest={"kind": "hub-convert", **provenance},
                )  # fmt: skip
            elif repo.kind == "gguf":
                folder = importing.import_gguf(
                    local_path(stage, files[0].path), name, replace=replace, progress=say, cancel=cancel,
                    source=source, extra_manifest={"kind": "hub-download", **provenance},
                )  # fmt: skip
            else:
                _, needs_tokenizer = importing.check_ir_folder(stage, f"create the tokenizer IRs that {repo_id} lacks")
                folder = importing.install_ir_files(
                    [local_path(stage, f.path) for f in files], name, source, "hub-download", needs_tokenizer=needs_tokenizer,
                    replace=replace, progress=say, cancel=cancel, extra=provenance,
                )  # fmt: skip
        except OperationCancelled:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise _disk_full(stage, f"installing {repo_id}", error) from error
            raise
        shutil.rmtree(stage, ignore_errors=True)
    return folder


def download_lock(stage: Path) -> Path:
    """The lock file of one repository download (``downloads/.locks/<staging folder name>.lock``; folder created).

    It lies outside the staging folder, which its holder deletes, and is never deleted itself (deleting a lock
    file someone waits on would let a third process in): a lock file means nothing when nobody holds it.
    """
    folder = store.downloads_dir() / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{stage.name}.lock"


def _disk_full(where: Path, what: str, error: OSError) -> ModelImportError:
    return advised(
        ModelImportError,
        f"the disk is full ({what}: {_first_line(error)}); nothing was added to the model store",
        "disk-full",
        ". ",
        folder=str(where.parent),
    )

