"""Render the installers' icons from resources/specchat.svg, their single source (needs PySide6 only).

    python packaging/make_icons.py hicolor DIR   DIR/<n>x<n>/apps/specchat.png and DIR/scalable/apps/specchat.svg
    python packaging/make_icons.py ico FILE      a Windows icon (PNG-compressed images, 16 to 256 pixels)
    python packaging/make_icons.py iconset DIR   a macOS .iconset folder, for `iconutil -c icns DIR`
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: E402 - after the Qt platform is chosen
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

SVG = Path(__file__).resolve().parent.parent / "resources" / "specchat.svg"
HICOLOR_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
#: macOS iconset file names and their pixel sizes.
ICONSET = {f"icon_{n}x{n}{suffix}.png": n * scale for n in (16, 32, 128, 256, 512) for suffix, scale in (("", 1), ("@2x", 2))}


def render_png(size: int) -> bytes:
    """The icon as PNG bytes, ``size`` x ``size`` pixels."""
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(SVG)).render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise RuntimeError(f"Qt could not encode a {size}-pixel PNG of {SVG}")
    return bytes(data.data())


def write_hicolor(root: Path) -> None:
    """Write the freedesktop hicolor theme's PNG sizes and the scalable SVG under ``root``."""
    for size in HICOLOR_SIZES:
        target = root / f"{size}x{size}" / "apps" / "specchat.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(render_png(size))
    scalable = root / "scalable" / "apps" / "specchat.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SVG, scalable)


def write_ico(path: Path) -> None:
    """Write a Windows .ico holding PNG images (supported since Windows Vista) of :data:`ICO_SIZES`."""
    images = [render_png(size) for size in ICO_SIZES]
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = len(header) + 16 * len(images)
    entries = b""
    for size, png in zip(ICO_SIZES, images):
        entries += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(png), offset)
        offset += len(png)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + entries + b"".join(images))


def write_iconset(folder: Path) -> None:
    """Write a macOS ``.iconset`` folder (16 to 1024 pixels) for ``iconutil -c icns``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, size in ICONSET.items():
        (folder / name).write_bytes(render_png(size))


def main(argv: list[str] | None = None) -> int:
    """Command line: ``hicolor DIR``, ``ico FILE`` or ``iconset DIR``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("hicolor", "ico", "iconset"))
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])  # noqa: F841 - Qt's painting needs one
    {"hicolor": write_hicolor, "ico": write_ico, "iconset": write_iconset}[args.kind](args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
