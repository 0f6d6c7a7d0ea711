"""The conversations of the window: the list on the left, which one is shown (at start: the one shown when the window
last closed), new, open, rename, delete, search, the system prompt, export and import.

Rules:
- The history database is the truth: the list and the chat view show what it holds (:meth:`Conversations.refresh`
  after every change), and a conversation that vanished (deleted elsewhere) is dropped from the list.
- A history write the database refuses (``sqlite3.Error``: full disk, locked past the busy timeout) is said in the
  composer and the status bar (what happened, what to do: :meth:`Conversations.write_failed`); what was typed stays
  where it was typed.
- The settings keep a chat's sampling by its id: a chat deleted has its entries removed, and at start those of chats
  the history has not are dropped (a history started afresh numbers its chats from 1 again). A history kept in
  memory numbers its chats as the file's: their sampling is kept for the session only, the file's entries untouched.
- What is typed in the message box and not sent is the chat shown's: another chat shown keeps it for this one
  and shows its own (a new chat: the one typed in a new chat not saved, else empty); sending empties it, deleting
  the chat drops it. Each chat's is written to the settings file a second after typing stops (``DRAFT_SAVE_MS``,
  not per keystroke) and at once when another chat is shown, so a crash or a kill loses at most that second of
  typing; at quit too (:meth:`Conversations.keep_draft`). At start the chat shown gets its own back, and the one
  message an older SpecChat kept for the whole window. A history kept in memory keeps them while the window is
  open: its numbers are not the file's, which keeps its own.
- Export writes the conversation as shown: the version of each message chosen on screen (chat branches,
  ``HistoryDB.messages`` of the chosen path).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QStandardPaths, QTimer, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from .chat_titles import first_line, title_from
from .history_db import HistoryDB, write_error_text
from .history_rows import Conversation
from .history_transfer import export_file_stem, export_json, export_markdown, import_json, read_export
from .reply_controller import ReplyController
from .settings_store import SettingsStore
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.conversation_list import ConversationList
from .widgets.dialogs import choose_file, message_box
from .widgets.live_graph import NO_REPLY, LiveGraph
from .widgets.sampling_group import SamplingGroup

logger = logging.getLogger(__name__)
#: The Delete chat confirmation's button that deletes (named after its action, not "Yes"; Cancel is the default).
DELETE_LABEL = "&Delete"
#: How long after the last keystroke what is typed and not sent is written to the settings file.
DRAFT_SAVE_MS = 1000


def transfer_start_folder(last_folder: str) -> str:
    """The folder the Export and Import dialogs open in: the one the last export went to or import came from while
    it exists, else the user's Documents folder if there is one, else the home folder."""
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    for folder in (last_folder, documents):
        if folder and Path(folder).is_dir():
            return folder
    return QStandardPaths.writableLocation(QStandardPaths.StandardLocation.HomeLocation)


