"""The application icon is rendered from resources/specchat.svg, the single source of every icon size."""

from __future__ import annotations

from app.gui.theme import ICON_PATH, LIGHT, make_icon


def test_icon_is_rendered_from_the_svg(qapp) -> None:
    assert ICON_PATH.is_file()
    icon = make_icon()
    sizes = sorted(size.width() for size in icon.availableSizes())
    assert sizes == [16, 32, 48, 64, 128, 256]
    image = icon.pixmap(64, 64).toImage()
    assert image.pixelColor(12, 30).name() == LIGHT.accent  # the bubble: the light theme's accent
    assert image.pixelColor(1, 1).alpha() == 0  # transparent corner
