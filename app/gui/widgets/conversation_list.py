"""The conversation list on the left: search by text, new, rename (in place) and delete; the chat a reply streams
in is marked."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeyEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..history_rows import Conversation

SEARCH_DEBOUNCE_MS = 200
ID_ROLE = Qt.ItemDataRole.UserRole
#: Item data: True while a reply streams in the chat (its entry then reads its title and :data:`REPLYING_SUFFIX`).
REPLYING_ROLE = Qt.ItemDataRole.UserRole + 1
#: What a chat's entry says after its title while a reply streams in it (newcomer trial: a reply streaming in a chat
#: left showed nothing in the list).
REPLYING_SUFFIX = " · replying…"
#: What a chat's entry shows after a title cut from its first message's line (``Conversation.title_cut``): the title
#: is stored and renamed without it (Rename showed it), and a newcomer read a cut title as the whole request.
CUT_MARK = "…"


def _when(timestamp: float) -> str:
    now = time.localtime()
    then = time.localtime(timestamp)
    if then[:3] == now[:3]:
        return time.strftime("%H:%M", then)
    if then.tm_year == now.tm_year:
        return time.strftime("%d %b", then)
    return time.strftime("%d %b %Y", then)


class _ChatItem(QListWidgetItem):
    """A chat in the list: its title (with :data:`CUT_MARK` where cut), followed by :data:`REPLYING_SUFFIX` while a
    reply streams in it (its title alone when edited in place). Its tooltip (the chat described: its title or the whole line it was cut from, the messages
    it shows and the earlier versions it keeps; then when it last changed) is worded when Qt asks for it: describing
    a chat reads its messages, which a list of hundreds of long chats would read on every refresh."""

    def __init__(self, conversation: Conversation, described: Callable[[Conversation], str]):
        super().__init__(conversation.title)
        self._conversation, self._described = conversation, described

    def data(self, role: int):
        """The item's data; the tooltip worded now; the text shown with :data:`CUT_MARK` after a title cut from its
        first message's line (not renamed in place since), and the suffix of a reply streaming."""
        if role == Qt.ItemDataRole.DisplayRole:
            text = super().data(role)
            if self._conversation.title_cut and text == self._conversation.title:
                text += CUT_MARK
            return text + REPLYING_SUFFIX if super().data(REPLYING_ROLE) else text
        if role == Qt.ItemDataRole.ToolTipRole:
            conversation = self._conversation
            return f"{self._described(conversation)} · {_when(conversation.updated_at)}"
        return super().data(role)


class _SearchBox(QLineEdit):
    """The search box: Esc clears it (while a reply streams the window's Stop takes Esc first), Down goes to the
    results.

    Signals:
        escape_pressed(): Esc was pressed while the box holds text. down_pressed(): the Down arrow was pressed.
    """

    escape_pressed = Signal()
    down_pressed = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        """Esc emits ``escape_pressed`` (an empty box leaves Esc to its parents), Down emits ``down_pressed``; the
        other keys edit."""
        plain = event.modifiers() == Qt.KeyboardModifier.NoModifier
        if event.key() == Qt.Key.Key_Escape and plain and self.text():
            self.escape_pressed.emit()
        elif event.key() == Qt.Key.Key_Down and plain:
            self.down_pressed.emit()
        else:
            super().keyPressEvent(event)


class _ChatListView(QListWidget):
    """The list of chats: Esc clears the search while it filters the list (newcomer trial: after Down into the
    results, Esc left the list filtered; while a reply streams the window's Stop takes Esc first).

    Signals:
        escape_pressed(): Esc was pressed (the list's other keys move and edit as a list's do).
    """

    escape_pressed = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        """Esc emits ``escape_pressed``; every key then does what it does in a list."""
        if event.key() == Qt.Key.Key_Escape and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            self.escape_pressed.emit()
        super().keyPressEvent(event)


