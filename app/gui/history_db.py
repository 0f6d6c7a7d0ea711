"""Chat history in SQLite: conversations and messages, WAL mode, versioned schema with migrations.

The database lives in ``inference.models.store.data_dir() / "history.sqlite3"`` (the platformdirs user data
folder, or ``$SPECCHAT_DATA_DIR``). Every write commits at once, so a killed process loses nothing that was
written; the GUI writes a user message before generation starts and a streaming reply at least every second.

Damage ``PRAGMA quick_check`` finds is repaired where SQLite can, in two steps (an index holds nothing its table
does not, so a damaged index page loses nothing): ``REINDEX`` rebuilds every index in place; where that fails
(SQLite cannot even free a page it cannot read) and the damage lies outside the tables (:func:`only_indexes_damaged`),
:func:`rebuild` copies every row of the tables into a new database whose indexes are built afresh, which takes the
file's place, the damaged file kept beside it. A database with a damaged table, or that SQLite calls corrupt or not
a database (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``), is renamed to ``history.sqlite3.unreadable-<time>`` (with its
``-wal``/``-shm`` files) and a fresh one is started: it is never overwritten. Anything else is left untouched: a database written by a newer
SpecChat (schema version above ours), one that cannot be opened now (locked, no permission), and a healthy file
with bad rows (a NULL or binary message text, statistics that are not the JSON SpecChat writes), whose good rows
are shown and whose bad messages are shown as "unreadable message" placeholders (:attr:`Message.unreadable`),
never rewritten.

Chat branches: regenerating a reply or editing and resending a message keeps the earlier version. Each message
records its parent (``parent_id``: the message before it on its branch, ``ROOT`` for a first message), versions of a
message are the messages with the same parent, and a conversation shows one path, from its first message to
``leaf_id``; choosing another version (:meth:`HistoryDB.select_version`) shows that version's continuation as last
chosen: each message records the version after it shown last (``chosen_id``: switched to, or the newest written;
NULL before schema version 5, when the newest is shown).
Rows written before schema version 4 have no parent (NULL): each follows the row before it (``position`` orders a
conversation's rows by creation), so earlier histories read as they did, without rewriting a row.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import user_files
from ..bounded_json import depth_exceeds
from .message_fields import spans_problem, stats_problem

logger = logging.getLogger(__name__)

DB_NAME = "history.sqlite3"
EXPORT_FORMAT = "specchat-conversation"
EXPORT_VERSION = 1
ROLES = ("user", "assistant")
#: Message states: a finished reply, one still streaming (or interrupted by a crash), stopped by the user, failed.
STATES = ("complete", "streaming", "stopped", "error")
#: How long a write waits for another connection's lock before failing with "database is locked".
BUSY_TIMEOUT_MS = 5000
#: Largest JSON export :func:`read_export` reads (a conversation of 10,000 long messages is about 50 MB).
MAX_IMPORT_BYTES = 50 * 1024 * 1024
#: Deepest nesting of lists and objects an import accepts (an export nests 5 deep).
MAX_IMPORT_DEPTH = 16
#: Latest time an import accepts, seconds since 1970 (the last second of year 9999).
MAX_TIME = 253402300799
#: ``PRAGMA quick_check`` lines about one row breaking a constraint (a NULL or CHECK failure, a STRICT type):
#: the file itself is sound, so it is opened and the row shown as unreadable.
ROW_PROBLEM = re.compile(r"^(NULL value in \S+|CHECK constraint failed in \S+|non-\w+ value in \S+)$")


#: MIGRATIONS[i] brings a database from schema version i to i + 1 (``PRAGMA user_version``); each runs in one
#: transaction together with the version bump, so a crash mid-migration leaves the previous version intact.
MIGRATIONS: list[tuple[str, ...]] = [
    # 1: conversations and their messages
    (
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL,
            created_at REAL NOT NULL,
            UNIQUE (conversation_id, position)
        )""",
    ),
    # 2: streaming state of a reply, its statistics (JSON), spans of accepted draft tokens (JSON)
    (
        "ALTER TABLE messages ADD COLUMN state TEXT NOT NULL DEFAULT 'complete'",
        "ALTER TABLE messages ADD COLUMN stats TEXT",
        "ALTER TABLE messages ADD COLUMN draft_spans TEXT",
        "CREATE INDEX conversations_by_update ON conversations(updated_at)",
    ),
    # 3: the conversation's replies are JSON objects (structured output, "JSON output" in the window)
    ("ALTER TABLE conversations ADD COLUMN json_output INTEGER NOT NULL DEFAULT 0",),
    # 4: chat branches: each message's parent (NULL in earlier rows: the row before it), the last message shown
    (
        "ALTER TABLE messages ADD COLUMN parent_id INTEGER",
        "ALTER TABLE conversations ADD COLUMN leaf_id INTEGER",
        "CREATE INDEX messages_by_parent ON messages(parent_id)",
    ),
    # 5: the version of each message's continuation chosen last (NULL: none chosen, its newest is shown)
    ("ALTER TABLE messages ADD COLUMN chosen_id INTEGER",),
]
SCHEMA_VERSION = len(MIGRATIONS)
#: ``parent_id`` of a conversation's first message (and ``leaf_id`` of a conversation whose path is empty while its
#: first message is being replaced). NULL means a row written before branches: its parent is the row before it.
ROOT = 0


