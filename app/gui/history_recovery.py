"""Opening the chat history whatever state its file is in: repair, rebuild from the tables, or start afresh.

``open_history`` is how the app opens its history (``history_db`` describes the damage each step handles): a file
``HistoryDB`` repairs in place opens as it is; one whose damage lies only in its indexes is rebuilt from its tables
(:func:`rebuild`), the damaged file kept beside it; one that cannot be read is moved aside (never overwritten) and a
new history started; one that cannot be opened now, or was written by a newer SpecChat, is left alone and the
session's chats are kept in memory. Each outcome but the first comes with a message for the user.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from pathlib import Path

from .. import user_files
from .history_db import (
    HistoryDB,
    HistoryTooNewError,
    HistoryUnavailableError,
    HistoryUnreadableError,
    first_damage_line,
    history_path,
)

logger = logging.getLogger(__name__)


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
            raise sqlite3.DatabaseError(f"the rebuilt history failed its check: {first_damage_line(left)}")
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