class ConversationList(QWidget):
    """Conversations, newest first, with a search box and New / Rename / Delete buttons.

    Signals:
        selected(conversation_id): the user picked a conversation.
        new_requested(): the New chat button.
        renamed(conversation_id, title): a title was edited in place.
        delete_requested(conversation_id): the Delete button (the window asks for confirmation).
        search_changed(text): the search text changed (debounced).
    """

    selected = Signal(int)
    new_requested = Signal()
    renamed = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("conversationList")
        self._titles: dict[int, str] = {}
        self._filling = False
        self._replying: int | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(6)
        self.new_button = QPushButton("+  New chat")
        self.new_button.setObjectName("newChatButton")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        layout.addWidget(self.new_button)
        self.search = _SearchBox()
        self.search.setPlaceholderText("Search chats (titles and messages)")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Search chats")
        # the clear button shows only its icon: its action (Qt's name for it) gives its name and tooltip
        for clear in self.search.findChildren(QAction, "_q_qlineeditclearaction"):
            clear.setText("Clear search")
            clear.setToolTip("Clear the search (Esc)")
        self.search.textChanged.connect(lambda _: self._search_timer.start(SEARCH_DEBOUNCE_MS))
        self.search.down_pressed.connect(self._focus_first_result)
        self.search.escape_pressed.connect(self.clear_search)
        layout.addWidget(self.search)
        self.list = _ChatListView()
        self.list.escape_pressed.connect(self.clear_search)
        self.list.setObjectName("conversations")
        self.list.setAccessibleName("Conversations")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setWordWrap(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setUniformItemSizes(False)
        self.list.itemSelectionChanged.connect(self._on_selection)
        self.list.itemChanged.connect(self._on_item_changed)
        layout.addWidget(self.list, 1)
        self.empty_label = QLabel("No chats yet")
        self.empty_label.setObjectName("hint")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.empty_label)
        buttons = QHBoxLayout()
        self.rename_button = QPushButton("Rename")
        self.rename_button.setToolTip("Rename the selected chat (F2)")
        self.rename_button.clicked.connect(self.rename_current)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete the selected chat (asks first)")
        self.delete_button.clicked.connect(self._request_delete)
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        layout.addLayout(buttons)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self._update_buttons()

    def set_conversations(
        self, conversations: list[Conversation], current_id: int | None, described: Callable[[Conversation], str]
    ) -> None:
        """Fill the list, selecting ``current_id`` if present (without emitting ``selected``). ``described`` words a
        chat for its tooltip, before the time it last changed: its title (or the whole first line of its first
        message, when the title was cut from it), then the messages it shows and the earlier versions it keeps
        (``2 messages (and 3 earlier versions)``)."""
        self._filling = True
        try:
            self.list.clear()
            self._titles = {}
            for conversation in conversations:
                item = _ChatItem(conversation, described)
                item.setData(ID_ROLE, conversation.id)
                item.setData(REPLYING_ROLE, conversation.id == self._replying)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                self._titles[conversation.id] = conversation.title
                self.list.addItem(item)
                if conversation.id == current_id:
                    item.setSelected(True)
                    self.list.setCurrentItem(item)
            searching = bool(self.search.text().strip())
            self.empty_label.setText("No chat matches the search" if searching else "No chats yet")
            self.empty_label.setVisible(not conversations)
        finally:
            self._filling = False
        self._update_buttons()

    def set_replying(self, conversation_id: int | None) -> None:
        """Mark the entry of the chat a reply streams in (None: no reply streams), through refills of the list."""
        self._replying = conversation_id
        self._filling = True
        try:
            for i in range(self.list.count()):
                item = self.list.item(i)
                item.setData(REPLYING_ROLE, int(item.data(ID_ROLE)) == conversation_id)
        finally:
            self._filling = False

    def current_id(self) -> int | None:
        """Id of the selected conversation, or None."""
        items = self.list.selectedItems()
        return int(items[0].data(ID_ROLE)) if items else None

    def ids(self) -> list[int]:
        """Ids of the listed conversations, in order."""
        return [int(self.list.item(i).data(ID_ROLE)) for i in range(self.list.count())]

    def item_for(self, conversation_id: int) -> QListWidgetItem | None:
        """The list item of a conversation, if listed."""
        for i in range(self.list.count()):
            if int(self.list.item(i).data(ID_ROLE)) == conversation_id:
                return self.list.item(i)
        return None

    def select(self, conversation_id: int) -> None:
        """Select a conversation as if clicked."""
        item = self.item_for(conversation_id)
        if item is not None:
            self.list.setCurrentItem(item)

    def rename_current(self) -> None:
        """Start editing the selected conversation's title in place."""
        items = self.list.selectedItems()
        if items:
            self.list.editItem(items[0])

    def clear_search(self) -> None:
        """Empty the search box and list every chat at once (Esc in the box or in the list); nothing when it is
        empty."""
        if self.search.text():
            self.search.clear()
            self._search_timer.stop()
            self.search_changed.emit("")

    def _focus_first_result(self) -> None:
        """Down in the search box: search now if the typing is not searched yet, then select the first result
        (opening it) and move the focus to the list, as in a launcher."""
        if self._search_timer.isActive():
            self._search_timer.stop()
            self.search_changed.emit(self.search.text())
        if self.list.count():
            self.list.setCurrentRow(0)
            self.list.setFocus(Qt.FocusReason.OtherFocusReason)

    def _request_delete(self) -> None:
        current = self.current_id()
        if current is not None:
            self.delete_requested.emit(current)

    def _on_selection(self) -> None:
        self._update_buttons()
        if not self._filling:
            current = self.current_id()
            if current is not None:
                self.selected.emit(current)

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        conversation_id = int(item.data(ID_ROLE))
        title = item.data(Qt.ItemDataRole.EditRole).strip()  # (its text shown may end in REPLYING_SUFFIX)
        old = self._titles.get(conversation_id, "")
        if not title:
            self._filling = True
            item.setText(old)  # an empty title is refused: keep the old one
            self._filling = False
            return
        if title != old:
            self._titles[conversation_id] = title
            self.renamed.emit(conversation_id, title)

    def _update_buttons(self) -> None:
        has_selection = bool(self.list.selectedItems())
        self.rename_button.setEnabled(has_selection)
        self.delete_button.setEnabled(has_selection)
