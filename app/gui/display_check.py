"""Before Qt starts on Linux: is there a display, and can Qt's X11 (xcb) platform plugin load?

Without them Qt aborts (exit status 134) with text that does not say what to do: "could not connect to display"
or "Could not load the Qt platform plugin "xcb" even though it was found" (Qt >= 6.5 needs libxcb-cursor0, which
a fresh Debian or Ubuntu lacks). :func:`display_problem` finds both cases first and says what fixes them; the
window then exits with status 2 (``app.gui.application.run``). Nothing here imports Qt's GUI modules.

The xcb check loads the plugin the way Qt will (``dlopen``, which follows the plugin's own library path): only if
that fails does it try each library of :data:`XCB_LIBRARIES` by its soname, to name every missing one.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

#: The libraries of PySide6's xcb platform plugin (``libqxcb.so``) and of ``libQt6XcbQpa.so.6``, which it links
#: to, that a bare system may lack, each with the Debian/Ubuntu package holding it (``readelf -d`` of both in
#: PySide6 6.12, ``dpkg -S`` on Debian 12; libc, libstdc++ and libgcc are left out: Python needs them itself).
XCB_LIBRARIES = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb.so.1": "libxcb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libGL.so.1": "libgl1",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
}


#: The Debian package of a colour emoji font: without one, the emoji that DejaVu (Debian's default font) lacks, such
#: as 🐱, show as empty boxes in chats. Not a library Qt needs to start, so the window does not check it; the README's
#: install line names it and the .deb recommends it.
EMOJI_FONT_PACKAGE = "fonts-noto-color-emoji"


def xcb_packages() -> list[str]:
    """The Debian packages of :data:`XCB_LIBRARIES`, sorted (the .deb of ``packaging/build_linux.sh`` needs them)."""
    return sorted(set(XCB_LIBRARIES.values()))


def display_problem(
    environ: Mapping[str, str] = os.environ,
    platform: str = sys.platform,
    load: Callable[[str], object] = ctypes.CDLL,
    plugin: Path | None = None,
) -> str | None:
    """What keeps Qt from opening a window here, as one line that says what to do, or None when nothing does.

    Checked on Linux only, and only for the platforms it concerns: no display at all (no ``DISPLAY`` and no
    ``WAYLAND_DISPLAY``, ``QT_QPA_PLATFORM`` unset), ``QT_QPA_PLATFORM=xcb`` without ``DISPLAY``, and X11 (``DISPLAY``
    set and either ``QT_QPA_PLATFORM=xcb`` or neither it nor ``WAYLAND_DISPLAY``) with the xcb plugin's libraries
    missing. Any other ``QT_QPA_PLATFORM`` (offscreen, wayland, a list) is left to Qt.

    Args:
        environ: the environment Qt will see.
        platform: ``sys.platform``.
        load: opens a shared library by path or soname, raising OSError when it cannot (``ctypes.CDLL``).
        plugin: the xcb plugin (default: ``platforms/libqxcb.so`` in Qt's plugin folder).
    """
    if not platform.startswith("linux"):
        return None
    chosen = environ.get("QT_QPA_PLATFORM", "")
    display, wayland = environ.get("DISPLAY"), environ.get("WAYLAND_DISPLAY")
    if chosen not in ("", "xcb") or (chosen == "" and wayland):
        return None
    if not display:
        why = "QT_QPA_PLATFORM=xcb but DISPLAY is not set" if chosen else "neither DISPLAY nor WAYLAND_DISPLAY is set"
        return (
            f"error: no display ({why}): run SpecChat in a desktop session, or set QT_QPA_PLATFORM=offscreen to run "
            "it without one (the command line, `specchat generate|chat|serve|models`, needs no display)"
        )
    return _xcb_problem(load, plugin or _xcb_plugin())


def missing_xcb_libraries(load: Callable[[str], object] = ctypes.CDLL) -> list[str]:
    """The sonames of :data:`XCB_LIBRARIES` that ``load`` cannot open, in the table's order."""
    missing = []
    for soname in XCB_LIBRARIES:
        try:
            load(soname)
        except OSError:
            missing.append(soname)
    return missing


def _xcb_problem(load: Callable[[str], object], plugin: Path) -> str | None:
    if not plugin.is_file():
        return None  # a Qt without the xcb plugin: Qt says which platforms it has
    try:
        load(str(plugin))
    except OSError as error:
        missing = missing_xcb_libraries(load)
        if not missing:
            return f"error: Qt's X11 platform plugin cannot be loaded: {error}"
        packages = " ".join(sorted({XCB_LIBRARIES[soname] for soname in missing}))  # the README lists them all
        return (
            f"error: the window needs X11 libraries that are not installed ({', '.join(missing)}); "
            f"install them with: sudo apt-get install {packages}"
        )
    return None


def _xcb_plugin() -> Path:
    from PySide6.QtCore import QLibraryInfo

    return Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"