class HistoryUnreadableError(RuntimeError):
    """The database file is not a readable SpecChat history (corrupt, not SQLite, or failing its check).

    Attributes:
        damage: what ``PRAGMA quick_check`` found, line by line ([] when SQLite refused the file before checking it).
    """

    def __init__(self, message: str, damage: list[str] | None = None):
        super().__init__(message)
        self.damage = damage or []


class HistoryTooNewError(RuntimeError):
    """The database was written by a newer SpecChat whose schema this version does not know."""


class HistoryUnavailableError(RuntimeError):
    """The database cannot be opened now (locked by another program, no permission...); the file may be fine."""


def is_corruption(error: sqlite3.Error) -> bool:
    """True when SQLite says the file is damaged or not a database (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``; from
    the message on Pythons before 3.11, which have no ``sqlite_errorcode``)."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    text = str(error).lower()
    return "malformed" in text or "not a database" in text


def write_error_text(error: sqlite3.Error) -> str:
    """What a failed history write means and what to do, in one line (a full disk, a database held by another
    program past the busy timeout, a read-only file, a failing disk), from ``sqlite_errorcode`` or the message."""
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if code is not None else None
    text = str(error).lower()
    if primary == sqlite3.SQLITE_FULL or "full" in text:
        advice = "the disk is full: free some space, then try again"
    elif primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text or "busy" in text:
        advice = "another program holds the history database (another SpecChat?): close it, then try again"
    elif primary == sqlite3.SQLITE_READONLY or "readonly" in text or "read-only" in text:
        advice = "the history file cannot be written: check its permissions, then try again"
    else:
        advice = "check the disk, then try again"
    return f"{error} — {advice}"


class UndecodableText(bytes):
    """A TEXT value that is not valid UTF-8 (its raw bytes): read as such instead of failing the whole query."""


def _decode_text(raw: bytes) -> str | UndecodableText:
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


def history_path() -> Path:
    """Where the history database lives: ``data_dir() / "history.sqlite3"`` (honours ``$SPECCHAT_DATA_DIR``)."""
    from inference.models.store import data_dir

    return data_dir() / DB_NAME


class HistoryDB:
    """The chat history database (one connection, used from the GUI thread only).

    Args:
        path: the database file (created with its folder if missing), or ``":memory:"``.

    Damage that rebuilding the indexes repairs (``REINDEX``) is repaired on opening, and logged.

    Raises:
        HistoryUnreadableError: SQLite says the file is corrupt or not a database, and rebuilding its indexes did
            not repair it (move it aside).
        HistoryTooNewError: its schema version is newer than this SpecChat's.
        HistoryUnavailableError: it cannot be opened now (locked, no permission, a failing disk...): leave it.
    """

    def __init__(self, path: str | Path):
        self.path = path if path == ":memory:" else Path(path)
        if self.path != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        except sqlite3.Error as error:
            raise HistoryUnavailableError(f"cannot open {self.path}: {error}") from error
        try:
            self._db.row_factory = sqlite3.Row
            self._db.text_factory = _decode_text
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            damage = self._damage()
            if damage:
                self._repair(damage)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryTooNewError(
                    f"{self.path} was written by a newer SpecChat (history schema version {version}; this version "
                    f"understands up to {SCHEMA_VERSION}). Update SpecChat to open it; it was left untouched."
                )
            if self.path != ":memory:":
                mode = self._switch_to_wal()
                if mode.lower() != "wal":
                    raise HistoryUnreadableError(f"{self.path}: cannot switch to WAL mode (got {mode})")
            # WAL + NORMAL: a commit survives a crash of the process (not necessarily a power cut) and costs no fsync.
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate(version)
        except sqlite3.Error as error:
            self._db.close()
            if is_corruption(error):
                raise HistoryUnreadableError(f"{self.path} is not a readable SQLite database: {error}") from error
            raise HistoryUnavailableError(f"cannot open {self.path}: {error}") from error
        except BaseException:
            self._db.close()
            raise

    def _switch_to_wal(self) -> str:
        """``PRAGMA journal_mode = WAL``, tried again until the busy timeout has passed; returns the mode it set.

        The switch needs the exclusive lock, and SQLite fails it at once with "database is locked" (without calling
        the busy handler, to avoid a deadlock between two readers upgrading) when another connection holds a lock,
        as SpecChats started together on a new history do. Retries back off from 5 to 100 ms.

        Raises:
            sqlite3.OperationalError: still locked after :data:`BUSY_TIMEOUT_MS`, or any other error at once.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause_s = 0.005
        while True:
            try:
                return self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as error:
                if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() + pause_s > deadline:
                    raise
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, 0.1)

    def _damage(self) -> list[str]:
        """What ``PRAGMA quick_check`` finds, less a single row breaking a constraint (shown as unreadable); a check
        that SQLite stops as corrupt is one line of damage."""
        try:
            lines = [row[0] for row in self._db.execute("PRAGMA quick_check") if row[0] != "ok"]
        except sqlite3.DatabaseError as error:
            if not is_corruption(error):
                raise
            lines = [str(error)]
        return [line for line in lines if not ROW_PROBLEM.match(line)]

    def _repair(self, damage: list[str]) -> None:
        """Rebuild every index from its table (``REINDEX``), which is what SQLite can repair in place; the tables are
        not written. It runs in one transaction, kept only if ``quick_check`` then passes: a repair that does not
        succeed leaves the file as it was.

        Raises:
            HistoryUnreadableError: damage is left (a table's pages), or the rebuild failed on it (``damage`` the
                lines found before).
        """
        found = _first_line(damage)
        repaired = False
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("REINDEX")
            repaired = not self._damage()
        except sqlite3.DatabaseError as error:
            if not is_corruption(error):
                raise
            repaired = False
        finally:
            if self._db.in_transaction:
                self._db.execute("COMMIT" if repaired else "ROLLBACK")
        if not repaired:
            raise HistoryUnreadableError(f"{self.path} failed its integrity check: {found}",
                                         [line for text in damage for line in text.splitlines()])
        logger.warning("%s failed its integrity check (%s); REINDEX rebuilt its indexes, and it passes now",
                       self.path, found)

    @property
    def schema_version(self) -> int:
        """``PRAGMA user_version`` of the open database."""
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    @property
    def journal_mode(self) -> str:
        """SQLite journal mode (``wal`` for a file database)."""
        return self._db.execute("PRAGMA journal_mode").fetchone()[0]

    @property
    def in_memory(self) -> bool:
        """True for a history kept in memory only (lost when the process ends)."""
        return self.path == ":memory:"

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run the block's statements as one write transaction (``BEGIN IMMEDIATE``: the write lock is taken at
        once, waiting up to the busy timeout); committed at the end, rolled back if the block raises. Inside another
        transaction the block is part of it (committed or rolled back with it)."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a failed COMMIT (disk full) may already have rolled back
                self._db.execute("ROLLBACK")
            raise

    def _migrate(self, version: int) -> None:
        """Bring the schema from ``version`` to SCHEMA_VERSION, one step per transaction. The version is read again
        under the write lock: another SpecChat starting at the same moment may have migrated in the meantime."""
        if version >= SCHEMA_VERSION:
            return
        while True:
            with self.transaction():
                current = self._db.execute("PRAGMA user_version").fetchone()[0]
                if current >= SCHEMA_VERSION:
                    return
                for statement in MIGRATIONS[current]:
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {current + 1}")

    def close(self) -> None:
        """Close the connection (checkpointing the WAL)."""
        self._db.close()

    # --- conversations ---------------------------------------------------------------------------

    def create_conversation(self, title: str = "New chat", system_prompt: str = "", json_output: bool = False) -> int:
        """Add an empty conversation; return its id."""
        now = time.time()
        cursor = self._db.execute(
            "INSERT INTO conversations (title, system_prompt, created_at, updated_at, json_output) VALUES (?, ?, ?, ?, ?)",
            (title, system_prompt, now, now, int(json_output)),
        )
        return int(cursor.lastrowid)

    def conversation(self, conversation_id: int) -> Conversation | None:
        """The conversation with this id, or None."""
        row = self._db.execute(
            "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count "
            "FROM conversations c WHERE c.id = ?",
            (conversation_id,),
        ).fetchone()
        return _conversation(row) if row else None

    def conversations(self, search: str = "") -> list[Conversation]:
        """All conversations, most recently updated first; with ``search``, those whose title or any message
        contains it (case-insensitive for ASCII letters)."""
        query = (
            "SELECT c.*, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count "
            "FROM conversations c"
        )
        params: tuple = ()
        if search.strip():
            pattern = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            query += (
                " WHERE c.title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id"
                " AND m.content LIKE ? ESCAPE '\\')"
            )
            params = (pattern, pattern)
        query += " ORDER BY c.updated_at DESC, c.id DESC"
        return [_conversation(row) for row in self._db.execute(query, params)]

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Set a conversation's title (stripped; an empty title is refused with ValueError)."""
        title = title.strip()
        if not title:
            raise ValueError("a conversation title cannot be empty")
        self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        """Set the system prompt used for the conversation's next replies."""
        self._db.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def set_json_output(self, conversation_id: int, json_output: bool) -> None:
        """Constrain the conversation's next replies to JSON objects, or not."""
        self._db.execute("UPDATE conversations SET json_output = ? WHERE id = ?", (int(json_output), conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation and its messages."""
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def _touch(self, conversation_id: int) -> None:
        self._db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time(), conversation_id))

    # --- messages --------------------------------------------------------------------------------

    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation's messages as shown: the chosen branch, from its first message to ``leaf_id``, each with
        its :attr:`Message.versions`."""
        return _Tree(self._rows(conversation_id), self._leaf(conversation_id)).path()

    def message(self, message_id: int) -> Message | None:
        """The message with this id (with its versions), or None."""
        row = self._db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        tree = _Tree(self._rows(row["conversation_id"]), None)
        return tree.message(message_id)

    def _rows(self, conversation_id: int) -> list[sqlite3.Row]:
        return self._db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY position, id", (conversation_id,)
        ).fetchall()

    def _leaf(self, conversation_id: int) -> int | None:
        row = self._db.execute("SELECT leaf_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row["leaf_id"] if row is not None and isinstance(row["leaf_id"], int) else None

    def _set_leaf(self, conversation_id: int, leaf_id: int) -> None:
        self._db.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (leaf_id, conversation_id))

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        state: str = "complete",
        stats: dict | None = None,
        draft_spans: list | None = None,
        created_at: float | None = None,
        replaces: int | None = None,
    ) -> int:
        """Append a message to the conversation's chosen branch, which then ends with it (committed at once);
        return its id. With ``replaces`` (a message's id) it is a new version of that message instead (regenerate,
        edit and resend): it follows what that message follows, and the earlier version stays, with what followed
        it, as another branch."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        with self.transaction():
            tree = _Tree(self._rows(conversation_id), self._leaf(conversation_id))
            if replaces is not None and replaces in tree.rows:
                parent = tree.parent(replaces)
            else:
                path = tree.path_ids()
                parent = path[-1] if path else None
            position = self._db.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()[0]
            cursor = self._db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, created_at, state, stats, draft_spans,"
                " parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    position,
                    role,
                    content,
                    created_at if created_at is not None else time.time(),
                    state,
                    json.dumps(stats) if stats else None,
                    json.dumps(draft_spans) if draft_spans else None,
                    ROOT if parent is None else parent,
                ),
            )
            self._set_leaf(conversation_id, int(cursor.lastrowid))
            self._choose(parent, int(cursor.lastrowid))
            self._touch(conversation_id)
        return int(cursor.lastrowid)

    def _choose(self, parent: int | None, message_id: int) -> None:
        """Record ``message_id`` as the version shown after ``parent`` (None: a first message, which the
        conversation's branch records)."""
        if parent is not None:
            self._db.execute("UPDATE messages SET chosen_id = ? WHERE id = ?", (message_id, parent))

    def select_version(self, message_id: int) -> int | None:
        """Show this version of a message: the conversation's branch goes through it and on to its latest
        continuation; returns the conversation's id, or None when there is no such message."""
        row = self._db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        tree = _Tree(self._rows(row["conversation_id"]), None)
        with self.transaction():
            self._choose(tree.parent(message_id), message_id)
            self._set_leaf(row["conversation_id"], tree.latest_descendant(message_id))
        return row["conversation_id"]

    def update_message(
        self,
        message_id: int,
        content: str | None = None,
        state: str | None = None,
        stats: dict | None = None,
        draft_spans: list | None = None,
    ) -> None:
        """Change some fields of a message (committed at once); None leaves a field as it is."""
        sets, params = [], []
        for column, value in (("content", content), ("state", state)):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(value)
        for column, value in (("stats", stats), ("draft_spans", draft_spans)):
            if value is not None:
                sets.append(f"{column} = ?")
                params.append(json.dumps(value))
        if state is not None and state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
        if sets:
            self._db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*params, message_id))

    def delete_message(self, message_id: int) -> None:
        """Delete one message and what follows it on its branches (a reply that failed before producing any text);
        the conversation then shows its latest other version (an earlier reply, when a regenerated one failed), or
        the branch up to the message before it."""
        row = self._db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return
        conversation_id = row["conversation_id"]
        tree = _Tree(self._rows(conversation_id), self._leaf(conversation_id))
        doomed = tree.descendants(message_id) + [message_id]
        others = [version for version in tree.versions(message_id) if version != message_id]
        parent = tree.parent(message_id)
        with self.transaction():
            self._db.executemany("DELETE FROM messages WHERE id = ?", [(doomed_id,) for doomed_id in doomed])
            if tree.leaf in doomed:
                leaf = tree.latest_descendant(others[-1]) if others else parent
                self._set_leaf(conversation_id, ROOT if leaf is None else leaf)

    # --- export / import -------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> dict[str, Any]:
        """A conversation as a JSON-serialisable dict (``format: specchat-conversation``, version 1), as the app reads
        it: an unreadable message's ``content`` is null, statistics or spans it cannot use are ``{}`` / ``[]``."""
        conversation = self.conversation(conversation_id)
        if conversation is None:
            raise ValueError(f"no conversation with id {conversation_id}")
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "title": conversation.title,
            "system_prompt": conversation.system_prompt,
            "json_output": conversation.json_output,
            "created_at": conversation.created_at,
            "messages": [
                {
                    "role": m.role,
                    "content": None if m.unreadable else m.content,
                    "created_at": m.created_at,
                    "state": m.state,
                    "stats": m.stats,
                    "draft_spans": m.draft_spans,
                }
                for m in self.messages(conversation_id)
            ],
        }

    def export_markdown(self, conversation_id: int) -> str:
        """A conversation as a Markdown document (title, system prompt, then each message under a heading)."""
        from .reply_format import export_footer_text

        conversation = self.conversation(conversation_id)
        if conversation is None:
            raise ValueError(f"no conversation with id {conversation_id}")
        lines = [f"# {conversation.title}", ""]
        if conversation.system_prompt:
            lines += ["**System prompt:**", "", *(f"> {line}" for line in conversation.system_prompt.splitlines()), ""]
        for message in self.messages(conversation_id):
            text = f"*(unreadable message: {message.unreadable})*" if message.unreadable else message.content
            fence = unclosed_fence(text)
            if fence:  # a reply cut off inside a code block: close it, or the rest of the file reads as code
                text += ("" if text.endswith("\n") else "\n") + fence
            lines += [f"## {'User' if message.role == 'user' else 'Assistant'}", "", text, ""]
            footer = export_footer_text(message.stats, message.state) if message.role == "assistant" else ""
            if footer:
                lines += [f"*{footer}*", ""]
        return "\n".join(lines).rstrip() + "\n"

    def import_json(self, data: Any) -> int:
        """Add a conversation exported by :meth:`export_json`; return the new conversation's id.

        The whole structure is checked before anything is written. A message whose ``content`` is null (exported
        from an unreadable row) is imported as an unreadable placeholder again (an empty BLOB: the column cannot
        hold NULL), so export, import and export give the same JSON.

        Raises:
            ValueError: the data is not a SpecChat conversation export (the message names the field at fault).
        """
        messages = _checked_export(data)
        title = data.get("title")
        if not isinstance(title, str) or not title.strip():
            title = "Imported chat"
        now = time.time()
        with self.transaction():
            created = data["created_at"] if data.get("created_at") is not None else now
            cursor = self._db.execute(
                "INSERT INTO conversations (title, system_prompt, created_at, updated_at, json_output) VALUES (?, ?, ?, ?, ?)",
                (title.strip(), data.get("system_prompt", ""), created, now, int(data.get("json_output", False))),
            )
            conversation_id = int(cursor.lastrowid)
            parent = ROOT
            for position, message in enumerate(messages):
                stats, spans = message.get("stats") or {}, message.get("draft_spans") or []
                content = message["content"]
                cursor = self._db.execute(
                    "INSERT INTO messages (conversation_id, position, role, content, created_at, state, stats, draft_spans,"
                    " parent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        conversation_id,
                        position,
                        message["role"],
                        b"" if content is None else content,
                        message["created_at"] if message.get("created_at") is not None else now,
                        message.get("state") if message.get("state") in STATES else "complete",
                        json.dumps(stats) if stats else None,
                        json.dumps(spans) if spans else None,
                        parent,
                    ),
                )
                parent = int(cursor.lastrowid)
            self._set_leaf(conversation_id, parent)
        return conversation_id


