"""Chat history in SQLite: conversations and messages, WAL mode, versioned schema with migrations.

The database lives in ``inference.models.store.data_dir() / "history.sqlite3"`` (the platformdirs user data
folder, or ``$SPECCHAT_DATA_DIR``). Every write commits at once, so a killed process loses nothing that was
written; the GUI writes a user message before generation starts and a streaming reply at least every second.

Damage ``PRAGMA quick_check`` finds is repaired where SQLite can, in two steps (an index holds nothing its table
does not, so a damaged index page loses nothing): ``REINDEX`` rebuilds every index in place; where that fails
(SQLite cannot even free a page it cannot read) and the damage lies outside the tables
(``history_recovery.only_indexes_damaged``), ``history_recovery.rebuild`` copies every row of the tables into a new database whose indexes are built afresh, which takes the
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

Beside this store: ``history_schema`` (the migrations), ``history_recovery`` (``open_history``: opening a damaged
file) and ``history_transfer`` (JSON and Markdown export, JSON import).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .chat_titles import first_line, title_from
from .history_rows import ROLES, ROOT, STATES, Branches, Conversation, Message, conversation_from_row, decode_text
from .history_schema import MIGRATIONS, SCHEMA_VERSION, SQL_FUNCTIONS

logger = logging.getLogger(__name__)

DB_NAME = "history.sqlite3"
#: How long a write waits for another connection's lock before failing with "database is locked".
BUSY_TIMEOUT_MS = 5000
#: Characters of a first message read to tell whether its chat's title was cut from its first line: the title needs
#: the line's first ``TITLE_LENGTH`` + 1 (blank lines before it aside).
TITLE_HEAD_CHARS = 1000
#: ``PRAGMA quick_check`` lines about one row breaking a constraint (a NULL or CHECK failure, a STRICT type):
#: the file itself is sound, so it is opened and the row shown as unreadable.
ROW_PROBLEM = re.compile(r"^(NULL value in \S+|CHECK constraint failed in \S+|non-\w+ value in \S+)$")




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
            self._db.text_factory = decode_text
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
            for name, function in SQL_FUNCTIONS.items():
                self._db.create_function(name, 1, function, deterministic=True)
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
        found = first_damage_line(damage)
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
        return conversation_from_row(row) if row else None

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
        conversations = [conversation_from_row(row) for row in self._db.execute(query, params)]
        cut = self._titles_cut()
        for conversation in conversations:
            conversation.title_cut = conversation.title in cut.get(conversation.id, ())
        return conversations

    def _titles_cut(self) -> dict[int, set[str]]:
        """Per conversation, the titles cut from the first line of a version of its first user message
        (``chat_titles.title_from`` shorter than that line), which the chat list ends in "…": the title is stored
        without it (Rename showed it). Only each message's start is read (a paste may be megabytes)."""
        rows = self._db.execute(
            "SELECT conversation_id, substr(content, 1, ?) AS head FROM messages m WHERE role = 'user' AND"
            " (parent_id = ? OR (parent_id IS NULL AND position ="
            " (SELECT MIN(position) FROM messages f WHERE f.conversation_id = m.conversation_id)))",
            (TITLE_HEAD_CHARS, ROOT),
        )
        cut: dict[int, set[str]] = {}
        for row in rows:
            head = row["head"]
            if isinstance(head, str) and (title := title_from(head)) != first_line(head):
                cut.setdefault(row["conversation_id"], set()).add(title)
        return cut

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
        return Branches(self._rows(conversation_id), self._leaf(conversation_id)).path()

    def message(self, message_id: int) -> Message | None:
        """The message with this id (with its versions), or None."""
        row = self._db.execute("SELECT conversation_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        tree = Branches(self._rows(row["conversation_id"]), None)
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
            tree = Branches(self._rows(conversation_id), self._leaf(conversation_id))
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
        tree = Branches(self._rows(row["conversation_id"]), None)
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
        tree = Branches(self._rows(conversation_id), self._leaf(conversation_id))
        doomed = tree.descendants(message_id) + [message_id]
        others = [version for version in tree.versions(message_id) if version != message_id]
        parent = tree.parent(message_id)
        with self.transaction():
            self._db.executemany("DELETE FROM messages WHERE id = ?", [(doomed_id,) for doomed_id in doomed])
            if tree.leaf in doomed:
                leaf = tree.latest_descendant(others[-1]) if others else parent
                self._set_leaf(conversation_id, ROOT if leaf is None else leaf)


    # --- import ----------------------------------------------------------------------------------

    def add_imported_conversation(self, title: str, system_prompt: str, json_output: bool, created_at: float,
                                  messages: list[dict]) -> int:
        """Write a conversation read from an export (``history_transfer.import_json`` checks it first) in one
        transaction, its messages one branch in order; return its id.

        Args:
            messages: dicts with ``role``, ``content`` (text, or None for a message exported unreadable: stored as
                an empty BLOB, the column cannot hold NULL, so it reads as an unreadable placeholder again),
                and optionally ``created_at`` (default now), ``state``, ``stats``, ``draft_spans``.
        """
        now = time.time()
        with self.transaction():
            cursor = self._db.execute(
                "INSERT INTO conversations (title, system_prompt, created_at, updated_at, json_output) VALUES (?, ?, ?, ?, ?)",
                (title, system_prompt, created_at, now, int(json_output)),
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

def first_damage_line(damage: list[str]) -> str:
    """The first line of ``quick_check``'s report that says something (it starts with ``*** in database main ***``)."""
    lines = [line for text in damage for line in text.splitlines() if line.strip() and not line.startswith("***")]
    return lines[0] if lines else damage[0]
