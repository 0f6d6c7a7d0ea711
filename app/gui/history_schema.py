"""The chat history's SQLite schema: the migrations from an empty file to the current version.

``PRAGMA user_version`` holds a database's schema version; ``history_db.HistoryDB`` applies the missing steps when it
opens one, each step in one transaction with its version bump. A step is never changed once released: a new column
or index is a new step at the end.
"""

from __future__ import annotations

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
