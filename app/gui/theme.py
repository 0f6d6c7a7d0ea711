"""SpecChat's look: the Qt style sheet and the window icon (``resources/specchat.svg``)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer


def resource_path(name: str) -> Path:
    """A file of the repository's ``resources/`` folder, wherever the app runs from.

    Wheels and application bundles carry ``resources/`` as ``app/resources`` (pyproject's package-dir,
    packaging/specchat.spec); a source checkout or an editable install reads it at the repository's top level.
    """
    app_package = Path(__file__).resolve().parents[1]
    installed = app_package / "resources" / name
    return installed if installed.exists() else app_package.parent / "resources" / name


#: The icon's single source: the window icon and every installer's icon are rendered from it.
ICON_PATH = resource_path("specchat.svg")

ACCENT = "#1f6feb"
#: Widest a number field of the settings grows (its special texts, "auto (system prompt)", fit), in pixels.
FIELD_WIDTH = 170

STYLE_SHEET = f"""
QMainWindow, #chatContent {{ background: #f6f7f9; }}
#conversationList {{ background: #eef0f3; }}
#conversations {{ background: transparent; border: none; font-size: 13px; }}
#conversations::item {{ padding: 7px 6px; border-radius: 6px; margin: 1px 0; }}
#conversations::item:selected {{ background: #d6e4ff; color: #111; }}
#conversations::item:hover:!selected {{ background: #e2e6eb; }}
#newChatButton {{ padding: 7px; font-weight: 600; }}
#chatHeader {{ background: #ffffff; border-bottom: 1px solid #e3e6ea; }}
#chatTitle {{ font-size: 16px; font-weight: 600; color: #1b1f24; }}
#userBubble {{ background: #e7f0ff; border: 1px solid #cfe0ff; border-radius: 10px; }}
#assistantBubble {{ background: #ffffff; border: 1px solid #e3e6ea; border-radius: 10px; }}
#roleLabel {{ font-weight: 600; color: #3d4550; }}
#columnTitle {{ font-weight: 600; color: #3d4550; padding-bottom: 2px; }}
#footer {{ color: #6a737d; font-size: 11px; }}
#separator {{ color: #e3e6ea; }}
#emptyLabel {{ color: #6a737d; padding: 40px; }}
#hint {{ color: #6a737d; }}
#composer {{ background: #ffffff; border-top: 1px solid #e3e6ea; }}
#composerError {{ color: #b42318; }}
#fieldError {{ color: #b42318; font-size: 11px; }}
#sendButton {{ background: {ACCENT}; color: white; border: none; border-radius: 5px; padding: 6px 14px; font-weight: 600; }}
#sendButton:disabled {{ background: #9db8e8; }}
*[invalid="true"] {{ border: 1px solid #d92d20; border-radius: 3px; background: #fff5f5; }}
#graphSummary {{ color: #3d4550; font-size: 11px; }}
QGroupBox {{ font-weight: 600; border: 1px solid #e3e6ea; border-radius: 6px; margin-top: 7px; padding-top: 3px; background: #ffffff; }}
#advancedToggle {{ color: #3d4550; padding: 0; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 8px; padding: 0 4px; }}
#settingsPane {{ background: #f6f7f9; border: none; }}
"""


def make_icon() -> QIcon:
    """The application icon, rendered from :data:`ICON_PATH` at the usual sizes (16 to 256 pixels)."""
    renderer = QSvgRenderer(str(ICON_PATH))
    icon = QIcon()
    for size in (16, 32, 48, 64, 128, 256):
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        renderer.render(painter)
        painter.end()
        icon.addPixmap(pixmap)
    return icon
