"""Progress reports and cancellation of long store operations (downloads, copies, conversions).

A long operation takes ``progress`` (a :data:`ProgressCallback`, or None for silence) and ``cancel`` (a
``threading.Event`` another thread may set, or None); it reports :class:`ProgressEvent` s from the thread it
runs in and calls :func:`check_cancel` between steps. The CLI prints the events, the GUI forwards them to its
event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .errors import OperationCancelled


@dataclass(frozen=True)
class ProgressEvent:
    """One progress report of a long operation.

    Attributes:
        message: a human-readable line (the CLI prints it when it changes).
        done, total: work units so far and in all (bytes for downloads and copies; None when unknown,
            e.g. during a conversion step).
        stage: a short machine-readable step name ("check", "wait", "download", "verify", "copy", "convert",
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

    @property
    def amount(self) -> str:
        """How much is done, as the CLI and the Models dialog show it after :attr:`message`: ``"45.0% (1.2 / 2.7
        MiB)"`` for bytes (stages "download", "copy", "verify"), ``"[3/10]"`` for other counts, ``""`` when unknown."""
        fraction = self.fraction
        if fraction is None:
            return ""
        if self.stage in ("download", "copy", "verify"):
            return f"{fraction:.1%} ({self.done / 2**20:.1f} / {self.total / 2**20:.1f} MiB)"
        return f"[{self.done}/{self.total}]"


ProgressCallback = Callable[[ProgressEvent], None]


def no_progress(event: ProgressEvent) -> None:
    """A :data:`ProgressCallback` that ignores every event (what ``progress=None`` means)."""


def reporter(progress: ProgressCallback | None) -> ProgressCallback:
    """``progress``, or :func:`no_progress` when it is None."""
    return progress or no_progress


def check_cancel(cancel: threading.Event | None) -> None:
    """Raise :class:`OperationCancelled` if ``cancel`` is set (None: never)."""
    if cancel is not None and cancel.is_set():
        raise OperationCancelled("cancelled; nothing was added to the model store")
