"""Files the user owns (the settings, the stored API keys, the chat history): written so that neither a crash nor a
power cut leaves half a file, and never overwritten when they could not be read.

Rules:
- :func:`write_atomically` writes a temporary file in the same folder, flushes it to the disk (``fsync``), renames
  it over the old one (``os.replace``, atomic on POSIX and Windows) and flushes the folder, so that after a power
  cut the file is the old one or the new one, never empty (ext4's delayed allocation could otherwise leave a
  renamed, empty file).
- A file that cannot be read (not JSON, a newer format, damaged) is not replaced by defaults at the next save: it
  is moved aside by :func:`move_aside` to ``<name>.unreadable-<time>``, where the user can still rescue it, and the
  caller says so.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step, durably (see the module doc); ``mode``: the file's
    permissions (the temporary file is created with 600 and keeps it unless told otherwise).

    Raises:
        OSError: the folder cannot be created or written, or the disk is full (the old file is then untouched and no
            temporary file is left).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the rename) to the disk; where folders cannot be opened (Windows) there is nothing
    to do."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:  # some file systems refuse to fsync a folder
        pass
    finally:
        os.close(descriptor)


def move_aside(path: Path, companions: tuple[str, ...] = ()) -> Path:
    """Rename ``path`` to ``<name>.unreadable-<time>`` (``-2``, ``-3``... when taken), and each existing
    ``<name><suffix>`` of ``companions`` (e.g. SQLite's ``-wal``, ``-shm``) to the new name plus its suffix.

    Returns:
        The new path.

    Raises:
        OSError: the file cannot be renamed (it is then where it was).
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.unreadable-{stamp}")
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}.unreadable-{stamp}-{counter}")
    os.replace(path, target)
    for suffix in companions:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            os.replace(companion, target.with_name(target.name + suffix))
    return target
