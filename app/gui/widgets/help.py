"""Help > Keyboard shortcuts and Help > About: the shortcuts are listed from the window's own actions (so the list
is never out of date), after the keys of the message box and of moving around, which are no actions."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMessageBox, QWidget

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


async def show_shortcuts(parent: QWidget, actions: list[QAction]) -> None:
    """List the keyboard shortcuts in a message box (object name ``shortcuts``)."""
    await message_box(
        parent, QMessageBox.Icon.Information, "Keyboard shortcuts", "\n".join(shortcut_lines(actions)),
        object_name="shortcuts",
    )  # fmt: skip


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