#: A line that opens a fenced code block (CommonMark): up to 3 spaces, 3 or more backticks or tildes, an info string.
_OPENING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
#: A line that can close one: up to 3 spaces, 3 or more backticks or tildes, nothing but spaces after them.
_CLOSING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")


def unclosed_fence(markdown: str) -> str:
    """The fence that closes the code block ``markdown`` leaves open at its end (a reply cut off inside one), or ""
    when it leaves none open. As CommonMark counts fences: a backtick fence's info string holds no backtick, and a
    block closes at a fence of the same character at least as long as the one that opened it."""
    opened = ""
    for line in markdown.split("\n"):
        if opened:
            closing = _CLOSING_FENCE.match(line)
            if closing and closing.group(1)[0] == opened[0] and len(closing.group(1)) >= len(opened):
                opened = ""
            continue
        opening = _OPENING_FENCE.match(line)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            opened = opening.group(1)
    return opened


def read_export(path: str | Path) -> Any:
    """Read a JSON export file (as written by File > Export as JSON) for :meth:`HistoryDB.import_json`.

    Raises:
        ValueError: the file is larger than MAX_IMPORT_BYTES, not UTF-8 text, not JSON, or nested deeper than
            MAX_IMPORT_DEPTH (the message says which).
        OSError: the file cannot be read.
    """
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_IMPORT_BYTES:
        raise ValueError(
            f"{path} is {size / 1e6:.0f} MB; a conversation export is at most {MAX_IMPORT_BYTES // (1024 * 1024)} MB"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not a text file: {error}") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    except RecursionError as error:
        raise ValueError(f"{path} nests lists or objects too deeply to be a conversation export") from error
    if depth_exceeds(data, MAX_IMPORT_DEPTH):
        raise ValueError(f"{path} nests lists or objects more than {MAX_IMPORT_DEPTH} deep: not a conversation export")
    return data


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _time_problem(value: Any) -> str | None:
    """Why an imported ``created_at`` cannot be stored (None when it can, or is left out): it must be seconds since
    1970, a finite number from 0 to :data:`MAX_TIME` (NaN would be stored as NULL, 2^63 overflows SQLite's integers)."""
    if value is None or (_is_time(value) and math.isfinite(value) and 0 <= value <= MAX_TIME):
        return None
    return f'"created_at" must be a time in seconds since 1970 (a number from 0 to {MAX_TIME}), got {value!r}'


def _first_line(damage: list[str]) -> str:
    """The first line of ``quick_check``'s report that says something (it starts with ``*** in database main ***``)."""
    lines = [line for text in damage for line in text.splitlines() if line.strip() and not line.startswith("***")]
    return lines[0] if lines else damage[0]


def _checked_export(data: Any) -> list[dict]:
    """The messages of an export after checking every field import_json writes; ValueError names the first wrong one."""
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ValueError(f"not a SpecChat conversation export (expected \"format\": \"{EXPORT_FORMAT}\")")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > EXPORT_VERSION:
        raise ValueError(f"unsupported export version {version!r} (this SpecChat reads version {EXPORT_VERSION})")
    if depth_exceeds(data, MAX_IMPORT_DEPTH):
        raise ValueError(f"the export nests lists or objects more than {MAX_IMPORT_DEPTH} deep")
    if not isinstance(data.get("system_prompt", ""), str):
        raise ValueError('"system_prompt" must be text')
    if not isinstance(data.get("json_output", False), bool):
        raise ValueError('"json_output" must be true or false')
    problem = _time_problem(data.get("created_at"))
    if problem:
        raise ValueError(f"the conversation's {problem}")
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ValueError('the export has no "messages" list')
    for index, message in enumerate(messages, 1):
        if not isinstance(message, dict) or message.get("role") not in ROLES or "content" not in message:
            raise ValueError(f'message {index} needs "role" (user or assistant) and "content" (text)')
        content = message["content"]
        if content is not None and not isinstance(content, str):
            raise ValueError(f'message {index}: "content" must be text (or null for an unreadable message)')
        if message.get("state", "complete") not in STATES:
            raise ValueError(f'message {index}: "state" must be one of {", ".join(STATES)}')
        stats = message.get("stats") or {}
        problem = (
            _time_problem(message.get("created_at"))
            or stats_problem(stats)
            or spans_problem(message.get("draft_spans") or [], len(content or ""))
        )
        if problem:
            raise ValueError(f"message {index}: {problem}")
    return messages


def _conversation(row: sqlite3.Row) -> Conversation:
    """A conversation row; a title or system prompt that is not text (hand-edited) reads as a placeholder / ""."""
    title, system_prompt = row["title"], row["system_prompt"]
    return Conversation(
        id=row["id"],
        title=title if isinstance(title, str) and title else "Untitled (unreadable title)",
        system_prompt=system_prompt if isinstance(system_prompt, str) else "",
        created_at=row["created_at"] if _is_time(row["created_at"]) else 0.0,
        updated_at=row["updated_at"] if _is_time(row["updated_at"]) else 0.0,
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


def _message(row: sqlite3.Row) -> Message:
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
        created_at=row["created_at"] if _is_time(row["created_at"]) else 0.0,
        state=row["state"] if row["state"] in STATES else "complete",
        stats={} if stats_problem(stats) else stats,
        draft_spans=[] if spans_problem(spans, len(content)) else spans,
        unreadable=unreadable,
    )


class _Tree:
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
        message = _message(self.rows[message_id])
        message.parent_id = None if message_id in self.implied else (self.parents[message_id] or ROOT)
        message.versions = self.versions(message_id)
        return message

    def path(self) -> list[Message]:
        """The messages of the branch shown."""
        return [self.message(message_id) for message_id in self.path_ids()]


def move_aside(path: Path) -> Path:
    """Rename a database file (and its ``-wal`` / ``-shm`` files) to ``<name>.unreadable-<time>``; return the new path."""
    return user_files.move_aside(path, ("-wal", "-shm"))


def only_indexes_damaged(path: Path, damage: list[str]) -> bool:
    """True when every page ``damage`` (``quick_check``'s lines) names lies outside the tables: each table's b-tree
    (its pages and overflow pages, walked by SQLite's ``dbstat``) reads without error and holds none of them, so
    the damage is in indexes or free pages and the tables can be copied whole. False when a line names no page (the
    check itself stopped), a table cannot be walked, or this SQLite has no ``dbstat``."""
    lines = [line for line in damage if line.strip() and not line.startswith("***")]  # (the "*** in database" head)
    named = [re.findall(r"\bpage (\d+)", line, re.IGNORECASE) for line in lines]
    if not lines or not all(named):
        return False
    pages = {int(number) for numbers in named for number in numbers}
    try:
        db = sqlite3.connect(str(path))  # (only read; a read-only connection would leave the -wal and -shm files)
    except sqlite3.Error:
        return False
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        for table in ["sqlite_schema", *tables]:
            if pages & {row[0] for row in db.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))}:
                return False
    except sqlite3.Error:
        return False
    finally:
        db.close()
    return True


