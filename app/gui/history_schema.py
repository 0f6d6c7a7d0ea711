"""The chat history's SQLite schema: the migrations from an empty file to the current version.

``PRAGMA user_version`` holds a database's schema version; ``history_db.HistoryDB`` applies the missing steps when it
opens one, each step in one transaction with its version bump. A step is never changed once released: a new column
or index is a new step at the end. A step may call the SQL functions of :data:`SQL_FUNCTIONS`, which ``HistoryDB``
registers on its connection before it migrates.
"""

from __future__ import annotations

from collections.abc import Callable

from .chat_titles import title_before_2026_12_07, title_cut_at_any_word, title_from


def _of_text(rule: Callable[[str], str]) -> Callable[[bytes | None], str | None]:
    """``rule`` as an SQL function of a column's bytes (``CAST(column AS BLOB)``: text that is not UTF-8 would make
    SQLite's call fail, and the migration with it): None where they are no UTF-8 text."""

    def of_bytes(raw: bytes | None) -> str | None:
        try:
            return rule(raw.decode("utf-8")) if isinstance(raw, bytes) else None
        except UnicodeDecodeError:
            return None

    return of_bytes


#: SQL functions the migrations call, by name: each takes a column as bytes (``CAST(column AS BLOB)``).
SQL_FUNCTIONS: dict[str, Callable[[bytes | None], str | None]] = {
    "chat_title": _of_text(title_from),
    "chat_title_before_2026_12_07": _of_text(title_before_2026_12_07),
    "chat_title_cut_at_any_word": _of_text(title_cut_at_any_word),
}

def _titled_after(rule: str) -> str:
    """The newest first user message whose title by the SQL function ``rule`` is the chat's title (``chat_titles``):
    a first message of a branch (parent ROOT, 0) or, in rows written before branches (parent NULL), the chat's first
    row; NULL if none."""
    return f"""(SELECT CAST(content AS BLOB) FROM messages
    WHERE conversation_id = conversations.id AND role = 'user'
        AND (parent_id = 0 OR (parent_id IS NULL AND position = (
            SELECT MIN(position) FROM messages AS first WHERE first.conversation_id = conversations.id)))
        AND {rule}(CAST(content AS BLOB)) = conversations.title
    ORDER BY id DESC LIMIT 1)"""


_TITLED_AFTER = _titled_after("chat_title_before_2026_12_07")
_TITLED_AT_ANY_WORD = _titled_after("chat_title_cut_at_any_word")

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
    # 6: titles cut by the rule before 2026-12-07 ("…" at 48 characters) get today's rule's title, so that editing
    # the first message retitles the chat again; a title the user chose is no first message's title and stays
    (f"UPDATE conversations SET title = chat_title({_TITLED_AFTER}) "
     f"WHERE substr(title, -1) = '…' AND {_TITLED_AFTER} IS NOT NULL",),  # fmt: skip
    # 7: titles cut at any word on 2026-12-07 ("…in all .py files, in a") get today's rule's, which ends on a word
    # that reads as an end; a title the user chose is no first message's title and stays
    (f"UPDATE conversations SET title = chat_title({_TITLED_AT_ANY_WORD}) "
     f"WHERE {_TITLED_AT_ANY_WORD} IS NOT NULL",),  # fmt: skip
]
SCHEMA_VERSION = len(MIGRATIONS)
