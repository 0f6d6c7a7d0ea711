"""Help > Keyboard shortcuts and Help > About: the shortcuts are listed from the window's own actions (so the list
is never out of date), after the keys of the message box and of moving around, which are no actions."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFrame, QLabel, QMessageBox, QScrollArea, QVBoxLayout, QWidget

from ... import __version__
from .dialogs import message_box

#: Keys handled by widgets rather than actions: the message box, moving the focus, a message's actions.
WIDGET_KEYS = (
    ("Enter", "send the message (Ctrl+Enter too)"),
    ("Shift+Enter", "new line in the message"),
    ("Tab / Shift+Tab", "move to the next / previous control (also out of the message box)"),
    ("Ctrl+Tab", "insert a tab character in the message"),
    ("Space", "press the focused button"),
    ("Ctrl+Enter in a message's edit box", "save and resend the message (Enter adds a line)"),
    ("Esc in a message's edit box", "cancel the edit (while a reply streams, Esc stops it)"),
    ("Esc in the chat search or its results", "clear the search, listing every chat"),
    ("Down in the chat search", "go to the results, opening the first one"),
)


#: The dynamic property of an action whose line in the shortcuts' list says more than its menu text, which its menu
#: gives a context to ("Refresh" under Models; Del works in the chat list only).
SHORTCUT_WORDS = "shortcutWords"


def shortcut_lines(actions: list[QAction]) -> list[str]:
    """``key: what it does`` for the widget keys, then for each action with a shortcut (its :data:`SHORTCUT_WORDS`
    property, else its menu text without ``&`` and ``…``, its first letter in lower case unless it begins an acronym:
    "import conversation (JSON)", "JSON output")."""
    lines = [f"{key}: {what}" for key, what in WIDGET_KEYS]
    for action in actions:
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys:
            words = action.property(SHORTCUT_WORDS) or _sentence_case(action.text().replace("&", "").rstrip("…"))
            lines.append(f"{keys}: {words}")
    return lines


def _sentence_case(text: str) -> str:
    """``text`` with its first letter lowered, unless the next one is a capital too (an acronym: "JSON")."""
    return text if text[1:2].isupper() else text[:1].lower() + text[1:]


class ShortcutsDialog(QDialog):
    """The keyboard shortcuts' lines in a scroll area above an OK button (Esc closes it too), sized to its lines
    within the screen's available area: with a larger font (fonts at 144 dpi on a 1366x768 screen) the message box
    it was ran past the screen's bottom, its last lines and its OK button off-screen.

    Attributes:
        label: the lines, one a line; area: the scroll area holding it; buttons: the OK button's box.
    """

    def __init__(self, parent: QWidget, lines: list[str]):
        super().__init__(parent)
        self.setObjectName("shortcuts")
        self.setWindowTitle("Keyboard shortcuts")
        self.label = QLabel("\n".join(lines))
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.area = QScrollArea()
        self.area.setAccessibleName("Keyboard shortcuts")
        self.area.setFrameShape(QFrame.Shape.NoFrame)
        self.area.setWidgetResizable(True)
        self.area.setWidget(self.label)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok)
        self.buttons.accepted.connect(self.accept)
        layout = QVBoxLayout(self)
        layout.addWidget(self.area, 1)
        layout.addWidget(self.buttons)
        self.resize(self._fitting_size(parent))

    def text(self) -> str:
        """The shortcuts' lines, one a line."""
        return self.label.text()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """Once shown, move the frame into the screen's available area where it reaches past it (Qt places a dialog
        over its window's centre and keeps it on screen save for one side of the frame)."""
        super().showEvent(event)
        screen, frame = self.screen().availableGeometry(), self.frameGeometry()
        x = max(screen.left(), min(frame.left(), screen.right() + 1 - frame.width()))
        y = max(screen.top(), min(frame.top(), screen.bottom() + 1 - frame.height()))
        if (x, y) != (frame.left(), frame.top()):
            self.move(x, y)

    def _fitting_size(self, parent: QWidget) -> QSize:
        """The size that shows every line (with room for a vertical scroll bar), no larger than the available area
        of ``parent``'s screen less the frame its window has (the title bar the dialog will have too)."""
        margins = self.layout().contentsMargins()
        lines = self.label.sizeHint()
        wanted = QSize(
            lines.width() + self.area.verticalScrollBar().sizeHint().width() + margins.left() + margins.right(),
            lines.height() + self.layout().spacing() + self.buttons.sizeHint().height() + margins.top() + margins.bottom(),
        )  # fmt: skip
        window = parent.window()
        frame = window.frameGeometry().size() - window.geometry().size()
        return wanted.boundedTo(parent.screen().availableGeometry().size() - frame)


async def show_shortcuts(parent: QWidget, actions: list[QAction]) -> None:
    """List the keyboard shortcuts (:func:`shortcut_lines`) in a :class:`ShortcutsDialog`, window-modal, until it is
    closed."""
    dialog = ShortcutsDialog(parent, shortcut_lines(actions))
    dialog.setWindowModality(Qt.WindowModality.WindowModal)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    closed: asyncio.Future = asyncio.get_running_loop().create_future()
    dialog.finished.connect(lambda _result: closed.done() or closed.set_result(None))
    dialog.open()
    await closed


def about_text() -> str:
    """What Help > About says: the version, what SpecChat does, and where replies are generated."""
    return (
        f"SpecChat {__version__}: chat with local LLMs on OpenVINO.\n\nINT4 weights, speculative decoding (draft "
        "model or prompt lookup) and an attention-sink rolling context.\n\nReplies are generated on this computer "
        "unless you choose a remote server (Remote server (OpenAI-compatible)… at the end of the model picker, "
        "Ctrl+L); then your chats are sent to that server."
    )


async def show_about(parent: QWidget) -> None:
    """Say what SpecChat is (:func:`about_text`)."""
    await message_box(parent, QMessageBox.Icon.Information, "About SpecChat", about_text(), object_name="about")
