"""SpecChat's look: the one colour table (:class:`Theme`, :data:`LIGHT` and :data:`DARK`), the Qt palette and style
sheet made from it, and the window icon (``resources/specchat.svg``).

Rules:
- Every colour of the window comes from here: a widget reads :func:`current` (or styles itself through the
  application style sheet, whose colours are the table's); none is written in a widget.
- Three choices (View > Theme, kept in the settings as ``AppSettings.theme``): ``system`` follows the desktop's light
  or dark scheme (Qt's ``QStyleHints.colorScheme``, else the palette the platform gave before SpecChat set its own)
  and changes with it while the window runs; ``light`` and ``dark`` are fixed.
- Readable in both: every pair of text and background colours of the table has a contrast ratio of at least 4.5:1
  (WCAG 2.1 AA for body text; :func:`contrast_ratio`), and syntax colours of code are brought to that ratio against
  the code background (:func:`readable`). tests/gui/test_theme.py checks the table and screenshots of both.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPen, QPixmap, QPolygonF
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QProxyStyle, QStyle, QStyleFactory

from .settings_store import THEME_CHOICES


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

#: Widest a number field of the settings grows (its special texts, "auto (system prompt)", fit), in pixels.
FIELD_WIDTH = 170
#: The form margins of the settings pane's groups (left, top, right, bottom) and the room between them, pixels:
#: tight enough that an error one line longer than the explanation it replaces (an emptied field's) still fits a
#: 1366x768 window without a scroll bar (a newcomer's emptied Context length pushed "Reset to defaults" out of view,
#: cut at the pane's bottom edge).
GROUP_MARGINS = (8, 4, 8, 2)
GROUP_SPACING = 1
#: The entries of View > Theme, in menu order, by ``AppSettings.theme`` value.
THEME_LABELS = dict(zip(THEME_CHOICES, ("&System (follow the desktop)", "&Light", "&Dark")))
#: WCAG 2.1 AA: the least contrast ratio of body text against its background.
MIN_CONTRAST = 4.5


@dataclass(frozen=True)
class Theme:
    """One palette of the window (``#rrggbb`` colours).

    Attributes:
        name: ``light`` or ``dark``; dark: a dark background with light text.
        window / panel / base / header: backgrounds of the window, the conversation list, bubbles and fields, the
            chat's title bar; text / muted: text on them (muted: footers, hints); border: lines between areas.
        accent / on_accent: the Send button and selections, and text on it; accent_off / on_accent_off: Send while
            disabled, and its text (of low contrast on purpose: a disabled Send must not look enabled).
        user_bubble / user_border: a user message's bubble; selected / on_selected: the chosen conversation;
        hover: a conversation under the mouse.
        code / code_border: code blocks and inline code; quote: a block quote's bar; table_border: table rules.
        draft: the background of text that came from accepted drafts.
        notice / on_notice / notice_border: the notices above the chat (and the in-memory history banner).
        error / invalid / invalid_border: error text, and a field whose value is invalid.
        link: links in replies; focus: the keyboard focus ring.
        graph_axis / graph_text: the live graph's axes and titles (its background is ``base``).
        series_ar / series_spec: the live graph's curves and legend of autoregressive and speculative runs.
        pygments: the pygments style whose token colours code blocks use (made readable on ``code``).
    """

    name: str
    dark: bool
    window: str
    panel: str
    base: str
    header: str
    text: str
    muted: str
    border: str
    accent: str
    on_accent: str
    accent_off: str
    on_accent_off: str
    user_bubble: str
    user_border: str
    selected: str
    on_selected: str
    hover: str
    code: str
    code_border: str
    quote: str
    table_border: str
    draft: str
    notice: str
    on_notice: str
    notice_border: str
    error: str
    invalid: str
    invalid_border: str
    link: str
    focus: str
    graph_axis: str
    graph_text: str
    series_ar: str
    series_spec: str
    pygments: str

    def series(self, key: str) -> str:
        """The colour of the live graph's run ``key`` (``ar``; anything else is speculative)."""
        return self.series_ar if key == "ar" else self.series_spec

    def text_pairs(self) -> dict[str, tuple[str, str]]:
        """Every (text, background) pair the window draws text with, by a name saying where."""
        pairs = {}
        for background in ("window", "panel", "base", "header", "user_bubble", "code"):
            pairs[f"text on {background}"] = (self.text, getattr(self, background))
            pairs[f"muted on {background}"] = (self.muted, getattr(self, background))
            pairs[f"error on {background}"] = (self.error, getattr(self, background))
        pairs["text on draft"] = (self.text, self.draft)
        pairs["text on hover"] = (self.text, self.hover)
        pairs["text on invalid field"] = (self.text, self.invalid)
        pairs["selected conversation"] = (self.on_selected, self.selected)
        pairs["send button"] = (self.on_accent, self.accent)
        pairs["notice"] = (self.on_notice, self.notice)
        pairs["link on base"] = (self.link, self.base)
        pairs["graph titles"] = (self.graph_text, self.base)
        pairs["graph legend, autoregressive"] = (self.series_ar, self.base)
        pairs["graph legend, speculative"] = (self.series_spec, self.base)
        return pairs


LIGHT = Theme(
    name="light", dark=False,
    window="#f6f7f9", panel="#eef0f3", base="#ffffff", header="#ffffff", text="#1b1f24", muted="#57606a",
    border="#d6dae0", accent="#1f6feb", on_accent="#ffffff", accent_off="#9db8e8", on_accent_off="#ffffff",
    user_bubble="#e7f0ff",
    user_border="#cfe0ff", selected="#d6e4ff", on_selected="#111418", hover="#e2e6eb", code="#f1f3f5",
    code_border="#d8dde3", quote="#c4cad2", table_border="#c4cad2", draft="#c8f2d0", notice="#fff8e1",
    on_notice="#5c4400", notice_border="#f0d58a", error="#b42318", invalid="#fff5f5", invalid_border="#d92d20",
    link="#0b57d0", focus="#1f6feb", graph_axis="#8c959f", graph_text="#3d4550", series_ar="#1f6feb",
    series_spec="#c2410c", pygments="default",
)  # fmt: skip
DARK = Theme(
    name="dark", dark=True,
    window="#1e1f22", panel="#18191c", base="#2b2d31", header="#232428", text="#e6e7e9", muted="#a9afb8",
    border="#3a3d44", accent="#2f6fdf", on_accent="#ffffff", accent_off="#2b3d5c", on_accent_off="#7a8496",
    user_bubble="#233149",
    user_border="#33486e", selected="#2f4a7a", on_selected="#f0f3f8", hover="#2c2f35", code="#1b1d21",
    code_border="#3a3d44", quote="#596170", table_border="#4a4f58", draft="#1d4a2a", notice="#3a3116",
    on_notice="#f3e3a6", notice_border="#6b5a22", error="#ff8a80", invalid="#3b1f22", invalid_border="#ff6b6b",
    link="#8ab4ff", focus="#6ea0ff", graph_axis="#80868f", graph_text="#c9ccd1", series_ar="#7aa7ff",
    series_spec="#ff9a57", pygments="monokai",
)  # fmt: skip

_current = LIGHT
_platform_palette_dark: bool | None = None


def current() -> Theme:
    """The theme applied now (:func:`apply`)."""
    return _current


def relative_luminance(colour: str | QColor) -> float:
    """WCAG 2.1 relative luminance of an sRGB colour, 0 (black) to 1 (white)."""
    colour = QColor(colour)

    def channel(value: int) -> float:
        c = value / 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.red()) + 0.7152 * channel(colour.green()) + 0.0722 * channel(colour.blue())


