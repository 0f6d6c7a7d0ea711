"""Handing back a weights file's pages (inference/file_pages.py): file pages leave resident memory, nothing else."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from inference.file_pages import release_file_pages, released_while

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status and madvise: Linux")

SIZE = 64 * 2**20


def _rss_file_bytes() -> int:
    """The resident pages of this process backed by files (RssFile), in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile line")


def test_pages_of_a_read_only_file_mapping_leave_resident_memory_and_read_back_the_same(tmp_path):
    path = tmp_path / "weights.bin"
    expected = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8)
    expected.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")  # read-only, as Core.read_model maps openvino_model.bin
    before = _rss_file_bytes()
    checksum = int(mapped.sum(dtype=np.uint64))  # every page read: resident
    touched = _rss_file_bytes()
    assert touched - before > 0.9 * SIZE
    released = release_file_pages([np.asarray(mapped)])
    assert released > SIZE - 2 * 4096  # every whole page of the array
    assert touched - _rss_file_bytes() > 0.9 * SIZE  # handed back to the kernel at once
    assert int(mapped.sum(dtype=np.uint64)) == checksum and np.array_equal(mapped, expected)  # read again from the file


def test_memory_the_process_wrote_is_never_touched():
    array = np.arange(SIZE // 8, dtype=np.int64)  # anonymous memory
    assert release_file_pages([array, array[10:]]) == 0
    assert np.array_equal(array, np.arange(SIZE // 8, dtype=np.int64))


def test_releasing_starts_no_process(tmp_path, monkeypatch):
    """Fusion releases pages once per weight product (180 times in a model load): finding libc must not fork a
    process each time (``ctypes.util.find_library`` runs ``ldconfig -p``; the fork holds the GIL)."""
    path = tmp_path / "weights.bin"
    np.ones(SIZE // 16, dtype=np.uint8).tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    mapped.sum()

    started = []

    class Recorded(subprocess.Popen):
        def __init__(self, args, *rest, **options):
            started.append(args)
            super().__init__(args, *rest, **options)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    assert release_file_pages([np.asarray(mapped)]) > SIZE // 16 - 2 * 4096
    assert release_file_pages([np.asarray(mapped)]) > SIZE // 16 - 2 * 4096  # and again
    assert started == []



def _resident_bytes_of(path) -> int:
    """The resident pages of this process's mappings of the file at ``path`` (``/proc/self/smaps``), in bytes."""
    total, current = 0, ""
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            current = fields[5] if len(fields) > 5 else ""
        elif fields[:1] == ["Rss:"] and current == str(path):
            total += int(fields[1]) * 1024
    return total


def test_pages_read_while_released_never_pile_up_and_read_back_the_same(tmp_path):
    """``released_while``: a reader that goes through a whole file mapping while releasing the GIL (as the prefill
    copy's first pass reads its weights file to repack it) holds a chunk or two of it resident, never all of it."""
    path = tmp_path / "weights.bin"
    expected = np.random.default_rng(1).integers(0, 256, SIZE, dtype=np.uint8)
    expected.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    chunk = SIZE // 16

    def read_all() -> tuple[int, int]:
        """Read the mapping in 16 chunks, 30 ms apart: the checksum and the most of the file resident meanwhile."""
        total, most = 0, 0
        for start in range(0, SIZE, chunk):
            total += int(mapped[start : start + chunk].sum(dtype=np.uint64))
            most = max(most, _resident_bytes_of(path))
            time.sleep(0.03)  # the GIL released, as OpenVINO's infer releases it
        return total, most

    checksum = int(expected.sum(dtype=np.uint64))
    with released_while(path, period_s=0.01):
        total, most = read_all()
    assert total == checksum and most <= 2 * chunk
    assert _resident_bytes_of(path) == 0  # released once more at the end
    total, most = read_all()  # without it every page read stays
    assert total == checksum and most > 0.9 * SIZE
    with released_while(None):  # no file: the block runs alone
        assert _resident_bytes_of(path) > 0.9 * SIZE
    assert np.array_equal(mapped, expected)
