"""The C heap's policy for large blocks: freed ones go back to the system at once instead of staying resident.

glibc serves a request of at least ``M_MMAP_THRESHOLD`` bytes with its own ``mmap`` and unmaps it when freed; smaller
ones come from the heap, whose freed space stays resident until ``malloc_trim``. The threshold starts at 128 KiB but
rises to the size of every mmapped block freed (up to 32 MiB), so after OpenVINO frees a few buffers of a few
megabytes (KV states of 1.5 MB a layer at 1,024 tokens, a pass's activations), later ones of that size come from the
heap and stay resident after they are freed: a long prompt's prefill and the KV hand-over of the fast prefill
(``kv_cache.py``) left 130 MB of freed memory resident, which ``malloc_trim(0)`` gave back. Fixing the threshold
(``mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK)``, which also stops it rising) hands such blocks back when freed.

Measured on the default model (Intel Xeon with AMX, 2 cores, ``bench/memory_bar.py``): SpecChat's peak resident memory
with a 1,024-token prompt 922 -> 711 MiB (a threshold of 1 MiB: 802), its TTFT and decode tokens/s unchanged within the
run's noise; a 32-token prompt's TTFT 84-99 ms against 76-89 without it, in three pairs of fresh processes.

Design rules: once per process, before the first model is compiled (``model.load_model`` calls it); glibc only
(elsewhere, or where ``mallopt`` is missing, nothing happens).
"""

from __future__ import annotations

import ctypes
import functools

M_MMAP_THRESHOLD = -3  # glibc <malloc.h>
#: Blocks of this many bytes or more are mapped on their own and unmapped when freed.
LARGE_BLOCK = 256 * 1024


@functools.cache
def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold at ``LARGE_BLOCK`` for this process (once; later calls do nothing). Returns whether
    the C library took it (False where it is not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK) == 1