def contrast_ratio(foreground: str | QColor, background: str | QColor) -> float:
    """WCAG 2.1 contrast ratio of two colours, 1 (none) to 21 (black on white): (L1 + 0.05) / (L2 + 0.05)."""
    a, b = sorted((relative_luminance(foreground), relative_luminance(background)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def readable(foreground: str, background: str, minimum: float = MIN_CONTRAST) -> str:
    """``foreground``, or the nearest colour of the same hue and saturation made lighter (on a dark background) or
    darker (on a light one) until its contrast with ``background`` is at least ``minimum``."""
    if contrast_ratio(foreground, background) >= minimum:
        return foreground
    colour = QColor(foreground)
    hue, lightness, saturation = colorsys.rgb_to_hls(colour.redF(), colour.greenF(), colour.blueF())
    lighter = relative_luminance(background) < 0.18
    for step in range(1, 101):
        shade = min(1.0, lightness + step / 100) if lighter else max(0.0, lightness - step / 100)
        red, green, blue = colorsys.hls_to_rgb(hue, shade, saturation)
        candidate = QColor.fromRgbF(red, green, blue).name()
        if contrast_ratio(candidate, background) >= minimum:
            return candidate
    return "#ffffff" if lighter else "#000000"


def system_is_dark() -> bool:
    """Whether the desktop asks for a dark scheme: ``QStyleHints.colorScheme()`` where the platform says, else the
    lightness of the palette the platform gave the application before SpecChat set its own."""
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme != Qt.ColorScheme.Unknown:
        return scheme == Qt.ColorScheme.Dark
    return bool(_platform_palette_dark)


def remember_platform_palette() -> None:
    """Note whether the platform's own palette is dark (call once, before :func:`apply` replaces it)."""
    global _platform_palette_dark
    if _platform_palette_dark is None:
        palette = QGuiApplication.palette()
        _platform_palette_dark = palette.color(QPalette.ColorRole.Window).lightness() < palette.color(
            QPalette.ColorRole.WindowText
        ).lightness()


def theme_for(choice: str) -> Theme:
    """The theme of a View > Theme choice (``system``, ``light`` or ``dark``; anything else is ``system``)."""
    if choice == "light":
        return LIGHT
    if choice == "dark":
        return DARK
    return DARK if system_is_dark() else LIGHT


def apply(app: QGuiApplication, theme: Theme) -> None:
    """Make ``theme`` the application's: its palette and style sheet (widgets that paint colours themselves, the
    chat's Markdown and the live graph, are told by the window)."""
    global _current
    _current = theme
    sheet = style_sheet(theme)
    if app.styleSheet() != sheet:  # (setting the same sheet again would re-polish every widget for nothing)
        app.setPalette(palette(theme))
        app.setStyleSheet(sheet)


class OutlinedIndicators(QProxyStyle):
    """Qt's Fusion style, with check boxes outlined in the palette's muted text colour (``PlaceholderText``):
    Fusion draws their outline 40% darker than the window, 1.2:1 against it on the dark theme and 1.7:1 on the light
    one, where WCAG 1.4.11 asks 3:1 for a control's outline; and with the arrows of a number field drawn where the
    style sheet styles the field (focused or invalid): there Qt asks for each arrow alone, and Fusion's drew none."""

    SPIN_ARROWS = {QStyle.PrimitiveElement.PE_IndicatorSpinUp: -1, QStyle.PrimitiveElement.PE_IndicatorSpinDown: 1}

    def __init__(self):
        super().__init__(QStyleFactory.create("Fusion"))

    def drawPrimitive(self, element, option, painter, widget=None) -> None:  # noqa: N802 - Qt's name
        """Fusion's drawing, then the outline over a check box's; a number field's arrow as a triangle in the text
        colour (muted where that way is disabled)."""
        if element in self.SPIN_ARROWS:
            self._draw_spin_arrow(self.SPIN_ARROWS[element], option, painter)
            return
        super().drawPrimitive(element, option, painter, widget)
        if element == QStyle.PrimitiveElement.PE_IndicatorCheckBox:
            painter.save()
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(QPen(option.palette.color(QPalette.ColorRole.PlaceholderText), 1.0))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(QRectF(option.rect).adjusted(0.5, 0.5, -0.5, -0.5), 2.0, 2.0)
            painter.restore()

    @staticmethod
    def _draw_spin_arrow(direction: int, option, painter) -> None:
        """A filled triangle in the middle of ``option.rect``, pointing up (``direction`` -1) or down (1)."""
        rect = QRectF(option.rect)
        half_width = max(2.0, min(rect.width() / 3, rect.height() / 2))
        half_height = half_width / 2
        centre = rect.center()
        tip = QPointF(centre.x(), centre.y() + direction * half_height)
        base_y = centre.y() - direction * half_height
        enabled = bool(option.state & QStyle.StateFlag.State_Enabled)
        role = QPalette.ColorRole.ButtonText if enabled else QPalette.ColorRole.PlaceholderText
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(option.palette.color(role))
        painter.drawPolygon(QPolygonF([QPointF(centre.x() - half_width, base_y), QPointF(centre.x() + half_width, base_y), tip]))
        painter.restore()


def palette(theme: Theme) -> QPalette:
    """The Qt palette of ``theme`` (the Fusion style draws every standard widget from it)."""
    roles = QPalette.ColorRole
    result = QPalette()
    colours = {
        roles.Window: theme.window, roles.WindowText: theme.text, roles.Base: theme.base,
        roles.AlternateBase: theme.panel, roles.Text: theme.text, roles.Button: theme.header,
        roles.ButtonText: theme.text, roles.Highlight: theme.accent, roles.HighlightedText: theme.on_accent,
        roles.ToolTipBase: theme.base, roles.ToolTipText: theme.text, roles.PlaceholderText: theme.muted,
        roles.Link: theme.link, roles.LinkVisited: theme.link, roles.BrightText: theme.error,
        roles.Light: theme.base, roles.Midlight: theme.hover, roles.Mid: theme.border, roles.Dark: theme.graph_axis,
        roles.Shadow: "#000000",
    }  # fmt: skip
    for role, colour in colours.items():
        result.setColor(role, QColor(colour))
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        result.setColor(QPalette.ColorGroup.Disabled, role, QColor(theme.graph_axis))
    # a disabled field is drawn on the panel colour: on the base colour it looked editable (a trial's API key field)
    result.setColor(QPalette.ColorGroup.Disabled, roles.Base, QColor(theme.panel))
    return result


def style_sheet(theme: Theme) -> str:
    """The application style sheet of ``theme``: the window's areas, bubbles, buttons, errors, notices, focus.

    Its font sizes are in points, which follow the font DPI as the application font does (in pixels, the help
    lines stayed 11 px beside 18 px labels with fonts at 144 dpi); at 96 dpi they are the 11, 13 and 16 px they were."""
    t = theme
    return f"""
QMainWindow, #chatContent, #chatPage {{ background: {t.window}; }}
QToolTip {{ background: {t.base}; color: {t.text}; border: 1px solid {t.border}; }}
#conversationList {{ background: {t.panel}; }}
#conversations {{ background: {t.panel}; border: none; font-size: 9.75pt; color: {t.text}; }}
#conversations::item {{ padding: 7px 6px; border-radius: 6px; margin: 1px 0; }}
#conversations::item:selected {{ background: {t.selected}; color: {t.on_selected}; }}
#conversations::item:hover:!selected {{ background: {t.hover}; }}
QScrollBar:vertical {{ background: {t.panel}; width: 12px; margin: 0; }}
QScrollBar::handle:vertical {{ background: {t.border}; border-radius: 4px; min-height: 24px; margin: 2px; }}
QScrollBar:horizontal {{ background: {t.panel}; height: 12px; margin: 0; }}
QScrollBar::handle:horizontal {{ background: {t.border}; border-radius: 4px; min-width: 24px; margin: 2px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ width: 0; height: 0; }}
QScrollBar::add-page, QScrollBar::sub-page {{ background: none; }}
#newChatButton {{ padding: 7px; font-weight: 600; }}
#chatHeader {{ background: {t.header}; border-bottom: 1px solid {t.border}; }}
#chatTitle {{ font-size: 12pt; font-weight: 600; color: {t.text}; }}
#userBubble {{ background: {t.user_bubble}; border: 1px solid {t.user_border}; border-radius: 10px; }}
#assistantBubble {{ background: {t.base}; border: 1px solid {t.border}; border-radius: 10px; }}
#roleLabel {{ font-weight: 600; color: {t.text}; }}
#columnTitle {{ font-weight: 600; color: {t.text}; padding-bottom: 2px; }}
#footer {{ color: {t.muted}; font-size: 8.25pt; }}
#separator {{ color: {t.border}; }}
#emptyLabel {{ color: {t.muted}; padding: 40px; }}
#hint, #settingHelp {{ color: {t.muted}; }}
#settingHelp {{ font-size: 8.25pt; }}
#composer {{ background: {t.header}; border-top: 1px solid {t.border}; }}
#composerError {{ color: {t.error}; }}
#fieldError {{ color: {t.error}; font-size: 8.25pt; }}
#sendButton {{ background: {t.accent}; color: {t.on_accent}; border: none; border-radius: 5px; padding: 6px 14px; font-weight: 600; }}
#sendButton:disabled {{ background: {t.accent_off}; color: {t.on_accent_off}; }}
#sendButton:focus {{ border: 2px solid {t.text}; padding: 4px 12px; }}
*[invalid="true"] {{ border: 1px solid {t.invalid_border}; border-radius: 3px; background: {t.invalid}; }}
/* the list of an invalid combo box draws its chosen entry as every list does (it drew a blank pink row) */
QComboBox[invalid="true"] {{ selection-background-color: {t.accent}; selection-color: {t.on_accent}; }}
#graphSummary {{ color: {t.graph_text}; font-size: 8.25pt; }}
#graphNoPlot {{ color: {t.muted}; }}
QGroupBox {{ font-weight: 600; border: 1px solid {t.border}; border-radius: 6px; margin-top: 7px; padding-top: 3px; background: {t.base}; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 8px; padding: 0 4px; color: {t.text}; }}
#advancedToggle {{ color: {t.text}; padding: 0; }}
#settingsPane {{ background: {t.window}; border: none; }}
#settingsPane > QWidget > QWidget {{ background: {t.window}; }}
#modelNotice, #historyBanner {{ background: {t.notice}; border-bottom: 1px solid {t.notice_border}; }}
#modelNotice QLabel, #historyBanner {{ color: {t.on_notice}; }}
#historyBanner {{ padding: 6px 12px; }}
#codeBlock {{ background: {t.code}; border: 1px solid {t.code_border}; border-radius: 6px; }}
#codeLanguage {{ color: {t.muted}; font-size: 8.25pt; }}
QToolButton[plotChoice="true"] {{ padding: 2px 6px; border: 1px solid {t.border}; border-radius: 4px; }}
QToolButton[plotChoice="true"]:checked {{ background: {t.accent}; color: {t.on_accent}; border-color: {t.accent}; }}
QToolButton:focus {{ border: 2px solid {t.focus}; border-radius: 4px; }}
/* the ring takes no more room than Fusion's own margins (7 px a side): wider padding cut "Reset to defaults" when focused */
QPushButton:focus {{ border: 2px solid {t.focus}; border-radius: 4px; background: {t.base}; color: {t.text}; padding: 3px 5px; }}
#composerEdit:focus, #conversations:focus {{ border: 2px solid {t.focus}; }}
#messagesArea {{ border: 2px solid transparent; }}
#messagesArea:focus {{ border: 2px solid {t.focus}; }}
QComboBox:focus, QAbstractSpinBox:focus, QLineEdit:focus {{ border: 2px solid {t.focus}; border-radius: 3px; }}
/* a check box's ring is a border it always has, transparent until it has the focus: a border on focus only took
   its room from the text and cut the "d" of "Greedy: likeliest word" */
QCheckBox {{ border: 2px solid transparent; border-radius: 3px; }}
QCheckBox:focus {{ border-color: {t.focus}; }}
/* the plot chosen is the accent colour: its ring is the text colour, as the Send button's */
QToolButton[plotChoice="true"]:focus {{ border: 2px solid {t.focus}; padding: 1px 5px; }}
QToolButton[plotChoice="true"]:checked:focus {{ border-color: {t.text}; }}
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