def rebuild(path: Path) -> tuple[Path, int, int]:
    """Rebuild a damaged history from its tables: every row of every table is copied, by a full scan of the table
    itself (no index is read), into a new database of the same schema and version whose indexes are built from those
    rows; once it passes ``quick_check`` it takes the file's place, and the damaged file is moved aside.

    Returns:
        ``(where the damaged file went, conversations, messages)`` (the counts of the rebuilt history).

    Raises:
        sqlite3.Error: a table (or the schema) cannot be read whole: nothing was changed.
        OSError: the damaged file could not be moved aside: nothing was changed.
    """
    fresh = path.with_name(path.name + ".rebuilding")
    fresh.unlink(missing_ok=True)
    db = sqlite3.connect(str(fresh), isolation_level=None)
    try:
        db.execute("ATTACH DATABASE ? AS damaged", (str(path),))
        schema = db.execute(
            "SELECT type, name, sql FROM damaged.sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%' "
            "ESCAPE '\\'"
        ).fetchall()
        tables = [name for kind, name, _ in schema if kind == "table"]
        db.execute("BEGIN")
        for kind, _, sql in schema:
            if kind == "table":
                db.execute(sql)
        for name in tables:  # NOT INDEXED and a WHERE: a full scan of the table, never SQLite's copy of its indexes
            db.execute(f'INSERT INTO main."{name}" SELECT * FROM damaged."{name}" NOT INDEXED WHERE 1')
        if db.execute("SELECT 1 FROM damaged.sqlite_schema WHERE name = 'sqlite_sequence'").fetchone():
            db.execute("INSERT INTO main.sqlite_sequence SELECT * FROM damaged.sqlite_sequence NOT INDEXED WHERE 1")
        for kind, _, sql in schema:
            if kind == "index":
                db.execute(sql)
        db.execute(f"PRAGMA main.user_version = {int(db.execute('PRAGMA damaged.user_version').fetchone()[0])}")
        db.execute("COMMIT")
        db.execute("DETACH DATABASE damaged")
        left = [row[0] for row in db.execute("PRAGMA quick_check") if row[0] != "ok"]
        if left:
            raise sqlite3.DatabaseError(f"the rebuilt history failed its check: {_first_line(left)}")
        counts = [db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("conversations", "messages")]
    except BaseException:
        db.close()
        fresh.unlink(missing_ok=True)
        raise
    db.close()
    try:
        moved = move_aside(path)
    except OSError:
        fresh.unlink(missing_ok=True)
        raise
    os.replace(fresh, path)
    return moved, counts[0], counts[1]


