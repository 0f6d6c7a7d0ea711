"""A fenced code block of a reply: its language, a Copy button, the code highlighted by pygments, and a horizontal
scroll bar instead of cut lines.

The language is the fence's info string (```` ```python ````) when pygments knows it, else guessed from the code
among ``COMMON_LANGUAGES`` (:func:`guess_lexer`, once the block is complete: a streaming block is guessed only when it
is shown whole, so that guessing never runs at each refresh). A lexer's first use compiles its regular expressions
(python's 30-60 ms, css's 50 ms: a stall if the window opens a chat with code). :func:`warm_up` prepares the lexers
of ``COMMON_LANGUAGES`` on the inference thread after the model loads (:func:`warm_up_in`), and no block is guessed
until it is done, so the window never waits for it. Token colours come from the theme's
pygments style (``app.gui.theme``), each brought to the theme's minimum contrast against the code background.
Accepted draft tokens are highlighted over the syntax colours, as in the rest of the reply, but never a line's
indentation (a drafted token often starts with a new line's spaces: a newcomer read the painted blocks of
indentation as part of the syntax highlighting).
"""

from __future__ import annotations

import html
import threading
from collections.abc import Awaitable, Callable
from functools import lru_cache

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QFontDatabase, QGuiApplication, QPalette, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QTextEdit, QToolButton, QVBoxLayout

from .. import theme
from .copy_feedback import CopiedFeedback
from .utf16 import qt_positions

#: Longest code guessed at (guessing costs about a millisecond per kilobyte per lexer tried).
GUESS_LIMIT = 4000
#: Fence languages whose lexers :func:`warm_up` prepares (the languages chat replies use most).
COMMON_LANGUAGES = (
    "python", "javascript", "typescript", "bash", "json", "html", "css", "c", "cpp", "java", "rust", "go", "sql", "yaml",
)
#: Set once :func:`warm_up` has prepared the common lexers and styles: guessing a language is then a few milliseconds.
WARM = threading.Event()


def warm_up() -> None:
    """Prepare the lexers of ``COMMON_LANGUAGES`` (:func:`lexer_for` keeps them, their regular expressions compiled)
    and the themes' token colours (0.11 s on 2 quiet Xeon cores); call it off the GUI thread, through :func:`warm_up_in`.

    It imports the modules of those lexers only (19 of pygments' ~250). Until 2026-12-05 it ran a pygments guess,
    which imports every lexer module (248 modules: 0.22 s quiet, 2.6 s on the loaded machine): Python work taking the GIL in turns
    with the window right after the model loads. ``tools/gil_watch.py model_load`` on that Xeon, quiet: the longest
    hold 16.4, 13.3 and 6.4 ms in three runs, the two longest at those module loads and their regular expressions
    (``tests/gui/test_gil_holds.py`` failed a fresh-clone run at 16.4 ms: a CPU 3x slower would stall ~50 ms);
    with this warm-up 10.1 and 4.4 ms (the longest an OpenVINO graph walk of the kernels' rewrite)."""
    for language in COMMON_LANGUAGES:
        lexer_for(language)
    for current in (theme.LIGHT, theme.DARK):
        _token_styles(current.pygments, current.code)  # (cached: each token's colour made readable once)
    WARM.set()


async def warm_up_in(run: Callable[[Callable[[], None]], Awaitable[None]]) -> None:
    """Run :func:`warm_up` with ``run`` (nothing when it ran already): the inference worker's ``run``, whose one
    thread runs one job at a time.

    Its work is Python code, which passes the GIL to the GUI thread every few milliseconds, unless the thread holding
    it is itself waiting for a CPU: run in a thread of its own beside a model load, OpenVINO's compile threads kept it
    off both cores while it held the GIL, and the window stalled for 50-80 ms at a time (measured on 2 AVX2 cores).
    Queued behind the model load on the inference thread, it never overlaps OpenVINO's work."""
    if not WARM.is_set():
        await run(warm_up)


