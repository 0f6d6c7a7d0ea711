"""Safe Markdown rendering of one message, growing to fit its text, with optional draft-token highlighting.

Model output is rendered with Qt's own Markdown support (GitHub dialect, raw HTML shown as text), with each single
newline kept as a line break as chat apps do (a haiku keeps its three lines; code blocks are unchanged). User
messages are shown as plain text, exactly as typed. Nothing a message names is ever loaded:
:meth:`MarkdownView.loadResource` refuses every image or other resource, and links open in the browser only when
the user clicks them.
"""

from __future__ import annotations

import math
import re

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QPalette, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser

MARKDOWN_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)
CODE_BACKGROUND = QColor("#f1f3f5")
DRAFT_BACKGROUND = QColor("#c8f2d0")
_WORD = re.compile(r"\S+")
_MARKUP = "*_`#>~|"
_SEARCH_SLACK = 24  # rendered text may skip this many characters of markup between two words
_FENCE = re.compile(r" {0,3}(```|~~~)")
#: A line that starts a block of its own (list item, heading, quote, fence, rule or setext underline, HTML, table).
_BLOCK_START = re.compile(r" {0,3}([-+*]( |$)|\d{1,9}[.)]( |$)|#{1,6}( |$)|>|```|~~~|<|([-*_=])( *\5){2,} *$|=+ *$|-+ *$)")
_ENDS_ITSELF = re.compile(r" {0,3}#{1,6}( |$)")  # an ATX heading ends at its line
LINE_SEPARATOR = "\u2028"  # a line break inside a paragraph (Qt lays it out as one; toPlainText gives "\n")


def hard_line_breaks(markdown: str) -> str:
    """Keep each single newline of a paragraph as a line break, as chat apps render replies (a haiku keeps its
    three lines; Markdown would join them with spaces).

    A newline between two lines of one paragraph becomes U+2028 LINE SEPARATOR, which Qt shows as a line break
    within the paragraph. Newlines that end a block (before a list item, heading, quote, rule, table row...) and
    everything in code (fenced, or indented by 4 spaces) stay as they are. The result has the length of
    ``markdown``, so offsets into it (draft spans) hold for both.
    """
    lines = markdown.split("\n")
    joined = []
    fence = ""
    for index, line in enumerate(lines[:-1]):
        following = lines[index + 1]
        marker = _FENCE.match(line)
        if marker and (not fence or marker.group(1) == fence):
            fence = "" if fence else marker.group(1)
        joined.append(
            not fence
            and not marker
            and bool(line.strip())
            and bool(following.strip())
            and not _ENDS_ITSELF.match(line)
            and not _BLOCK_START.match(following)
            and "|" not in line + following
            and not line.startswith(("    ", "\t"))
            and not following.startswith(("    ", "\t"))
        )
    pieces = []
    for line, join in zip(lines, joined + [False]):
        pieces.append(line + (LINE_SEPARATOR if join else "\n"))
    return "".join(pieces)[: len(markdown)]


def draft_ranges(raw: str, spans: list[list[int]], rendered: str) -> list[tuple[int, int]]:
    """Map ``[start, end)`` spans of the raw Markdown to ranges of the rendered plain text.

    Words of the raw text are found, in order, in the rendered text (markup characters stripped; a word that
    is pure markup, or not found near where it is expected, is skipped). A word counts as drafted when its
    characters lie in a span; consecutive drafted words of one span merge into one range.
    """
    if not spans:
        return []
    drafted = bytearray(len(raw))
    for start, end in spans:
        drafted[max(0, start) : max(0, min(end, len(raw)))] = b"\x01" * max(0, min(end, len(raw)) - max(0, start))
    ranges: list[tuple[int, int]] = []
    cursor = 0
    previous_span = None
    for match in _WORD.finditer(raw):
        word = match.group()
        lead = len(word) - len(word.lstrip(_MARKUP))
        core = word.strip(_MARKUP)
        if not core:
            continue
        found = rendered.find(core, cursor, cursor + len(core) + _SEARCH_SLACK)
        if found < 0:
            continue
        cursor = found + len(core)
        raw_start = match.start() + lead
        if all(drafted[raw_start : raw_start + len(core)]):
            span = _span_of(spans, raw_start)
            if ranges and span is not None and span == previous_span and not rendered[ranges[-1][1] : found].strip():
                ranges[-1] = (ranges[-1][0], cursor)
            else:
                ranges.append((found, cursor))
            previous_span = span
        else:
            previous_span = None
    return ranges


def _span_of(spans: list[list[int]], position: int):
    for index, (start, end) in enumerate(spans):
        if start <= position < end:
            return index
    return None


