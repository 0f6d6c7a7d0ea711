"""Handing back the pages of a memory-mapped weights file that were read once and will not be read again.

OpenVINO's ``Core.read_model`` maps the weights file (``openvino_model.bin``) read-only into the process: a
constant's array points into that mapping, and every page read becomes part of the process's resident memory
(``RssFile`` in ``/proc/self/status``) until the kernel needs it back. When fusion at load (``fusion.py``) copies
q/k/v and gate/up into new constants, the pages it read belong to constants the graph no longer uses; asking the
kernel to drop them (``madvise(MADV_DONTNEED)``) gives those megabytes back at once instead of counting them until
the model is closed.

Design rules:

- Only inside a read-only mapping of a file: dropping its pages loses nothing (a later read maps them again from
  the file). Memory the process wrote (anonymous or writable mappings: arrays, tensors, OpenVINO's own buffers) is
  never touched, whatever address it is given.
- Best effort: where ``/proc/self/maps`` or ``madvise`` is missing (not Linux), nothing happens.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

MADV_DONTNEED = 4  # Linux <sys/mman.h>
_MAPS = Path("/proc/self/maps")


def read_only_file_mappings(path: Path | None = None) -> list[tuple[int, int]]:
    """``[start, end)`` addresses of this process's mappings that are readable, not writable and backed by a file
    (of the file at ``path`` only, when given) (``/proc/self/maps``, parsed in Python: about 1 ms; [] where it is
    missing)."""
    if not _MAPS.is_file():
        return []
    target = str(Path(path).resolve()) if path is not None else None
    spans = []
    for line in _MAPS.read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue  # anonymous, [heap], [stack], [vdso]...
        if target is not None and fields[5] != target:
            continue
        permissions = fields[1]
        if permissions[0] == "r" and permissions[1] != "w":
            start, end = (int(address, 16) for address in fields[0].split("-"))
            spans.append((start, end))
    return spans


def release_mapped_file(path: Path) -> int:
    """Drop the resident pages of every read-only mapping of the file at ``path`` in this process (see the module
    docstring): after ``model.load_model`` has compiled a model, the weights file's pages were read to repack the
    weights (OpenVINO's kernels and SpecChat's keep their own copies), and the few constants a compiled model reads in
    place (the embedding table's rows) are mapped again as they are read.

    Returns:
        The number of bytes handed back (0 where the file is not mapped or the platform has no ``madvise``).
    """
    spans = read_only_file_mappings(path)
    try:
        madvise = _madvise() if spans else None
    except (OSError, AttributeError):
        return 0
    return sum(end - start for start, end in spans if madvise(start, end - start, MADV_DONTNEED) == 0)


#: How often ``released_while`` hands pages back, seconds: the most a pass can read between two releases is what it
#: reads in this time (the prefill copy's first pass reads its 86 MiB of weights in about a second).
RELEASE_PERIOD_S = 0.01


@contextlib.contextmanager
def released_while(path: Path | None, period_s: float = RELEASE_PERIOD_S) -> Iterator[None]:
    """While the block runs, drop the resident pages of every read-only mapping of the file at ``path`` every
    ``period_s`` seconds (a thread; ``madvise`` needs no GIL), and once more at its end: for a call that reads a
    weights file once to repack it and releases the GIL meanwhile, so that its pages never pile up.

    The prefill copy's first pass (``paged_copy.PagedCopy.run``) is such a call: OpenVINO's CPU plugin repacks the
    4-bit weights of a dynamic-shape graph at its first inference, reading all 86 MiB of the default model's
    weights file, which stayed resident on top of the repacked weights (92 MiB) until the pass ended. Released every
    10 ms, the pass peaked 73 MiB lower at the same time (a 16-token first pass of the copy alone, Xeon with AMX:
    398 -> 325 MiB, 1.37 / 1.40 s); the passes after it read only their tokens' embedding rows, in place.

    The file's mappings are read once, at the start: the caller keeps them mapped until the block ends (the compiled
    model that maps the file is in use), so no address released is ever anything but that file's.
    ``path`` None, a file not mapped, or a platform without ``madvise``: the block runs alone.
    """
    spans = read_only_file_mappings(path) if path is not None else []
    try:
        madvise = _madvise() if spans else None
    except (OSError, AttributeError):
        madvise = None
    if madvise is None:
        yield
        return
    done = threading.Event()

    def release() -> None:
        for start, end in spans:
            madvise(start, end - start, MADV_DONTNEED)

    def keep_releasing() -> None:
        while not done.wait(period_s):
            release()

    thread = threading.Thread(target=keep_releasing, name="release-file-pages", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        release()


@functools.cache
def _madvise():
    """libc's ``madvise(2)``, found among the symbols this process has loaded (``dlopen(NULL)``), once.

    Not through ``ctypes.util.find_library("c")``: on Linux it runs ``/sbin/ldconfig -p`` in a child process each
    time, and the fork holds the GIL. Called once per fused weight product, it started 180 processes in a load of the
    default model: about 190 ms of it (quiet, 2-core AMD EPYC Zen 5).

    Raises:
        OSError, AttributeError: no ``dlopen(NULL)`` (Windows) or no ``madvise`` among the loaded symbols.
    """
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


def release_file_pages(arrays: list[np.ndarray], mappings: list[tuple[int, int]] | None = None) -> int:
    """Drop the resident pages of ``arrays`` that lie wholly inside read-only file mappings (see the module docstring).

    Args:
        arrays: numpy views of memory, e.g. ``np.asarray(constant.get_data())`` of constants read by
            ``Core.read_model``; arrays elsewhere (anonymous memory) are skipped.
        mappings: ``read_only_file_mappings()`` read by a caller that releases many arrays in a row (fusion: 180
            times in a load of the default model, 170 of its 180 ms reading the mappings again), valid as long as
            no file mapping was unmapped since (an address it names is then still file-backed); read here when None.

    Returns:
        The number of bytes handed back to the kernel (whole pages only; 0 where the platform has no ``madvise``).
    """
    if mappings is None:
        mappings = read_only_file_mappings()
    if not mappings:
        return 0
    try:
        madvise = _madvise()
    except (OSError, AttributeError):
        return 0
    released = 0
    for array in arrays:
        begin = array.__array_interface__["data"][0]
        end = begin + array.nbytes
        first_page = -(-begin // mmap.PAGESIZE) * mmap.PAGESIZE  # only pages the array covers whole
        last_page = end // mmap.PAGESIZE * mmap.PAGESIZE
        if last_page <= first_page:
            continue
        if any(start <= first_page and last_page <= stop for start, stop in mappings):
            if madvise(first_page, last_page - first_page, MADV_DONTNEED) == 0:
                released += last_page - first_page
    return released