@lru_cache(maxsize=64)
def lexer_for(language: str):
    """The pygments lexer of a fence's info string (its first word, e.g. ``python`` of ``python title="x"``), or
    None when pygments does not know it."""
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    name = language.split()[0].strip("{}.") if language.split() else ""
    if not name:
        return None
    try:
        return get_lexer_by_name(name.lower(), stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def guess_lexer(code: str):
    """The lexer of ``COMMON_LANGUAGES`` whose pygments ``analyse_text`` rates ``code`` (its first GUESS_LIMIT
    characters) highest (the first of equals, in ``COMMON_LANGUAGES``' order), or None when none rates it above 0.

    pygments' own ``guess_lexer`` rates every lexer it has, which imports all ~250 lexer modules on first use (see
    :func:`warm_up`); chat replies' code is in these languages nearly always, and an unknown one is shown plain."""
    sample = code[:GUESS_LIMIT]
    best, best_rating = None, 0.0
    for language in COMMON_LANGUAGES:
        lexer = lexer_for(language)
        rating = lexer.analyse_text(sample) if lexer is not None else 0.0
        if rating > best_rating:
            best, best_rating = lexer, rating
    return best


@lru_cache(maxsize=4)
def _token_styles(style_name: str, background: str) -> dict:
    """Token type -> (colour, bold, italic) of a pygments style, colours made readable on ``background``."""
    from pygments.styles import get_style_by_name

    style = get_style_by_name(style_name)
    styles = {}
    for token, _ in style:
        found = style.style_for_token(token)
        colour = theme.readable(f"#{found['color']}", background) if found["color"] else ""
        styles[token] = (colour, found["bold"], found["italic"])
    return styles


def without_indentation(code: str, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``code[start:end]`` (code-point offsets) that are not a line's indentation (the spaces and tabs
    that start a line), as ``[start, end)`` ranges in order; none for a span of indentation only."""
    parts = []
    line_start = code.rfind("\n", 0, start) + 1
    position = start
    while position < end:
        line_end = code.find("\n", position)
        line_end = end if line_end < 0 or line_end >= end else line_end + 1  # (the newline itself is no indentation)
        indentation_end = line_start
        while indentation_end < len(code) and code[indentation_end] in " \t":
            indentation_end += 1
        part_start = max(position, indentation_end)
        if part_start < line_end:
            parts.append((part_start, line_end))
        position = line_start = line_end
    return parts


def highlighted_html(code: str, lexer, current: theme.Theme) -> str:
    """``code`` as HTML spans coloured by ``lexer``'s tokens in the theme's style (plain escaped text without a
    lexer); the plain text of the result is ``code`` exactly."""
    if lexer is None:
        return html.escape(code)
    styles = _token_styles(current.pygments, current.code)
    pieces = []
    for _, token, value in lexer.get_tokens_unprocessed(code):
        while token not in styles and token.parent is not None:
            token = token.parent
        colour, bold, italic = styles.get(token, ("", False, False))
        text = html.escape(value)
        if colour or bold or italic:
            css = (f"color:{colour};" if colour else "") + ("font-weight:600;" if bold else "") + ("font-style:italic;" if italic else "")
            text = f'<span style="{css}">{text}</span>'
        pieces.append(text)
    return "".join(pieces)


class _CodeText(QTextEdit):
    """The code itself: read-only, never wrapped, as tall as its lines, scrolled sideways when wider."""

    def __init__(self):
        super().__init__()
        self.setReadOnly(True)
        self.setLineWrapMode(QTextEdit.LineWrapMode.NoWrap)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Base, QColor(0, 0, 0, 0))  # the block's code background shows through
        self.setPalette(palette)
        self.document().setDocumentMargin(6)
        self.document().setUndoRedoEnabled(False)
        self.horizontalScrollBar().rangeChanged.connect(lambda *_: self.fit_height())

    def fit_height(self) -> None:
        bar = self.horizontalScrollBar()
        extra = bar.sizeHint().height() if bar.maximum() > 0 else 0
        height = int(self.document().size().height()) + extra + 2
        if height != self.height():
            self.setFixedHeight(height)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(200, self.height())

    def wheelEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Sideways wheels scroll the code; the usual wheel scrolls the chat."""
        if event.angleDelta().x() and not event.angleDelta().y():
            super().wheelEvent(event)
        else:
            event.ignore()


class CodeBlock(QFrame):
    """One fenced code block (object name ``codeBlock``).

    Attributes:
        code: the code shown; language: the fence's info string ("" if none); lexer_name: the language pygments
        highlights it as ("" for none); text: the code's view; copy_button: copies the code.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.code = ""
        self.language = ""
        self.lexer_name = ""
        self._lexer = None
        self._guessed = False
        self._shown: tuple | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(1, 1, 1, 1)
        layout.setSpacing(0)
        header = QHBoxLayout()
        header.setContentsMargins(8, 2, 2, 0)
        self.language_label = QLabel()
        self.language_label.setObjectName("codeLanguage")
        header.addWidget(self.language_label)
        header.addStretch(1)
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy code")
        self.copy_button.setObjectName("copyCode")
        self.copy_button.setAutoRaise(True)
        self.copy_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_button.setToolTip("Copy this code block to the clipboard")
        self.copy_button.setAccessibleName("Copy code block")
        self.copy_button.clicked.connect(self.copy)
        self._copied = CopiedFeedback(self.copy_button)
        header.addWidget(self.copy_button)
        layout.addLayout(header)
        self.text = _CodeText()
        layout.addWidget(self.text)

    def set_code(self, code: str, language: str, complete: bool, spans: list[list[int]], highlight: bool) -> None:
        """Show ``code`` (of a fence with info string ``language``; ``complete``: its closing fence arrived) with
        the ``[start, end)`` ranges of ``spans`` marked as accepted drafts when ``highlight``."""
        if language != self.language:
            self.language, self._guessed = language, False
            self._lexer = lexer_for(language)
        if self._lexer is None and complete and not self._guessed and code.strip() and WARM.is_set():
            self._guessed = True
            self._lexer = guess_lexer(code)
        current = theme.current()
        key = (code, self._lexer, current.name, tuple(map(tuple, spans)), highlight)
        if key == self._shown:
            return
        self._shown = key
        self.code = code
        self.lexer_name = self._lexer.name if self._lexer is not None else ""
        self.language_label.setText(self.lexer_name or (language.split()[0] if language.split() else "") or "code")
        self.text.setAccessibleName(f"Code, {self.language_label.text()}")
        sideways = self.text.horizontalScrollBar().value()  # kept when the theme or the streamed code changes
        document = self.text.document()
        document.setHtml(f'<pre style="margin:0; color:{current.text};">{highlighted_html(code, self._lexer, current)}</pre>')
        if highlight and spans:
            cursor = QTextCursor(document)
            fmt = QTextCharFormat()
            fmt.setBackground(QColor(current.draft))
            for span in spans:
                for part in without_indentation(code, *span):
                    start, end = qt_positions(code, list(part))  # (code points -> UTF-16 units)
                    cursor.setPosition(start)
                    cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
                    cursor.mergeCharFormat(fmt)
        self.text.fit_height()
        self.text.horizontalScrollBar().setValue(sideways)

    def copy(self) -> None:
        """Copy the code (without its fences) to the clipboard; the Copy code button says "Copied" for a moment."""
        QGuiApplication.clipboard().setText(self.code)
        self._copied.flash()
