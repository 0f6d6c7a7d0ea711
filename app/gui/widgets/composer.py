"""The message box under the chat: Enter (or Ctrl+Enter) sends, Shift+Enter adds a line, Tab and Shift+Tab move the
focus to the next or previous control (Ctrl+Tab types a tab); Send, Compare and Stop buttons; above them one line
for a notice, kept while none shows."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout

from .setting_row import FieldError

#: How long a hint about a send the box refused ("Type a message first.") stays, in milliseconds, unless the user
#: types, shows another chat or another version of a message first (newcomer trial: it stayed on after that).
HINT_MS = 4000


class ComposerEdit(QPlainTextEdit):
    """A text box where Enter and Ctrl+Enter submit, Shift+Enter inserts a new line, Tab leaves (Ctrl+Tab types a
    tab character)."""

    submitted = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTabChangesFocus(True)

    def event(self, event) -> bool:
        """Ctrl+Tab types a tab (before Qt takes it to move the focus)."""
        if event.type() == QEvent.Type.KeyPress and event.key() == Qt.Key.Key_Tab and event.modifiers() == Qt.KeyboardModifier.ControlModifier:
            self.insertPlainText("\t")
            return True
        return super().event(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        """Enter or Ctrl+Enter submits (Ctrl+Shift+Enter is Compare's shortcut); everything else edits."""
        modifiers = event.modifiers() & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.ControlModifier)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and modifiers in (
            Qt.KeyboardModifier.NoModifier, Qt.KeyboardModifier.ControlModifier
        ):
            self.submitted.emit()
            return
        super().keyPressEvent(event)


def compare_tip(words: str = "plain vs Auto decoding") -> str:
    """The Compare button's tooltip for what it runs (``app.gui.model_choice.compare_words``)."""
    first, second = words.split(" vs ", 1)
    return (f"Run this message with {first} decoding, then with {second.removesuffix(' decoding')}, with the same "
            "settings and seed, and show both replies side by side (Ctrl+Shift+Enter)")  # fmt: skip


