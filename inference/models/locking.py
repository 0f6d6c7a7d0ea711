"""The model store's one cross-process lock, on the ``filelock`` package.

A lock is a file that one holder at a time locks with the operating system's file locking (``flock`` on
POSIX, ``LockFileEx`` on Windows). The system releases it when its holder dies, so a crashed process never
leaves a lock held, and a lock file left on disk means nothing by itself. The store uses it two ways:

- :func:`exclusive_lock` around short critical sections (``models/.lock``: clean-up, checking a name free,
  renaming a finished folder into place); a second caller blocks until the first is done, and is told once
  that it waits;
- :func:`held_by_another` to ask whether someone holds a lock now, without waiting: a builder holds a lock
  file inside its staging folder for as long as it works, so a clean-up tells a live build (left alone)
  from a crashed one's leftover (deleted).

Two holders within one process exclude each other as two processes do (each call opens the file anew), and
a lock may be released from another thread than the one that took it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

#: Told (once) to ``on_wait`` when :func:`exclusive_lock` has to wait for another holder.
WAITING_MESSAGE = "Waiting for another SpecChat process that is preparing a model..."


@contextlib.contextmanager
def exclusive_lock(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (created if needed; its folder must exist) for the ``with`` block.

    Blocks as long as another holder, in this process or another, keeps it.

    Args:
        path: the lock file.
        on_wait: called with :data:`WAITING_MESSAGE` before blocking, if the lock is taken.

    Raises:
        OSError: the lock file cannot be created or opened.
    """
    lock = FileLock(path, thread_local=False)
    if not _acquired_at_once(lock):
        if on_wait is not None:
            on_wait(WAITING_MESSAGE)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def held_by_another(path: Path) -> bool:
    """Whether a live holder keeps the lock file ``path`` locked now (False when there is no such file).

    Never waits and never creates ``path``; a file it cannot open counts as not held.
    """
    if not path.is_file():
        return False
    lock = FileLock(path, thread_local=False)
    try:
        if not _acquired_at_once(lock):
            return True
    except OSError:
        return False
    lock.release()
    return False


def _acquired_at_once(lock: FileLock) -> bool:
    """Take ``lock`` if nobody holds it (True), else return False at once."""
    try:
        lock.acquire(blocking=False)
    except Timeout:
        return False
    return True
