"""Safe Markdown rendering of one message, growing to fit its text, with optional draft-token highlighting.

Model output is split at its fenced code blocks (:func:`segments`): the Markdown between them is rendered with Qt's
own Markdown support (GitHub dialect, raw HTML shown as text) in a :class:`TextView`, with each single newline kept
as a line break as chat apps do (a haiku keeps its three lines), tables ruled and block quotes marked with a bar;
each code block is a :class:`~app.gui.widgets.code_block.CodeBlock` (syntax colours, a Copy button, scrolled
sideways instead of cut). User messages are shown as plain text, exactly as typed. Nothing a message names is ever
loaded: :meth:`TextView.loadResource` refuses every image or other resource, and links open in the browser only
when the user clicks them. Colours are the theme's (``app.gui.theme``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt, QUrl
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QPainter,
    QPalette,
    QPen,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextFrameFormat,
    QTextTable,
)
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QVBoxLayout, QWidget

from .. import theme
from .code_block import CodeBlock
from .utf16 import qt_positions

MARKDOWN_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)
_WORD = re.compile(r"\S+")
_MARKUP = "*_`#>~|"
_SEARCH_SLACK = 24  # rendered text may skip this many characters of markup between two words
_FENCE = re.compile(r" {0,3}(```|~~~)")
#: A table's delimiter row: ``| --- | :---: |`` (outer pipes optional).
_DELIMITER_ROW = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
#: An opening code fence: up to 3 spaces, 3 or more backticks or tildes, an info string (no backtick after backticks).
_OPENING_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})([^`\n]*)$")
#: A line that starts a block of its own (list item, heading, quote, fence, rule or setext underline, HTML, table).
_BLOCK_START = re.compile(r" {0,3}([-+*]( |$)|\d{1,9}[.)]( |$)|#{1,6}( |$)|>|```|~~~|<|([-*_=])( *\5){2,} *$|=+ *$|-+ *$)")
_ENDS_ITSELF = re.compile(r" {0,3}#{1,6}( |$)")  # an ATX heading ends at its line
LINE_SEPARATOR = "\u2028"
QUOTE_INDENT = 14  # pixels a block quote is indented per level (its bar sits in the indent)  # a line break inside a paragraph (Qt lays it out as one; toPlainText gives "\n")


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


@dataclass(frozen=True)
class Segment:
    """A stretch of a reply's Markdown: text, or one fenced code block.

    Attributes:
        kind: ``text`` or ``code``; start, end: its ``[start, end)`` in the Markdown.
        content_start: where its text starts (a code block's first code line; ``start`` for text); content: that
            text (the code without its fences and final newline).
        language: a code block's info string; complete: its closing fence arrived.
    """

    kind: str
    start: int
    end: int
    content_start: int
    content: str
    language: str = ""
    complete: bool = True


def segments(markdown: str) -> list[Segment]:
    """Split Markdown at its fenced code blocks (CommonMark: a fence of 3+ backticks or tildes, indented up to 3
    spaces, closed by a fence of the same character at least as long; a fence never closed runs to the end, as
    while a reply streams). Text segments hold everything else; empty ones are left out."""
    if "```" not in markdown and "~~~" not in markdown and "|" not in markdown:  # most replies: one stretch of text
        return [Segment("text", 0, len(markdown), 0, markdown)] if markdown.strip() else []
    result: list[Segment] = []
    text_start = 0
    position = 0
    lines = markdown.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _OPENING_FENCE.match(line)
        if not opening:
            if _starts_table(lines, index) and text_start < position:  # "Here it is:" then a table: a table still
                result.append(Segment("text", text_start, position, text_start, markdown[text_start:position]))
                text_start = position
            position += len(line) + 1
            index += 1
            continue
        fence = opening.group(2)
        if text_start < position and markdown[text_start:position].strip():
            result.append(Segment("text", text_start, position, text_start, markdown[text_start:position]))
        start = position
        content_start = position + len(line) + 1
        position = content_start
        index += 1
        code_lines, complete = [], False
        while index < len(lines):
            closing = lines[index]
            stripped = closing.strip()
            if len(closing) - len(closing.lstrip(" ")) <= 3 and stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                complete = True
                position += len(closing) + 1
                index += 1
                break
            code_lines.append(closing)
            position += len(closing) + 1
            index += 1
        end = min(position, len(markdown))
        code = "\n".join(code_lines)
        result.append(Segment("code", start, end, min(content_start, len(markdown)), code, opening.group(3).strip(), complete))
        text_start = end
    if text_start < len(markdown) and markdown[text_start:].strip():
        result.append(Segment("text", text_start, len(markdown), text_start, markdown[text_start:]))
    return result


def _starts_table(lines: list[str], index: int) -> bool:
    """True when ``lines[index]`` is a table's header row right after a line of text: GitHub's Markdown starts a
    table there, Qt's (md4c) would keep the rows in the paragraph."""
    return (
        index > 0
        and index + 1 < len(lines)
        and "|" in lines[index]
        and bool(lines[index - 1].strip())
        and "|" not in lines[index - 1]
        and bool(_DELIMITER_ROW.match(lines[index + 1]))
    )


def spans_within(spans: list[list[int]], start: int, end: int) -> list[list[int]]:
    """The parts of ``[start, end)`` spans inside ``[start, end)``, shifted to start at 0."""
    return [[max(a, start) - start, min(b, end) - start] for a, b in spans if a < end and b > start]


class TextView(QTextBrowser):
    """A read-only view of Markdown without fenced code (or of plain text) whose height follows its content (it
    never scrolls by itself).

    Attributes:
        blocked_resources: URLs the content asked for and that were refused (images, style sheets...).
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.blocked_resources: list[str] = []
        self._quotes: list[tuple[int, int]] = []  # (block number, quote level) of block-quote blocks
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
        self._theme = ""
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
        key = (text, spans, highlight, plain, theme.current().name)
        if key == (self._markdown, self._spans, self._highlight, self._plain, self._theme) and self._rendered:
            return
        self._markdown, self._spans, self._highlight, self._plain, self._theme = key
        self._rendered = True
        document = self.document()
        self._fitting = False  # one height update at the end, not one per format change
        self._quotes = []
        if plain:
            document.setPlainText(text)
        else:
            markdown = hard_line_breaks(text)
            document.setMarkdown(markdown, MARKDOWN_FEATURES)
            cursor = QTextCursor(document)
            cursor.beginEditBlock()
            self._style_blocks(document, cursor)
            if highlight and self._spans:
                self._apply_highlight(document, cursor, markdown, self._spans)
            cursor.endEditBlock()
        self._fitting = True
        self._fit_height()

    def restyle(self) -> None:
        """Render again in the theme applied now."""
        if self._rendered:
            self._show(self._markdown, self._spans, self._highlight, self._plain)

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
                if fragment.charFormat().background().color() == QColor(theme.current().draft):
                    pieces.append(fragment.text())
                iterator += 1
            block = block.next()
        return pieces

    def _style_blocks(self, document: QTextDocument, cursor: QTextCursor) -> None:
        """Theme colours for inline and indented code, a ruled grid for tables, a bar and muted text for quotes."""
        current = theme.current()
        code = QColor(current.code)
        block = document.begin()
        while block.isValid():
            block_format = block.blockFormat()
            level = block_format.intProperty(QTextFormat.Property.BlockQuoteLevel)
            if block_format.hasProperty(QTextFormat.Property.BlockCodeFence) or block_format.hasProperty(
                QTextFormat.Property.BlockCodeLanguage
            ):
                block_format.setBackground(code)
                cursor.setPosition(block.position())
                cursor.setBlockFormat(block_format)
            elif level > 0:
                self._quotes.append((block.blockNumber(), level))
                block_format.setLeftMargin(QUOTE_INDENT * level)
                cursor.setPosition(block.position())
                cursor.setBlockFormat(block_format)
                cursor.setPosition(block.position() + block.length() - 1, QTextCursor.MoveMode.KeepAnchor)
                quoted = QTextCharFormat()
                quoted.setForeground(QColor(current.muted))
                cursor.mergeCharFormat(quoted)
            iterator = block.begin()
            while not iterator.atEnd():
                fragment = iterator.fragment()
                if fragment.charFormat().fontFixedPitch():
                    cursor.setPosition(fragment.position())
                    cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                    inline = QTextCharFormat()
                    inline.setBackground(code)
                    cursor.mergeCharFormat(inline)
                iterator += 1
            block = block.next()
        for frame in document.rootFrame().childFrames():
            if isinstance(frame, QTextTable):
                _rule_table(frame, QColor(current.table_border))

    @staticmethod
    def _apply_highlight(document: QTextDocument, cursor: QTextCursor, markdown: str, spans: list[list[int]]) -> None:
        fmt = QTextCharFormat()
        fmt.setBackground(QColor(theme.current().draft))
        rendered = document.toPlainText()
        for start, end in draft_ranges(markdown, spans, rendered):
            start, end = qt_positions(rendered, [start, end])  # (code points -> UTF-16 units)
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

    def focusInEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Show the focus ring (:meth:`paintEvent`)."""
        super().focusInEvent(event)
        self.viewport().update()

    def focusOutEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Take the focus ring away."""
        super().focusOutEvent(event)
        self.viewport().update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        """The text, then a bar left of each block quote (one per level), and while the view has the focus (a Tab
        stop: its text is selected with the keyboard) a 2 px ring inside its edge, in the theme's focus colour. A
        style-sheet border would narrow the text by its width; the document's 2 px margin keeps the ring off the
        letters, and an empty reply, with no caret to see, still shows where the focus is."""
        super().paintEvent(event)
        if not self._quotes and not self.hasFocus():
            return
        painter = QPainter(self.viewport())
        if self.hasFocus():
            painter.setPen(QPen(QColor(theme.current().focus), 2))
            painter.drawRect(QRectF(self.viewport().rect()).adjusted(1, 1, -1, -1))
        colour = QColor(theme.current().quote)
        layout = self.document().documentLayout()
        for number, level in self._quotes:
            rect = layout.blockBoundingRect(self.document().findBlockByNumber(number))
            for depth in range(level):
                x = int(rect.left()) + depth * QUOTE_INDENT + 2
                painter.fillRect(x, int(rect.top()), 3, math.ceil(rect.height()), colour)
        painter.end()


def _rule_table(table: QTextTable, border: QColor) -> None:
    """Rule a table's cells with one-pixel lines, pad them, and shade nothing: the header row is bold already."""
    table_format = table.format()
    table_format.setBorder(1)
    table_format.setBorderBrush(border)
    table_format.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
    table_format.setBorderCollapse(True)
    table_format.setCellSpacing(0)
    table_format.setCellPadding(4)
    table.setFormat(table_format)


class MarkdownView(QWidget):
    """A message's text: its Markdown split at fenced code blocks (:func:`segments`), each stretch shown by a
    :class:`TextView` or a :class:`~app.gui.widgets.code_block.CodeBlock`; plain text (user messages) in one
    TextView. Its height is its content's (it never scrolls by itself).

    Streaming updates re-use the segment widgets in place (a reply that opens a code block gains one; nothing is
    rebuilt that did not change).
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.parts: list[TextView | CodeBlock] = []
        self._name = ""
        self._markdown = ""
        self._spans: list[list[int]] = []
        self._highlight = False
        self._plain = False

    @property
    def markdown(self) -> str:
        """The Markdown source shown (the plain text, for :meth:`set_plain_text`)."""
        return self._markdown

    @property
    def blocked_resources(self) -> list[str]:
        """URLs the content asked for and that were refused (images, style sheets...), of every text part."""
        return [url for part in self.parts if isinstance(part, TextView) for url in part.blocked_resources]

    def set_accessible_name(self, name: str) -> None:
        """Name the text for screen readers (each text part takes it; code blocks are named by their language)."""
        self.setAccessibleName(name)
        self._name = name
        for part in self.text_views():
            part.setAccessibleName(name)

    def code_blocks(self) -> list[CodeBlock]:
        """The code blocks shown, in order."""
        return [part for part in self.parts if isinstance(part, CodeBlock)]

    def text_views(self) -> list[TextView]:
        """The text parts shown, in order."""
        return [part for part in self.parts if isinstance(part, TextView)]

    def set_markdown(self, text: str, draft_spans: list[list[int]] | None = None, highlight: bool = False) -> None:
        """Render ``text``; with ``highlight``, colour the characters of ``draft_spans`` (``[start, end)`` offsets of
        ``text``: accepted draft tokens), in text and code alike."""
        spans = [list(span) for span in draft_spans or []]
        self._markdown, self._spans, self._highlight, self._plain = text, spans, highlight, False
        parts = []
        for segment in segments(text):
            within = spans_within(spans, segment.content_start, segment.content_start + len(segment.content))
            parts.append((segment.kind, segment.content, within, segment.language, segment.complete))
        self._show_parts(parts or [("text", "", [], "", True)], plain=False)

    def set_plain_text(self, text: str) -> None:
        """Show ``text`` as typed: no Markdown, every line break kept (user messages), but its fenced code blocks
        shown as code blocks, as a reply's are."""
        self._markdown, self._spans, self._highlight, self._plain = text, [], False, True
        parts = [
            (s.kind, s.content.strip("\n") if s.kind == "text" else s.content, [], s.language, s.complete)
            for s in segments(text)
        ]
        self._show_parts(parts or [("text", text, [], "", True)], plain=True)

    def set_highlight(self, highlight: bool) -> None:
        """Turn draft-token highlighting on or off (plain text is never highlighted)."""
        if highlight != self._highlight and not self._plain:
            self.set_markdown(self._markdown, self._spans, highlight)

    def restyle(self) -> None:
        """Render again in the theme applied now."""
        for part in self.parts:
            if isinstance(part, TextView):
                part.restyle()
        if self.code_blocks() and self._plain:
            self.set_plain_text(self._markdown)
        elif self.code_blocks():
            self.set_markdown(self._markdown, self._spans, self._highlight)

    def highlighted_text(self) -> list[str]:
        """The rendered pieces currently coloured as accepted draft tokens (for tests and accessibility)."""
        return [piece for part in self.text_views() for piece in part.highlighted_text()]

    def toPlainText(self) -> str:  # noqa: N802 - QTextEdit's name, for callers of either
        """The text shown, its parts separated by line breaks."""
        return "\n".join(part.toPlainText() if isinstance(part, TextView) else part.code for part in self.parts)

    def _show_parts(self, parts: list[tuple], plain: bool) -> None:
        for index, (kind, content, spans, language, complete) in enumerate(parts):
            widget = self.parts[index] if index < len(self.parts) else None
            wanted = TextView if kind == "text" else CodeBlock
            if not isinstance(widget, wanted):
                if widget is not None:
                    self._retire(index)
                widget = wanted()
                if self._name and kind == "text":
                    widget.setAccessibleName(self._name)
                self.parts.insert(index, widget)
                self._layout.insertWidget(index, widget)
            if kind == "code":
                widget.set_code(content, language, complete, spans, self._highlight)
            elif plain:
                widget.set_plain_text(content)
            else:
                widget.set_markdown(content, spans, self._highlight)
        while len(self.parts) > len(parts):
            self._retire(len(parts))

    def _retire(self, index: int) -> None:
        widget = self.parts.pop(index)
        self._layout.removeWidget(widget)
        widget.hide()
        widget.deleteLater()

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Let the chat's scroll area scroll."""
        event.ignore()
