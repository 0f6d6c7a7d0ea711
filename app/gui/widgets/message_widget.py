"""One message of the chat: a bubble with the text (replies in Markdown, user messages as typed), a statistics
footer and its actions.

User messages offer Copy and Edit (edit the text and resend it); a long one (a paste) shows its start and "Show
all" (its whole text is laid out only when asked: a whole 197 KB bubble costs Qt ~90 MB). Assistant replies offer
Copy and, on the last reply, Regenerate. A comparison reply shows the autoregressive and the speculative text side by side.
A message whose row cannot be read (``Message.unreadable``) shows a placeholder saying why; statistics that are
not what SpecChat writes (``message_fields.stats_problem``) are drawn as none.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..history_rows import Message
from ..message_fields import spans_problem, stats_problem
from ..reply_format import MODE_NAMES, can_continue, footer_text, run_metrics_text, second_run_name
from .copy_feedback import CopiedFeedback
from .elided_label import PartsLabel
from .markdown_view import MarkdownView
from .prompt_progress import PromptProgressView

RENDER_INTERVAL_MS = 60  # a streaming reply re-renders its Markdown at most this often
# A user message longer than this shows its first SHOWN_OF_LONG_MESSAGE characters and "Show all": Qt's layout of a
# whole 197 KB paste costs a warm window ~93 MB, collapsed ~25 MB (measured offscreen at 1366x768, 2026-12-05).
LONG_MESSAGE_CHARS = 6_000
SHOWN_OF_LONG_MESSAGE = 2_000
#: Lines the editor of a user message shows at least; it grows with its text up to ``EDIT_MAX_PX`` pixels, then scrolls.
EDIT_MIN_LINES = 2
EDIT_MAX_PX = 320
#: Continue's tooltip by the reply's state: stopped at the length limit (``complete``), interrupted by a crash
#: (``streaming``), stopped by the user (``stopped``).
CONTINUE_TIPS = {
    "complete": "Write more of this reply: it stopped at the longest reply allowed (max new tokens)",
    "streaming": "Write more of this reply: SpecChat closed while it was being generated",
    "stopped": "Write more of this reply: it was stopped (Continue goes on from the text kept)",
}


class _Column(QWidget):
    """One side of a comparison: a heading, the text, its metrics."""

    def __init__(self, title: str, parent=None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.title = PartsLabel()  # Auto's title says what it did: broken into lines, never wider than the column
        self.title.setText(title)
        self.title.setObjectName("columnTitle")
        self.view = MarkdownView()
        self.view.set_accessible_name(f"{title} reply")
        # broken between its parts, like the bubble's footer: a word-wrapped label's height for the column's width
        # was not the bubble's, whose height (its size hint) is the label's at a wider width, and at 1093 px wide its
        # third line was drawn over the reply's last line
        self.metrics = PartsLabel()
        self.metrics.setObjectName("footer")
        layout.addWidget(self.title)
        layout.addWidget(self.view)
        layout.addWidget(self.metrics)
        layout.addStretch(1)


class _EditBox(QPlainTextEdit):
    """The editor of a user message: Enter adds a line, Ctrl+Enter saves and resends, Tab moves on to Cancel and
    Save, Esc cancels the edit (while a reply streams the window's Stop takes Esc first). It is as tall as its text,
    wrapped at its width (``EDIT_MIN_LINES`` lines at least, ``EDIT_MAX_PX`` pixels at most): a one-line message's
    editor stood 190 px tall (newcomer trial).

    Signals:
        cancelled(): Esc was pressed.
        submitted(): Ctrl+Enter was pressed (a newcomer found no key that saved an edit).
    """

    cancelled = Signal()
    submitted = Signal()

    def __init__(self):
        super().__init__()
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)  # (its height: sizeHint's)
        self.textChanged.connect(self.updateGeometry)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """The base class's width; the height, pixels, of the text wrapped at the viewport's width, within bounds."""
        hint = super().sizeHint()
        metrics, margin = self.fontMetrics(), round(self.document().documentMargin())
        width = max(1, self.viewport().width() - 2 * margin)
        text = self.toPlainText() or " "
        wrapped = metrics.boundingRect(QRect(0, 0, width, 1 << 20), Qt.TextFlag.TextWordWrap, text).height()
        margins = self.contentsMargins() + self.viewportMargins()
        frame = 2 * self.frameWidth() + margins.top() + margins.bottom()
        text_px = max(wrapped, EDIT_MIN_LINES * metrics.lineSpacing())
        least = self.minimumSizeHint().height()  # (Qt's: room for a vertical scroll bar, about four lines)
        return QSize(hint.width(), max(least, min(EDIT_MAX_PX, text_px + 2 * margin + frame)))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        """A new width wraps the text anew: its height follows."""
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        """Esc cancels, Ctrl+Enter submits; the other keys edit."""
        if event.key() == Qt.Key.Key_Escape and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            self.cancelled.emit()
        elif event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier == Qt.KeyboardModifier.ControlModifier:
            self.submitted.emit()
        else:
            super().keyPressEvent(event)


class MessageWidget(QFrame):
    """A chat bubble for one :class:`~app.gui.history_rows.Message`.

    Signals:
        edit_submitted(message_id, text): the user edited their message and wants it resent (as a new version).
        regenerate_requested(message_id): the user wants a new version of this reply.
        continue_requested(message_id): the user wants more of this reply, which stopped at its length limit, was
            interrupted or was stopped (``reply_format.can_continue``).
        version_chosen(message_id): the user chose another version of this message (``Message.versions``) with
            the "‹ 2/3 ›" switch in its header.
    """

    edit_submitted = Signal(int, str)
    regenerate_requested = Signal(int)
    version_chosen = Signal(int)
    continue_requested = Signal(int)

    def __init__(self, message: Message, highlight: bool = True, parent=None):
        super().__init__(parent)
        self.message = message
        self._highlight = highlight
        self._live = False
        self._render_pending = False
        self._busy = False
        self._last = False
        self.setObjectName("userBubble" if message.role == "user" else "assistantBubble")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)

        header = QHBoxLayout()
        header.setSpacing(4)
        self.role_label = QLabel("You" if message.role == "user" else "Assistant")
        self.role_label.setObjectName("roleLabel")
        header.addWidget(self.role_label)
        self.version_switch: QWidget | None = None  # "‹ 2/3 ›", built for messages with several versions
        header.addStretch(1)
        self.copy_button = self._tool_button("Copy", "Copy this message's text (Markdown) to the clipboard")
        self.copy_button.clicked.connect(self.copy_text)
        self._copied = CopiedFeedback(self.copy_button)
        header.addWidget(self.copy_button)
        self._header = header
        self._edit_button: QToolButton | None = None
        self._regenerate_button: QToolButton | None = None
        self._continue_button: QPushButton | None = None
        self.show_all_button: QPushButton | None = None  # a long user message's "Show all", built on first use
        self._expanded = False
        layout.addLayout(header)

        self.body = MarkdownView()
        self.body.set_accessible_name("Your message" if message.role == "user" else "Reply")
        layout.addWidget(self.body)

        self._layout = layout
        self.compare_box: QWidget | None = None  # built on first use (most messages never need it)
        self.prompt_progress: PromptProgressView | None = None  # a long prompt's reading, built on first use
        self.editor: QPlainTextEdit | None = None
        self.edit_bar: QWidget | None = None

        self.footer = PartsLabel()  # broken between its parts: a word-wrapped label would cost each bubble a second layout pass
        self.footer.setObjectName("footer")
        layout.addWidget(self.footer)

        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.timeout.connect(self._render)
        self._render()

    def _ensure_compare(self) -> None:
        if self.compare_box is not None:
            return
        self.compare_box = QWidget()
        compare_layout = QHBoxLayout(self.compare_box)
        compare_layout.setContentsMargins(0, 0, 0, 0)
        compare_layout.setSpacing(12)
        self.ar_column = _Column(MODE_NAMES["ar"])
        self.spec_column = _Column(MODE_NAMES["spec"])
        separator = QFrame()
        separator.setFrameShape(QFrame.Shape.VLine)
        separator.setObjectName("separator")
        compare_layout.addWidget(self.ar_column, 1)
        compare_layout.addWidget(separator)
        compare_layout.addWidget(self.spec_column, 1)
        self._layout.insertWidget(self._layout.indexOf(self.body) + 1, self.compare_box)

    def _ensure_editor(self) -> None:
        if self.editor is not None:
            return
        self.editor = _EditBox()
        self.editor.cancelled.connect(self._cancel_edit_by_key)
        self.editor.setAccessibleName("Edit your message")
        self.edit_bar = QWidget()
        edit_bar = QHBoxLayout(self.edit_bar)
        edit_bar.setContentsMargins(0, 0, 0, 0)
        edit_bar.addStretch(1)
        self.cancel_edit_button = QPushButton("Cancel")
        self.cancel_edit_button.clicked.connect(self.stop_editing)
        self.resend_button = QPushButton("Save && resend")
        self.resend_button.setDefault(True)
        self.resend_button.clicked.connect(self._submit_edit)
        self.editor.submitted.connect(self.resend_button.click)  # (a disabled button ignores it: a reply streams)
        edit_bar.addWidget(self.cancel_edit_button)
        edit_bar.addWidget(self.resend_button)
        index = self._layout.indexOf(self.footer)
        self._layout.insertWidget(index, self.editor)
        self._layout.insertWidget(index + 1, self.edit_bar)
        self.resend_button.setEnabled(not self._busy)

    @property
    def edit_button(self) -> QToolButton:
        """Edit (user messages); created on first use, like Regenerate: most bubbles never need them."""
        if self._edit_button is None:
            self._edit_button = self._tool_button(
                "Edit", "Edit this message and resend it (the later messages stay in its earlier version: ‹ › switches)"
            )
            self._edit_button.clicked.connect(self.start_editing)
            self._header.addWidget(self._edit_button)
            self._edit_button.setVisible(self.message.role == "user")
        return self._edit_button

    @property
    def regenerate_button(self) -> QToolButton:
        """Regenerate (the last reply)."""
        if self._regenerate_button is None:
            self._regenerate_button = self._tool_button("Regenerate", "Generate this reply again")
            self._regenerate_button.clicked.connect(lambda: self.regenerate_requested.emit(self.message.id))
            self._header.addWidget(self._regenerate_button)
            self._regenerate_button.setVisible(False)  # set_actions shows it on the last reply
        return self._regenerate_button

    @property
    def continue_button(self) -> QPushButton:
        """Continue (the last reply, when Continue can write more of it: ``reply_format.can_continue``)."""
        if self._continue_button is None:
            self._continue_button = QPushButton("Continue")
            self._continue_button.setObjectName("continueButton")
            self._continue_button.clicked.connect(lambda: self.continue_requested.emit(self.message.id))
            self._layout.addWidget(self._continue_button, 0, Qt.AlignmentFlag.AlignLeft)
            self._continue_button.setVisible(False)
        return self._continue_button

    @staticmethod
    def _tool_button(text: str, tip: str) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setAutoRaise(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        return button

    # --- state ------------------------------------------------------------------------------------

    def set_message(self, message: Message, live: bool = False) -> None:
        """Show new content; a ``live`` (streaming) update is rendered at most every 60 ms."""
        self.message = message
        self._live = live
        if live:
            if not self._render_timer.isActive():
                self._render_timer.start(RENDER_INTERVAL_MS)
        else:
            self._render_timer.stop()
            self._render()

    def flush(self) -> None:
        """Render a pending live update now."""
        if self._render_timer.isActive():
            self._render_timer.stop()
            self._render()

    def set_highlight(self, highlight: bool) -> None:
        """Turn the highlighting of accepted draft tokens on or off."""
        self._highlight = highlight
        self.body.set_highlight(highlight)
        if self.compare_box is not None:
            self.spec_column.view.set_highlight(highlight)

    def restyle(self) -> None:
        """Render again in the theme applied now."""
        self.body.restyle()
        if self.compare_box is not None:
            self.ar_column.view.restyle()
            self.spec_column.view.restyle()

    def _step_version(self, step: int) -> None:
        versions = self.message.versions
        index = versions.index(self.message.id) + step if self.message.id in versions else -1
        if 0 <= index < len(versions):
            self.version_chosen.emit(versions[index])

    def _ensure_version_switch(self) -> None:
        if self.version_switch is not None:
            return
        self.version_switch = QWidget()
        layout = QHBoxLayout(self.version_switch)
        layout.setContentsMargins(6, 0, 0, 0)
        layout.setSpacing(0)
        self.previous_version = self._tool_button("‹", "Show the previous version of this message")
        self.previous_version.setAccessibleName("Previous version")
        self.previous_version.clicked.connect(lambda: self._step_version(-1))
        self.version_label = QLabel()
        self.version_label.setObjectName("footer")
        self.next_version = self._tool_button("›", "Show the next version of this message")
        self.next_version.setAccessibleName("Next version")
        self.next_version.clicked.connect(lambda: self._step_version(1))
        for widget in (self.previous_version, self.version_label, self.next_version):
            layout.addWidget(widget)
        self._header.insertWidget(1, self.version_switch)

    def _show_versions(self) -> None:
        versions = self.message.versions
        several = len(versions) > 1 and not self._live
        if several:
            self._ensure_version_switch()
        if self.version_switch is not None:
            self.version_switch.setVisible(several)
        if several:
            self.version_label.setText(f"{self.message.version}/{len(versions)}")
            self.version_label.setAccessibleName(f"Version {self.message.version} of {len(versions)}")
            self.previous_version.setEnabled(not self._busy and self.message.version > 1)
            self.next_version.setEnabled(not self._busy and self.message.version < len(versions))

    def set_actions(self, busy: bool, last: bool) -> None:
        """Enable actions: Edit, Regenerate and the version switch are off while a reply streams; Regenerate is on
        the last reply only."""
        self._busy, self._last = busy, last
        self._show_versions()
        # nothing to copy in a reply stopped before its first token (a newcomer trial's Copy said "Copied" for it)
        self.copy_button.setVisible(bool(self.text()))
        if self.message.role == "assistant" and not self._live and not self.message.unreadable:
            stats = {} if stats_problem(self.message.stats or {}) else self.message.stats
            self.footer.setText(footer_text(stats, self.message.state, last))  # (Continue is on the last reply only)
        if self.message.role == "user":
            self.edit_button.setEnabled(not busy and not self.editing)
        can_regenerate = self.message.role == "assistant" and last and not self._live
        continues = can_regenerate and can_continue(self.message.stats, self.message.state)
        if continues or self._continue_button is not None:
            self.continue_button.setVisible(continues)
            self.continue_button.setEnabled(not busy)
            self.continue_button.setToolTip(CONTINUE_TIPS.get(self.message.state, ""))
        if can_regenerate or self._regenerate_button is not None:
            self.regenerate_button.setVisible(can_regenerate)
            self.regenerate_button.setEnabled(not busy)
        if self.editor is not None:
            self.resend_button.setEnabled(not busy)

    @property
    def is_compare(self) -> bool:
        """True for a comparison reply (two texts side by side)."""
        return "compare" in (self.message.stats or {})

    def text(self) -> str:
        """The message's Markdown text, which Copy copies: a comparison's is its second run's (the right column), or
        the plain run's where the second wrote nothing (a Compare stopped during its plain run: a newcomer trial's
        had no Copy, its plain column full of text); "" for a message with none."""
        stats = self.message.stats or {}
        if self.message.content or "compare" not in stats or stats_problem(stats):
            return self.message.content
        return (stats["compare"].get("ar") or {}).get("text", "")

    def copy_text(self) -> None:
        """Copy the message text (:meth:`text`) to the clipboard; its Copy button says "Copied" for a moment."""
        QGuiApplication.clipboard().setText(self.text())
        self._copied.flash()

    # --- editing ----------------------------------------------------------------------------------

    def start_editing(self) -> None:
        """Replace the text by an editor (user messages)."""
        if self.message.role != "user":
            return
        self._ensure_editor()
        self.editor.setPlainText(self.message.content)
        self.body.setVisible(False)
        if self.show_all_button is not None:
            self.show_all_button.setVisible(False)
        self.editor.setVisible(True)
        self.edit_bar.setVisible(True)
        self.edit_button.setEnabled(False)
        self.editor.setFocus()

    def stop_editing(self) -> None:
        """Leave the editor without changes."""
        if self.editor is None:
            return
        self.editor.setVisible(False)
        self.edit_bar.setVisible(False)
        self.body.setVisible(True)
        if self.show_all_button is not None:
            self.show_all_button.setVisible(len(self.message.content) > LONG_MESSAGE_CHARS)
        self.edit_button.setEnabled(not self._busy)

    def _cancel_edit_by_key(self) -> None:
        self.stop_editing()
        self.edit_button.setFocus(Qt.FocusReason.ShortcutFocusReason)  # back where the edit started

    @property
    def editing(self) -> bool:
        """True while the editor is shown."""
        return self.edit_bar is not None and self.edit_bar.isVisibleTo(self)

    def _submit_edit(self) -> None:
        text = self.editor.toPlainText()
        if not text.strip():
            self.editor.setPlaceholderText("A message cannot be empty")
            return
        self.stop_editing()
        self.edit_submitted.emit(self.message.id, text)

    # --- rendering --------------------------------------------------------------------------------

    def _render(self) -> None:
        message = self.message
        stats = message.stats or {}
        if stats_problem(stats):
            stats = {}
        spans = [] if spans_problem(message.draft_spans, len(message.content)) else message.draft_spans
        if message.unreadable:
            if self.compare_box is not None:
                self.compare_box.setVisible(False)
            self.body.setVisible(True)
            self.body.set_markdown(
                f"*Unreadable message: {message.unreadable}. It is kept in the history file as it is.*"
            )
            self.footer.setVisible(False)
            self.set_actions(self._busy, self._last)
            return
        if "compare" in stats:
            compare = stats["compare"]
            self._ensure_compare()
            self.body.setVisible(False)
            self.compare_box.setVisible(True)
            ar = compare.get("ar") or {}
            spec = compare.get("spec") or {}
            self.ar_column.view.set_markdown(ar.get("text", ""))
            self.ar_column.metrics.setText(run_metrics_text(ar) if "tokens_per_s" in ar else ar.get("live", ""))
            self.spec_column.title.setText(second_run_name(compare))
            self.spec_column.view.set_markdown(message.content, spans, self._highlight)
            self.spec_column.metrics.setText(run_metrics_text(spec) if "tokens_per_s" in spec else spec.get("live", ""))
        else:
            if self.compare_box is not None:
                self.compare_box.setVisible(False)
            if not self.editing:
                self.body.setVisible(True)
            if message.role == "user":
                self.body.set_plain_text(self._user_text())  # as typed: no Markdown, line breaks kept
            else:
                self.body.set_markdown(message.content, spans, self._highlight)
        self._show_prompt_progress(stats.get("prefill") if self._live and message.role == "assistant" else None)
        if message.role == "assistant":
            if self._live:
                live = stats.get("live", "")
                if "compare" in stats and stats["compare"].get("speedup") is None:
                    live = live or "Comparing…"
                self.footer.setText(live or "Generating…")
            self.footer.setVisible(True)
        else:
            self.footer.setVisible(False)
        self.set_actions(self._busy, self._last)

    def _user_text(self) -> str:
        """A user message's text as shown: all of it, or the start of a long one (``LONG_MESSAGE_CHARS``) with
        "Show all" under it until that is pressed."""
        content = self.message.content
        long = len(content) > LONG_MESSAGE_CHARS
        if long and self.show_all_button is None:
            self.show_all_button = QPushButton()
            self.show_all_button.setObjectName("showAllButton")
            self.show_all_button.clicked.connect(self._toggle_expanded)
            index = self._layout.indexOf(self.body) + 1
            self._layout.insertWidget(index, self.show_all_button, 0, Qt.AlignmentFlag.AlignLeft)
        if self.show_all_button is not None:
            self.show_all_button.setVisible(long and not self.editing)
            self.show_all_button.setText("Show less" if self._expanded else f"Show all ({len(content):,} characters)")
        if not long or self._expanded:
            return content
        return content[:SHOWN_OF_LONG_MESSAGE].rstrip() + " …"

    def _toggle_expanded(self) -> None:
        self._expanded = not self._expanded
        self._render()

    def _show_prompt_progress(self, progress) -> None:
        """Show the bar of a prompt being read (a streaming reply's ``stats["prefill"]``), or hide it."""
        if isinstance(progress, dict) and self.prompt_progress is None:
            self.prompt_progress = PromptProgressView()
            self._layout.insertWidget(self._layout.indexOf(self.body), self.prompt_progress)
        if self.prompt_progress is not None:
            shown = isinstance(progress, dict) and self.prompt_progress.show_progress(progress)
            self.prompt_progress.setVisible(shown)
            if shown and not self.message.content:
                self.body.setVisible(False)  # (empty until the first token: no blank line between bar and footer)