class Composer(QFrame):
    """Where the user writes.

    Signals:
        send_requested(text), compare_requested(text): the user asked to send the text (normally, or as an
            autoregressive vs speculative comparison).
        stop_requested(): the Stop button.
    """

    send_requested = Signal(str)
    compare_requested = Signal(str)
    stop_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("composer")
        self._generating = False
        self._replying_in = ""  # the title of the chat whose reply streams (set_generating)
        self._blocked: str | None = None
        self._compare_off: str | None = None
        self._hint_timer = QTimer(self)
        self._hint_timer.setSingleShot(True)
        self._hint_timer.timeout.connect(self.withdraw_hint)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 8, 16, 10)
        layout.setSpacing(6)
        # one line, kept while hidden: a one-line notice appearing never moves the chat; a longer one is wrapped onto
        # the lines it needs, whole (newcomer trial: cut with "…" even at 1920 px, "Fix the settings first: … you
        # typed 999999 (and 1 more field, …"), and the chat gives up those lines while it shows
        self.error_label = FieldError()
        self.error_label.grows = True
        self.error_label.setObjectName("composerError")
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        policy = self.error_label.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.error_label.setSizePolicy(policy)
        self.error_label.setVisible(False)
        self.error_label.setAccessibleName("Message box notice")
        layout.addWidget(self.error_label)
        row = QHBoxLayout()
        row.setSpacing(8)
        self.edit = ComposerEdit()
        self.edit.setObjectName("composerEdit")
        self.edit.setAccessibleName("Message")
        self.edit.setAccessibleDescription("Enter sends, Shift+Enter adds a line, Tab moves to the Send button")
        self.edit.setPlaceholderText("Message SpecChat (Enter sends, Shift+Enter for a new line)")
        self.edit.setFixedHeight(84)
        self.edit.submitted.connect(self.submit)
        self.edit.textChanged.connect(self._text_changed)
        row.addWidget(self.edit, 1)
        buttons = QVBoxLayout()
        buttons.setSpacing(4)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.setToolTip("Send the message (Enter)")
        self.send_button.clicked.connect(self.submit)
        self.compare_button = QPushButton("Compare")
        self._compare_tip = compare_tip()
        self.compare_button.setToolTip(self._compare_tip)
        self.compare_button.clicked.connect(self.submit_compare)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply, keeping what was generated (Esc)")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.setEnabled(False)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.compare_button)
        buttons.addWidget(self.stop_button)
        row.addLayout(buttons)
        layout.addLayout(row)
        self._update_buttons()

    def text(self) -> str:
        """The text typed so far."""
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        """Replace the text."""
        self.edit.setPlainText(text)

    def show_unsent(self, text: str) -> None:
        """Show the text a chat shown has typed and not sent, to be typed on at its end: no typing of the user's, so
        the notice shown stays (:meth:`chat_changed` withdraws what no longer applies)."""
        with QSignalBlocker(self.edit):
            self.edit.setPlainText(text)
        self.edit.moveCursor(QTextCursor.MoveOperation.End)

    def clear(self) -> None:
        """Empty the box (after sending)."""
        self.edit.clear()

    def submit(self) -> None:
        """Send the text if allowed; otherwise say why in place."""
        if self._check():
            self.send_requested.emit(self.text())

    def submit_compare(self) -> None:
        """Send the text as a comparison if allowed."""
        if self._compare_off:
            self.show_error(self._compare_off)
        elif self._check(empty="Type a message first, then Compare runs it twice."):
            self.compare_requested.emit(self.text())

    def set_compare_unavailable(self, reason: str | None) -> None:
        """Turn Compare off, saying why in its tooltip (e.g. a remote server that offers one mode), or on (None)."""
        self._compare_off = reason
        self.compare_button.setToolTip(reason or self._compare_tip)
        self._update_buttons()

    def set_compare_words(self, words: str) -> None:
        """Say in Compare's tooltip what it runs (``app.gui.model_choice.compare_words``: "plain vs Auto
        decoding")."""
        self._compare_tip = compare_tip(words)
        if not self._compare_off:
            self.compare_button.setToolTip(self._compare_tip)

    def _check(self, empty: str = "Type a message first.") -> bool:
        """Whether the text may be sent now; if not, why is shown in place (``empty``: the hint for an empty box)."""
        if self._generating:
            where = f" in “{self._replying_in}”" if self._replying_in else ""
            self.show_error(f"A reply is being generated{where}: wait for it, or press Stop (Esc).", kind="busy")
            return False
        if self._blocked:
            self.show_blocked(self._blocked)
            return False
        if not self.text().strip():
            self.show_error(empty, kind="hint")
            return False
        return True

    def set_generating(self, generating: bool, chat: str = "") -> None:
        """While a reply streams, Send and Compare are off and Stop is on; typing stays possible. Once it ends, the
        notice that a reply is being generated is withdrawn (newcomer trial: it stayed beside an enabled Send).
        ``chat``: the title of the chat replying, named by that notice (the user may be reading another chat)."""
        self._generating = generating
        self._replying_in = chat if generating else ""
        if not generating and self.error_label.property("kind") == "busy":
            self.clear_error()
        self._update_buttons()

    def set_blocked(self, reason: str | None) -> None:
        """Disable sending with a reason shown in place (e.g. invalid settings), or re-enable it (None: the reason
        shown, and any other said because of the settings, is withdrawn)."""
        self._blocked = reason
        if reason:
            self.show_blocked(reason)
        elif self.error_label.property("kind") == "blocked":
            self.clear_error()
        self._update_buttons()

    def show_blocked(self, text: str) -> None:
        """Show why the settings refuse a send; withdrawn as soon as the settings are valid (``set_blocked(None)``)."""
        self.show_error(text)
        self.error_label.setProperty("kind", "blocked")

    def show_error(self, text: str, kind: str = "error") -> None:
        """Show a message above the text box (cleared when the user types or sends again; ``kind`` "busy", that a
        reply is being generated, also when it ends; "hint", that the box was empty, also after ``HINT_MS`` or
        another chat or version shown: :meth:`withdraw_hint`)."""
        self.error_label.setText(text)
        self.error_label.setProperty("kind", kind)
        self.error_label.setVisible(True)
        if kind == "hint":
            self._hint_timer.start(HINT_MS)
        else:
            self._hint_timer.stop()

    def withdraw_hint(self) -> None:
        """Withdraw a hint ("Type a message first.", or Compare's own) if one is shown: ``HINT_MS`` passed, or the
        user did something else (another version of a message shown); other messages stay."""
        if self.error_label.property("kind") == "hint":
            self.clear_error()

    def chat_changed(self) -> None:
        """Another chat is shown: a message about the last one's send ("Type a message first.", a failed send) no
        longer applies and is withdrawn (newcomer trial: it stayed); why the settings block Send stays."""
        if self.error_label.property("kind") in ("error", "hint"):
            self.clear_error()

    def clear_error(self) -> None:
        """Hide the message above the text box."""
        self.error_label.setText("")  # (back to one line)
        self.error_label.setProperty("kind", None)
        self.error_label.setVisible(False)
        self._hint_timer.stop()

    @property
    def error_text(self) -> str:
        """The message shown above the text box ("" if none)."""
        return self.error_label.text() if self.error_label.isVisibleTo(self) else ""

    def _text_changed(self) -> None:
        if self.error_label.isVisibleTo(self) and not self._blocked and not self._generating:
            self.clear_error()

    def _update_buttons(self) -> None:
        can_send = not self._generating and not self._blocked
        # Stop goes off with the focus on it once the reply ends: Qt would hand the focus to the next widget in the
        # window (the graph's "Speed" button, so what the user typed next went nowhere); the message box takes it
        stop_had_focus = self.stop_button.hasFocus()
        self.send_button.setEnabled(can_send)
        self.compare_button.setEnabled(can_send and not self._compare_off)
        self.stop_button.setEnabled(self._generating)
        if stop_had_focus and not self._generating:
            self.edit.setFocus(Qt.FocusReason.OtherFocusReason)
