"""The smaller texts (help lines under the settings, footers, the chat list, the chat's title) keep their size
beside the rest when fonts are larger at the same screen scale (QT_FONT_DPI=144 with high-DPI scaling off): the
high-DPI trial saw the settings' help lines at 11 px under 18 px labels, too small to read. The style sheet gives
their sizes in points, which follow the font DPI, as the application font does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
from PySide6.QtGui import QFontInfo
from PySide6.QtWidgets import QLabel
from app.gui.application import create_application
app = create_application()
sizes = [QFontInfo(app.font()).pixelSize()]
for name in ("settingHelp", "footer", "chatTitle", "conversations", "fieldError", "graphSummary", "codeLanguage"):
    label = QLabel("x")
    label.setObjectName(name)
    label.ensurePolished()
    sizes.append(QFontInfo(label.font()).pixelSize())
print(*sizes)
"""


def _pixel_sizes(font_dpi: int) -> list[int]:
    """The application font's pixel size, then those of the styled labels, in a fresh process at ``font_dpi``."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_FONT_DPI": str(font_dpi), "QT_ENABLE_HIGHDPI_SCALING": "0",
           "PYTHONPATH": str(REPO)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return [int(size) for size in done.stdout.split()[-8:]]


def test_styled_texts_grow_with_the_font_dpi():
    normal, large = _pixel_sizes(96), _pixel_sizes(144)
    assert large[0] >= normal[0] * 1.4  # (the application font follows the font DPI)
    for before, after in zip(normal[1:], large[1:]):
        assert abs(after - before * 1.5) <= 1, (normal, large)  # in proportion, as the application font