class Conversations(QObject):
    """Keeps the conversation list, the chat view and the history in step (see the module doc).

    Args:
        db: the chat history; store: the settings file (where the last export or import was; the chats' entries).
        replies: the reply controller (a reply streaming into a chat opened is shown, and its chat marked in the
            list; deleting a chat stops its reply first).
        conversation_list, chat_view, composer, live_graph, sampling: the widgets it drives (``sampling``: the
            settings pane's sampling group, which keeps a conversation's own sampling).
        say: ``say(text, milliseconds)`` shows a line in the status bar.
        parent: the Qt parent, and the parent of its dialogs (delete, export, import).

    Signals:
        shown(conversation_id or None): another conversation (or a new, empty chat) is shown.
        title_changed(text): the window's title for the conversation shown.
    """

    shown = Signal(object)
    title_changed = Signal(str)

    def __init__(
        self,
        db: HistoryDB,
        store: SettingsStore,
        replies: ReplyController,
        conversation_list: ConversationList,
        chat_view: ChatView,
        composer: Composer,
        live_graph: LiveGraph,
        sampling: SamplingGroup,
        say: Callable[[str, int], None],
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.db, self._store, self._replies = db, store, replies
        self._list, self._view, self._composer = conversation_list, chat_view, composer
        self._graph, self._sampling = live_graph, sampling
        self.say = say
        self._parent = parent
        # the chat a reply streams in is marked in the list, also once left (newcomer trial: nothing showed it)
        replies.started.connect(lambda reply: conversation_list.set_replying(reply.conversation_id))
        replies.finished.connect(lambda _final: conversation_list.set_replying(None))
        # what is typed and not sent in each chat not shown (None: a new chat not saved yet); the chat shown's is
        # in the message box, read when another is shown, a second after typing stops, and at quit: a keystroke only
        # restarts the timer
        self._unsent: dict[int | None, str] = {}
        self._written: dict[int | None, str] = {}  # what the settings file holds
        self._draft_timer = QTimer(self, singleShot=True, interval=DRAFT_SAVE_MS)
        self._draft_timer.timeout.connect(self._keep_unsent)
        composer.edit.textChanged.connect(self._draft_timer.start)
        if db.in_memory:  # (it numbers its chats as the file's: their sampling is kept apart, for the session)
            store.keep_conversations_in_memory()
        else:
            existing = {conversation.id for conversation in db.conversations()}
            store.keep_conversations_only(existing.__contains__)  # (a new chat numbered as an old one starts clean)
            self._written = store.unsent_messages
            self._unsent = {key: text for key, text in self._written.items() if key is None or key in existing}
            self._keep_unsent()

    @property
    def current_id(self) -> int | None:
        """The conversation shown (None for a new chat not saved yet)."""
        return self._view.conversation_id

    def refresh(self) -> None:
        """Show the conversations matching the search box, the one shown selected."""
        listing = self._list
        listing.set_conversations(self.db.conversations(listing.search.text()), self.current_id, self._described)

    def write_failed(self, what: str, error: sqlite3.Error) -> None:
        """Say that the history refused to save ``what`` (in the composer, and in the status bar while it is
        covered)."""
        logger.warning("history write failed (%s): %s", what, error)
        self.history_error(f"Could not save {what}: {write_error_text(error)}")

    def history_error(self, text: str) -> None:
        """Say a history error in the composer and the status bar."""
        self._composer.show_error(text)
        self.say(text, 15000)

    def follow(self) -> None:
        """The conversation shown changed: the window's title, the live graph and the notices follow, and the
        settings remember it (opened again at the next start, :meth:`show_first`; not the ids of a history kept in
        memory, which the next start has not), and the messages not sent are written if they changed."""
        if not self.db.in_memory:
            self._store.set_open_conversation(self.current_id)
        self._keep_unsent()
        conversation = self._view.conversation
        self.title_changed.emit(f"{conversation.title} — SpecChat" if conversation else "SpecChat")
        messages = self.db.messages(self.current_id) if self.current_id is not None else []
        replies = [m for m in messages if m.role == "assistant"]
        last_state = replies[-1].state if replies else "complete"
        reply_id = replies[-1].id if replies else NO_REPLY
        self._graph.show_conversation(self.current_id, [reply.stats for reply in replies], last_state, reply_id)
        self.shown.emit(self.current_id)

    def show_first(self) -> None:
        """Show the conversation at start: the one shown when the window last closed while the history has it, else
        the newest (a new chat if one was left with a message typed), else a new chat; with the message typed in it
        and not sent in the message box, and the one an older SpecChat kept for the whole window (then this chat's)."""
        last = self._store.open_conversation
        if last is not None and self.db.conversation(last) is not None:
            self.open(last)
        elif None not in self._unsent and (conversations := self.db.conversations()):
            self.open(conversations[0].id)
        else:
            self.new()
        if not self.db.in_memory and (older := self._store.take_unsent_message()):
            own = self._composer.text()
            self._composer.show_unsent(older if own in ("", older) else f"{own}\n\n{older}")  # (neither is lost)

    def keep_draft(self) -> None:
        """Keep what is typed in the message box as the chat shown's message not sent, in the settings with the next
        save (the window's state at quit; not for a history kept in memory)."""
        self._draft_timer.stop()
        if text := self._composer.text():
            self._unsent[self.current_id] = text
        if not self.db.in_memory:  # (the window's save writes it: one write at quit)
            self._store.set_unsent_messages(self._unsent)

    def put_back(self, conversation_id: int, text: str) -> bool:
        """A message whose reply failed in a chat not shown becomes that chat's unsent message (in the box when the
        chat is shown again), unless one was typed there; returns whether it was put back."""
        if self._unsent.get(conversation_id):
            return False
        self._unsent[conversation_id] = text
        self._keep_unsent()
        return True

    def _keep_unsent(self) -> None:
        """Give the chats' messages not sent (the one in the box included) to the settings and write the file if
        they changed, unless the history is kept in memory."""
        self._draft_timer.stop()
        if self.db.in_memory:
            return
        unsent = {key: text for key, text in self._unsent.items() if text}
        if text := self._composer.text():
            unsent[self.current_id] = text
        if unsent == self._written:
            return
        try:
            self._store.save_unsent_messages(unsent)
        except OSError as error:  # (kept in memory: written again with the next save)
            logger.warning("could not save the messages typed and not sent: %s", error)
        else:
            self._written = unsent

    def _show_unsent(self, chosen: int | None) -> None:
        """``chosen`` is to be shown: what is typed in the message box stays with the chat shown, and the box shows
        what was typed and not sent in ``chosen`` (empty if nothing)."""
        leaving = self.current_id
        if chosen == leaving and chosen not in self._unsent:
            return  # (New chat on a new chat: its text stays)
        if (text := self._composer.text()) and leaving != chosen:
            self._unsent[leaving] = text
        self._composer.show_unsent(self._unsent.pop(chosen, ""))  # (written once it is shown: :meth:`follow`)

    def new(self) -> None:
        """Show an empty new chat (saved when its first message is sent)."""
        self._show_unsent(None)
        self._view.show_conversation(None, [])
        self.follow()
        self._composer.chat_changed()
        self._sampling.set_conversation(None)
        self._list.list.clearSelection()
        self._composer.edit.setFocus()

    def open(self, conversation_id: int) -> None:
        """Show a conversation (a reply streaming in it keeps streaming into the view)."""
        conversation = self.db.conversation(conversation_id)
        if conversation is None:
            self.refresh()
            return
        if self.current_id != conversation_id:
            self._show_unsent(conversation_id)
            self._view.show_conversation(conversation, self.db.messages(conversation_id))
            self._sampling.set_conversation(conversation_id)
            self.follow()
            self._composer.chat_changed()
        active = self._replies.active
        if active and active.conversation_id == conversation_id:
            self._view.update_message(active.recorder.snapshot(), live=True)
        self._view.set_busy(active is not None)
        if self._list.current_id() != conversation_id:
            self._list.select(conversation_id)

    def reload(self, version: int | None = None) -> None:
        """Show the conversation shown again as the history holds it (after a change of its messages; ``version``:
        after a switch to this version of a message, kept in view with the switch's focus, ``ChatView.show_version``)."""
        conversation_id = self.current_id
        if conversation_id is not None:
            conversation, messages = self.db.conversation(conversation_id), self.db.messages(conversation_id)
            if version is None:
                self._view.show_conversation(conversation, messages)
            else:
                self._view.show_version(conversation, messages, version)
            self.follow()

    def rename(self, conversation_id: int, title: str) -> None:
        """Rename a conversation."""
        try:
            self.db.rename_conversation(conversation_id, title)
        except ValueError as error:
            self.say(str(error), 5000)
            return
        except sqlite3.Error as error:
            self.write_failed("the new title", error)
            self.refresh()  # the list shows the title that is saved
            return
        if self.current_id == conversation_id:
            self._view.set_title(title.strip())
            self.follow()
        self.refresh()

    async def delete(self, conversation_id: int | None) -> bool:
        """Ask, then delete a conversation (stopping its reply first); returns True if deleted."""
        if conversation_id is None:
            return False
        conversation = self.db.conversation(conversation_id)
        if conversation is None:
            return False
        answer = await message_box(
            self._parent,
            QMessageBox.Icon.Question,
            "Delete chat",
            f"Delete “{conversation.title}” and its {self._counted(conversation)}?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
            informative="This cannot be undone. Export it first if you want to keep a copy.",
            object_name="confirmDelete",
            labels={QMessageBox.StandardButton.Yes: DELETE_LABEL},
        )
        if answer != QMessageBox.StandardButton.Yes:
            return False
        await self._replies.stop_in(conversation_id)
        order = [c.id for c in self.db.conversations(self._list.search.text())]  # as the list shows them
        try:
            self.db.delete_conversation(conversation_id)
        except sqlite3.Error as error:
            self.write_failed(f"the deletion of “{conversation.title}” (it was kept)", error)
            return False
        self._unsent.pop(conversation_id, None)
        self._keep_unsent()
        try:
            self._store.forget_conversation(conversation_id)
        except OSError as error:  # dropped at the next start (its chat is gone from the history)
            logger.warning("could not remove the deleted chat's entries from the settings: %s", error)
        if self.current_id == conversation_id:
            self._composer.clear()  # (what was typed in it goes with it)
            remaining = [c.id for c in self.db.conversations()]
            if remaining:  # its neighbour in the list: the one below, or above for the last (newcomer trial: the top)
                place = order.index(conversation_id) if conversation_id in order else 0
                below = [i for i in order[place + 1:] if i in remaining]
                above = [i for i in order[:place] if i in remaining]
                self._view.show_conversation(None, [])
                self.open((below or above[::-1] or remaining)[0])  # (the list searched empty: the newest chat)
            else:
                self.new()
        self.refresh()
        self.say(f"Deleted “{conversation.title}”", 5000)
        return True

    def _described(self, conversation: Conversation) -> str:
        """A chat in the list's tooltip: its title, or the whole first line of its first message when the title was
        cut from it (newcomer trial: the tooltip repeated "Repeat the following text exactly, word for wor…"), then
        ``_counted``."""
        messages = self.db.messages(conversation.id)
        heading = conversation.title
        if messages and title_from(messages[0].content) == heading:  # titled after it, not renamed
            heading = first_line(messages[0].content)
        return f"{heading}\n{self._counted(conversation, len(messages))}"

    def _counted(self, conversation: Conversation, shown: int | None = None) -> str:
        """The messages a chat shows (``shown``, when they were read already), then the earlier versions it keeps
        (Edit, Regenerate): ``2 messages (and 3 earlier versions)``, ``1 message`` (newcomer trial: a chat showing 2
        messages asked "… and its 5 messages?"); in the delete confirmation and the chat list's tooltips."""
        shown = len(self.db.messages(conversation.id)) if shown is None else shown
        earlier = conversation.message_count - shown
        words = f"{shown} message{'' if shown == 1 else 's'}"
        if earlier > 0:
            words += f" (and {earlier} earlier version{'' if earlier == 1 else 's'})"
        return words

    def json_output_changed(self, conversation_id: int, on: bool) -> None:
        """Save a conversation's "JSON output" choice (-1: no conversation yet; the choice goes with its first
        message)."""
        if conversation_id >= 0 and self.db.conversation(conversation_id) is not None:
            try:
                self.db.set_json_output(conversation_id, on)
            except sqlite3.Error as error:
                self.write_failed("the JSON output choice (toggle it again to retry)", error)

    def system_prompt_changed(self, conversation_id: int, text: str) -> None:
        """Save a conversation's edited system prompt."""
        if conversation_id >= 0 and self.db.conversation(conversation_id) is not None:
            try:
                self.db.set_system_prompt(conversation_id, text)
            except sqlite3.Error as error:
                self.write_failed("the system prompt (it stays in its box: edit it again to retry)", error)
                return
            self.say("System prompt saved: it applies to the next reply", 4000)

    def focus_search(self) -> None:
        """Put the focus in the search box, its text selected (Ctrl+F)."""
        self._list.search.setFocus()
        self._list.search.selectAll()

    # --- export / import --------------------------------------------------------------------------

    def export(self, path: str | Path, fmt: str) -> Path:
        """Write the conversation shown, as shown (the chosen version of each message), to ``path`` as Markdown
        (``md``) or JSON (``json``).

        Raises:
            ValueError: nothing to export (a new chat). OSError: the file cannot be written.
        """
        conversation_id = self.current_id
        if conversation_id is None:
            raise ValueError("this chat is empty: there is nothing to export yet")
        path = Path(path)
        if fmt == "md":
            path.write_text(export_markdown(self.db, conversation_id), encoding="utf-8")
        else:
            data = export_json(self.db, conversation_id)
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def import_file(self, path: str | Path) -> int:
        """Add a conversation from a JSON export, or a plain chat in OpenAI's format, and show it; returns its id.

        Raises:
            ValueError: the file is neither a SpecChat conversation export nor a plain chat of text (not JSON, too
                large or deep, a field of the wrong type, a tool call or an image: ``history_transfer.read_export``,
                ``history_transfer.import_json``).
            OSError: the file cannot be read. sqlite3.Error: the history refused the write (nothing was written).
        """
        conversation_id = import_json(self.db, read_export(path))
        self.refresh()
        self.open(conversation_id)
        return conversation_id

    async def export_dialog(self, fmt: str) -> None:
        """Ask where to save the conversation shown, then export it."""
        conversation = self.db.conversation(self.current_id) if self.current_id else None
        if conversation is None:
            self.say("This chat is empty: there is nothing to export yet", 5000)
            return
        suffix = ".md" if fmt == "md" else ".json"
        name = export_file_stem(conversation.title)
        path = await choose_file(
            self._parent, "Export conversation", save=True,
            name_filter="Markdown (*.md)" if fmt == "md" else "JSON (*.json)", suggested=name + suffix,
            start_dir=transfer_start_folder(self._store.transfer_folder),
        )  # fmt: skip
        if not path:
            return
        if not path.endswith(suffix):
            path += suffix
        try:
            written = self.export(path, fmt)
        except (OSError, ValueError) as error:
            await message_box(self._parent, QMessageBox.Icon.Warning, "Export failed", f"Could not write {path}.", informative=str(error))
            return
        self.say(f"Exported to {written}", 5000)
        self._remember_folder(written.parent)

    async def import_dialog(self) -> None:
        """Ask for a JSON export or a plain chat (the dialog opens where the last export or import was), then import
        it."""
        path = await choose_file(
            self._parent, "Import conversation", name_filter="JSON conversation (*.json)",
            start_dir=transfer_start_folder(self._store.transfer_folder),
        )  # fmt: skip
        if not path:
            return
        self._remember_folder(Path(path).parent)  # (a file that fails to import: the next try starts beside it)
        try:
            self.import_file(path)
        except sqlite3.Error as error:
            self.write_failed(f"the conversation imported from {path}", error)
            return
        except (OSError, ValueError) as error:
            await message_box(
                self._parent, QMessageBox.Icon.Warning, "Import failed", f"Could not import {path}.",
                informative=f"{error}\n\nChoose a file written by File > Export as JSON, or a chat's messages in OpenAI's "
                "format.", object_name="importError",
            )  # fmt: skip
            return
        self.say(f"Imported {path}", 5000)

    def _remember_folder(self, folder: Path) -> None:
        """The next Export or Import opens in ``folder`` (kept in the settings' UI state)."""
        try:
            self._store.set_transfer_folder(str(folder))
        except OSError as error:  # only where the next dialog opens is lost, never the export or the import
            logger.warning("could not save the export and import folder in the settings: %s", error)
