"""Disk space: what SpecChat may still write under a folder, and refusing a build that would not fit before it
starts (an import, a download, a conversion), with both numbers and what to do."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import ModelImportError, advised
from .store import data_dir


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
        root = data_dir()
        used = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0
        free = min(free, max(0, int(quota) - used))
    return free


def require_space(folder: Path, needed: int, what: str) -> None:
    """Refuse to start when fewer than ``needed`` bytes (plus 5% and 50 MiB of headroom) are free under ``folder``.

    Raises:
        ModelImportError: with both numbers and what to do.
    """
    margin = int(needed * 0.05) + 50 * 2**20
    free = available_bytes(folder)
    if free < needed + margin:
        raise advised(
            ModelImportError,
            f"not enough disk space for {what}: it needs about {_gib_or_mib(needed + margin)}, and only {_gib_or_mib(free)} is "
            f"free under {folder}",
            "disk-space",
            ". ",
        )


def _gib_or_mib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