def open_history(path: str | Path | None = None) -> tuple[HistoryDB, str | None]:
    """Open the history database, recovering from an unreadable one.

    Returns:
        ``(db, notice)``: ``notice`` is None when all went well (damage ``REINDEX`` repaired in place included);
        otherwise a message for the user saying what happened and where the old file is. A damaged file whose tables
        can be read whole is rebuilt from them (:func:`rebuild`); one that cannot, or that is not a database, is
        moved aside and a new database started; a file from a newer SpecChat, one that cannot be opened now (locked,
        no permission) or cannot be moved, is left alone and the history is kept in memory for this session
        (``db.in_memory``).
    """
    path = Path(path) if path is not None else history_path()
    try:
        return HistoryDB(path), None
    except HistoryTooNewError as error:
        return HistoryDB(":memory:"), f"{error}\n\nChats of this session are kept in memory only and are lost when you quit."
    except HistoryUnavailableError as error:
        return HistoryDB(":memory:"), (
            f"Your chat history could not be opened ({error}). It was left untouched. Chats of this session are kept "
            "in memory only and are lost when you quit: close any other program using it (another SpecChat?), check "
            "its permissions and the disk, then restart SpecChat."
        )
    except HistoryUnreadableError as error:
        reason, damage = str(error), error.damage
    try:
        if not only_indexes_damaged(path, damage):
            raise sqlite3.DatabaseError("its damage is not in its indexes alone")
        moved, conversations, messages = rebuild(path)
    except (sqlite3.Error, OSError) as error:
        logger.warning("%s cannot be rebuilt from its tables: %s", path, error)
    else:
        try:
            db = HistoryDB(path)
        except (HistoryUnreadableError, HistoryTooNewError, HistoryUnavailableError) as error:
            return HistoryDB(":memory:"), (
                f"Could not open the rebuilt history at {path} ({error}); chats are kept in memory only."
            )
        return db, (
            f"Your chat history was damaged ({reason}).\n\nSpecChat rebuilt it from its tables: {conversations} "
            f"conversations and {messages} messages are back. The damaged file was kept as {moved}; delete it once "
            "your chats look right."
        )
    try:
        moved = move_aside(path)
    except OSError as error:
        return HistoryDB(":memory:"), (
            f"Your chat history could not be read ({reason}), and it could not be moved aside ({error}). "
            f"It was left untouched at {path}. Chats of this session are kept in memory only and are lost when you "
            "quit: check the file's permissions, or move it away yourself, then restart SpecChat."
        )
    try:
        db = HistoryDB(path)
    except (HistoryUnreadableError, HistoryTooNewError, HistoryUnavailableError) as error:
        return HistoryDB(":memory:"), f"Could not start a new history at {path} ({error}); chats are kept in memory only."
    return db, (
        f"Your chat history could not be read ({reason}).\n\nIt was moved to {moved} (nothing was deleted; "
        "`sqlite3 <file> .recover` may rescue its contents), and a new, empty history was started."
    )