class MarkdownView(QTextBrowser):
    """A read-only Markdown (or plain text) view whose height follows its content (it never scrolls by itself).

    Attributes:
        blocked_resources: URLs the content asked for and that were refused (images, style sheets...).
    """

    height_changed = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.blocked_resources: list[str] = []
        self._markdown = ""
        self._spans: list[list[int]] = []
        self._highlight = False
        self._plain = False
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._open_link)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
            | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Base, QColor(0, 0, 0, 0))  # the bubble shows through
        self.setPalette(palette)
        self.document().setDocumentMargin(2)
        self.document().setUndoRedoEnabled(False)
        self._fitting = True
        self._rendered = False
        self.document().documentLayout().documentSizeChanged.connect(lambda _: self._fit_height())
        self.setFixedHeight(24)

    # Nothing named by model output is loaded: no images, no style sheets, local or remote.
    def loadResource(self, resource_type: int, url: QUrl):  # noqa: N802 - Qt override
        """Refuse every resource (returns nothing) and remember the URL in ``blocked_resources``."""
        self.blocked_resources.append(url.toString())
        return None

    def _open_link(self, url: QUrl) -> None:
        if url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    @property
    def markdown(self) -> str:
        """The Markdown source shown (the plain text, for :meth:`set_plain_text`)."""
        return self._markdown

    def set_markdown(self, text: str, draft_spans: list[list[int]] | None = None, highlight: bool = False) -> None:
        """Render ``text`` with single newlines kept as line breaks; with ``highlight``, colour the characters of
        ``draft_spans`` (``[start, end)`` offsets of ``text``: accepted draft tokens)."""
        self._show(text, [list(span) for span in draft_spans or []], highlight, plain=False)

    def set_plain_text(self, text: str) -> None:
        """Show ``text`` as typed: no Markdown, every line break kept (user messages)."""
        self._show(text, [], False, plain=True)

    def _show(self, text: str, spans: list[list[int]], highlight: bool, plain: bool) -> None:
        if (text, spans, highlight, plain) == (self._markdown, self._spans, self._highlight, self._plain) and self._rendered:
            return
        self._markdown, self._spans, self._highlight, self._plain = text, spans, highlight, plain
        self._rendered = True
        document = self.document()
        self._fitting = False  # one height update at the end, not one per format change
        if plain:
            document.setPlainText(text)
        else:
            markdown = hard_line_breaks(text)
            document.setMarkdown(markdown, MARKDOWN_FEATURES)
            cursor = QTextCursor(document)
            cursor.beginEditBlock()
            self._style_code(document, cursor)
            if highlight and self._spans:
                self._apply_highlight(document, cursor, markdown, self._spans)
            cursor.endEditBlock()
        self._fitting = True
        self._fit_height()

    def set_highlight(self, highlight: bool) -> None:
        """Turn draft-token highlighting on or off (re-renders; plain text is never highlighted)."""
        if highlight != self._highlight and not self._plain:
            self.set_markdown(self._markdown, self._spans, highlight)

    def highlighted_text(self) -> list[str]:
        """The rendered pieces currently coloured as accepted draft tokens (for tests and accessibility)."""
        pieces = []
        block = self.document().begin()
        while block.isValid():
            iterator = block.begin()
            while not iterator.atEnd():
                fragment = iterator.fragment()
                if fragment.charFormat().background().color() == DRAFT_BACKGROUND:
                    pieces.append(fragment.text())
                iterator += 1
            block = block.next()
        return pieces

    @staticmethod
    def _style_code(document: QTextDocument, cursor: QTextCursor) -> None:
        block = document.begin()
        while block.isValid():
            if block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence) or block.blockFormat().hasProperty(
                QTextFormat.Property.BlockCodeLanguage
            ):
                fmt = block.blockFormat()
                fmt.setBackground(CODE_BACKGROUND)
                cursor.setPosition(block.position())
                cursor.setBlockFormat(fmt)
            else:
                iterator = block.begin()
                while not iterator.atEnd():
                    fragment = iterator.fragment()
                    if fragment.charFormat().fontFixedPitch():
                        cursor.setPosition(fragment.position())
                        cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                        fmt = QTextCharFormat()
                        fmt.setBackground(CODE_BACKGROUND)
                        cursor.mergeCharFormat(fmt)
                    iterator += 1
            block = block.next()

    @staticmethod
    def _apply_highlight(document: QTextDocument, cursor: QTextCursor, markdown: str, spans: list[list[int]]) -> None:
        fmt = QTextCharFormat()
        fmt.setBackground(DRAFT_BACKGROUND)
        for start, end in draft_ranges(markdown, spans, document.toPlainText()):
            cursor.setPosition(start)
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(fmt)

    def _fit_height(self) -> None:
        width = self.viewport().width()
        if width <= 0 or not self._fitting:
            return
        document = self.document()
        if document.textWidth() != width:
            document.setTextWidth(width)
        height = math.ceil(document.size().height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(height)
            self.height_changed.emit(height)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Re-wrap the text to the new width and adapt the height."""
        super().resizeEvent(event)
        self._fit_height()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """Width is up to the layout; height is the document's."""
        return QSize(200, self.height())

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Let the chat's scroll area scroll (this view never scrolls)."""
        event.ignore()
