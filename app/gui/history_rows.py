"""What a row of the chat history reads as: ``Conversation``, ``Message``, and a conversation's branches.

Rows are read as the app shows them, whatever a hand edit or a damaged page left in them: a title or system prompt
that is not text reads as a placeholder, a message whose text is NULL, binary or not UTF-8 (or whose role is unknown)
as an unreadable placeholder (:attr:`Message.unreadable`), statistics or draft spans that are not what SpecChat
writes as ``{}`` / ``[]``. Nothing here writes.

Branches (``history_db`` says how they are stored): :class:`Branches` reads a conversation's rows as a tree, each
message's parent, its versions, and the path shown.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from .message_fields import spans_problem, stats_problem

ROLES = ("user", "assistant")
#: Message states: a finished reply, one still streaming (or interrupted by a crash), stopped by the user, failed.
STATES = ("complete", "streaming", "stopped", "error")


#: ``parent_id`` of a conversation's first message (and ``leaf_id`` of a conversation whose path is empty while its
#: first message is being replaced). NULL means a row written before branches: its parent is the row before it.
ROOT = 0


class UndecodableText(bytes):
    """A TEXT value that is not valid UTF-8 (its raw bytes): read as such instead of failing the whole query."""


def decode_text(raw: bytes) -> str | UndecodableText:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return UndecodableText(raw)


@dataclass


class Conversation:
    """One conversation (without its messages)."""

    id: int
    title: str
    system_prompt: str
    created_at: float
    updated_at: float
    message_count: int = 0
    json_output: bool = False  # replies constrained to a JSON object
    title_cut: bool = False  # the title is its first message's first line cut short (``HistoryDB.conversations``)


@dataclass
class Message:
    """One message.

    Attributes:
        state: ``complete``; ``streaming`` while generated (still so after a crash: shown as interrupted);
            ``stopped`` by the user; ``error`` when generation failed (the text so far is kept).
        stats: reply statistics (see ``app.gui.application.reply_recorder``), {} for user messages.
        draft_spans: ``[start, end)`` character ranges of the content that came from accepted draft tokens.
        unreadable: why the row cannot be shown ("" when it can): its text is NULL, binary or not UTF-8, or its
            role unknown. ``content`` is then "" and the chat view shows a placeholder; the row is never rewritten.
            Statistics or spans that are not what SpecChat writes are read as ``{}`` / ``[]`` (drawn without them).
        parent_id: the message before it on its branch (``ROOT`` for a first message; None for a row of a history
            older than branches, whose parent is the row before it).
        versions: ids of every version of this message (the messages with the same parent), oldest first; one or
            none when it has no other.
    """

    id: int
    conversation_id: int
    position: int
    role: str
    content: str
    created_at: float
    state: str = "complete"
    stats: dict = field(default_factory=dict)
    draft_spans: list[list[int]] = field(default_factory=list)
    unreadable: str = ""
    parent_id: int | None = ROOT
    versions: list[int] = field(default_factory=list)

    @property
    def version(self) -> int:
        """Which of its :attr:`versions` this message is, from 1 (1 when it has no other)."""
        return self.versions.index(self.id) + 1 if self.id in self.versions else 1


def is_time(value: Any) -> bool:
    """Whether a stored value is a time (seconds since 1970 as a number; a bool is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def conversation_from_row(row: sqlite3.Row) -> Conversation:
    """A conversation row; a title or system prompt that is not text (hand-edited) reads as a placeholder / ""."""
    title, system_prompt = row["title"], row["system_prompt"]
    return Conversation(
        id=row["id"],
        title=title if isinstance(title, str) and title else "Untitled (unreadable title)",
        system_prompt=system_prompt if isinstance(system_prompt, str) else "",
        created_at=row["created_at"] if is_time(row["created_at"]) else 0.0,
        updated_at=row["updated_at"] if is_time(row["updated_at"]) else 0.0,
        message_count=row["message_count"],
        json_output=row["json_output"] == 1,
    )


def _json_or(value: Any, default):
    if not isinstance(value, str) or not value:
        return default
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return default


def _unreadable_reason(role: Any, content: Any) -> str:
    if role not in ROLES:
        return f"its role {role!r} is neither user nor assistant"
    if content is None:
        return "its text is missing (NULL)"
    if isinstance(content, UndecodableText):
        return f"its text is not valid UTF-8 ({len(content)} bytes)"
    if isinstance(content, bytes):
        return f"its text is stored as binary data ({len(content)} bytes)" if content else "it was unreadable when exported"
    if not isinstance(content, str):
        return f"its text is a {type(content).__name__}, not text"
    return ""


def message_from_row(row: sqlite3.Row) -> Message:
    """A message row as the app shows it: see :class:`Message` for rows that cannot be (``unreadable``)."""
    role, content = row["role"], row["content"]
    unreadable = _unreadable_reason(role, content)
    content = "" if unreadable else content
    stats = _json_or(row["stats"], {})
    spans = _json_or(row["draft_spans"], [])
    return Message(
        id=row["id"],
        conversation_id=row["conversation_id"],
        position=row["position"],
        role=role if role in ROLES else "assistant",
        content=content,
        created_at=row["created_at"] if is_time(row["created_at"]) else 0.0,
        state=row["state"] if row["state"] in STATES else "complete",
        stats={} if stats_problem(stats) else stats,
        draft_spans=[] if spans_problem(spans, len(content)) else spans,
        unreadable=unreadable,
    )


class Branches:
    """A conversation's rows as branches: the parent of each, the path shown, the versions of a message.

    Args:
        rows: the conversation's rows ordered by ``position`` (creation), then id.
        leaf: ``conversations.leaf_id``: the last message shown (``ROOT``: none; None, or a row that is gone: the
            newest row).
    """

    def __init__(self, rows: list[sqlite3.Row], leaf: int | None):
        self.rows = {row["id"]: row for row in rows}
        self.parents: dict[int, int | None] = {}
        self.implied: set[int] = set()  # rows written before branches (or by hand): they follow the row before them
        previous = None
        for row in rows:
            parent = row["parent_id"] if "parent_id" in row.keys() else None
            if not isinstance(parent, int) or isinstance(parent, bool):
                self.implied.add(row["id"])
                parent = previous
            elif parent == ROOT or parent not in self.rows:
                parent = None
            self.parents[row["id"]] = parent
            previous = row["id"]
        self.children: dict[int | None, list[int]] = {}
        for message_id, parent in self.parents.items():
            self.children.setdefault(parent, []).append(message_id)
        if leaf == ROOT:
            self.leaf = None
        else:
            self.leaf = leaf if leaf in self.rows else (rows[-1]["id"] if rows else None)

    def parent(self, message_id: int) -> int | None:
        """The message before this one on its branch (None for a first message)."""
        return self.parents.get(message_id)

    def path_ids(self) -> list[int]:
        """Ids of the branch shown, first message first: up from the leaf, then on through rows that follow it
        without a recorded parent."""
        ids = []
        node = self.leaf
        while node is not None:
            ids.append(node)
            node = self.parents[node]
        ids.reverse()
        node = self.leaf
        while True:
            implied = [child for child in self.children.get(node, []) if child in self.implied]
            if not implied:
                return ids
            node = implied[-1]
            ids.append(node)

    def versions(self, message_id: int) -> list[int]:
        """Ids of the messages with this one's parent and role (its versions, itself included), oldest first."""
        role = self.rows[message_id]["role"]
        return [i for i in self.children.get(self.parents[message_id], []) if self.rows[i]["role"] == role]

    def latest_descendant(self, message_id: int) -> int:
        """The end of this message's continuation shown last: at each step the version chosen last (a version
        switched to, or the newest one written), else the newest (the message itself when nothing follows it)."""
        node = message_id
        while self.children.get(node):
            children = self.children[node]
            chosen = self.rows[node]["chosen_id"] if "chosen_id" in self.rows[node].keys() else None
            node = chosen if chosen in children else children[-1]
        return node

    def descendants(self, message_id: int) -> list[int]:
        """Every message that follows this one, on any branch."""
        found, stack = [], list(self.children.get(message_id, []))
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(self.children.get(node, []))
        return found

    def message(self, message_id: int) -> Message:
        """The row as a Message, with its parent and versions."""
        message = message_from_row(self.rows[message_id])
        message.parent_id = None if message_id in self.implied else (self.parents[message_id] or ROOT)
        message.versions = self.versions(message_id)
        return message

    def path(self) -> list[Message]:
        """The messages of the branch shown."""
        return [self.message(message_id) for message_id in self.path_ids()]
