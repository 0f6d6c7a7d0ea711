"""The history database: WAL, migrations, never losing a file, export and import."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from helpers import bound_by_permissions

from app.gui.history_db import HistoryDB, HistoryTooNewError, HistoryUnreadableError, is_corruption, write_error_text
from app.gui.history_recovery import open_history
from app.gui.history_schema import MIGRATIONS, SCHEMA_VERSION
from app.gui.history_transfer import export_json, export_markdown, import_json


def test_new_database_is_wal_and_current(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    assert db.journal_mode == "wal"
    assert db.schema_version == SCHEMA_VERSION == 7
    db.close()


def test_version_1_database_is_migrated_keeping_its_messages(tmp_path):
    path = tmp_path / "old.sqlite3"
    raw = sqlite3.connect(path)
    raw.executescript(
        """
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL, role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL, created_at REAL NOT NULL, UNIQUE (conversation_id, position));
        INSERT INTO conversations VALUES (1, 'Old chat', 'Be brief.', 1.0, 2.0);
        INSERT INTO messages VALUES (1, 1, 0, 'user', 'Hi', 1.0);
        INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'Hello!', 1.5);
        PRAGMA user_version = 1;
        """
    )
    raw.close()
    db = HistoryDB(path)
    assert db.schema_version == SCHEMA_VERSION
    [conversation] = db.conversations()
    assert (conversation.title, conversation.system_prompt, conversation.message_count) == ("Old chat", "Be brief.", 2)
    assert conversation.json_output is False
    messages = db.messages(1)
    assert [(m.role, m.content, m.state, m.stats, m.draft_spans) for m in messages] == [
        ("user", "Hi", "complete", {}, []),
        ("assistant", "Hello!", "complete", {}, []),
    ]
    db.close()


def test_json_output_is_kept_with_the_conversation_and_its_export(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    plain, structured = db.create_conversation("plain"), db.create_conversation("json", json_output=True)
    assert (db.conversation(plain).json_output, db.conversation(structured).json_output) == (False, True)
    db.set_json_output(plain, True)
    db.set_json_output(structured, False)
    assert (db.conversation(plain).json_output, db.conversation(structured).json_output) == (True, False)
    exported = export_json(db, plain)
    assert exported["json_output"] is True
    assert db.conversation(import_json(db, exported)).json_output is True
    with pytest.raises(ValueError, match="json_output"):
        import_json(db, {**exported, "json_output": "yes"})
    db.close()


def test_newer_schema_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "h.sqlite3"
    HistoryDB(path).close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    before = path.read_bytes()
    with pytest.raises(HistoryTooNewError, match="newer SpecChat"):
        HistoryDB(path)
    db, notice = open_history(path)
    assert "newer SpecChat" in notice and "memory only" in notice
    assert db.path == ":memory:"
    assert path.read_bytes() == before
    db.close()


def test_corrupt_database_is_moved_aside_never_overwritten(tmp_path):
    path = tmp_path / "history.sqlite3"
    garbage = b"this is not a database " * 100
    path.write_bytes(garbage)
    with pytest.raises(HistoryUnreadableError):
        HistoryDB(path)
    db, notice = open_history(path)
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("history.sqlite3.unreadable-")]
    assert len(moved) == 1 and moved[0].read_bytes() == garbage
    assert str(moved[0]) in notice and "could not be read" in notice
    assert db.journal_mode == "wal" and db.conversations() == []
    db.add_message(db.create_conversation("fresh"), "user", "works")
    db.close()


def test_damaged_pages_fail_the_integrity_check_and_are_moved_aside(tmp_path):
    path = tmp_path / "history.sqlite3"
    db = HistoryDB(path)
    conversation = db.create_conversation("x")
    for i in range(200):
        db.add_message(conversation, "user", f"message {i} " * 50)
    db.close()
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 2, len(data), 4096):  # scribble over every page but the first two
        data[offset + 100 : offset + 400] = os.urandom(300)
    path.write_bytes(bytes(data))
    db, notice = open_history(path)
    assert notice is not None and "moved to" in notice
    assert db.conversations() == []
    db.close()


def _history_with_chats(path) -> dict[int, list[str]]:
    """A history of 40 conversations of 6 messages; returns each conversation's texts."""
    db = HistoryDB(path)
    texts = {}
    for i in range(40):
        conversation = db.create_conversation(f"chat {i}")
        texts[conversation] = [f"message {j} of chat {i} " + "x" * 300 for j in range(6)]
        for j, text in enumerate(texts[conversation]):
            db.add_message(conversation, ("user", "assistant")[j % 2], text)
    db.close()
    return texts


def _damage_root_page(path, name: str, how: str) -> bytes:
    """Damage the root page of the b-tree ``name`` (a table or an index) as a disk or a crash may, and return the
    file's bytes: ``fragmentation`` (its header miscounts its free bytes: the cells are intact), ``unreadable`` (its
    page type is 0: SQLite cannot read it, nor free it), ``cells`` (its cell pointers overwritten)."""
    with sqlite3.connect(path) as reader:
        page_size = reader.execute("PRAGMA page_size").fetchone()[0]
        root = reader.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (name,)).fetchone()[0]
    reader.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    if how == "fragmentation":
        data[start + 7] = 77
    elif how == "unreadable":
        data[start] = 0
    else:
        data[start + 8 : start + 208] = b"\xff" * 200
    path.write_bytes(bytes(data))
    checker = sqlite3.connect(path)
    try:
        assert checker.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    except sqlite3.DatabaseError:
        pass  # (so damaged that the check itself stops)
    checker.close()
    return bytes(data)


def _texts(db) -> dict[int, list[str]]:
    return {c.id: [m.content for m in db.messages(c.id)] for c in db.conversations()}


@pytest.mark.parametrize("index", ["sqlite_autoindex_messages_1", "conversations_by_update"])
def test_a_damaged_index_is_rebuilt_in_place_and_nothing_is_lost(tmp_path, index, caplog):
    """An index holds nothing that is not in its table: REINDEX rebuilds it where it lies, and the history opens
    whole, with no notice (the log says it)."""
    path = tmp_path / "history.sqlite3"
    texts = _history_with_chats(path)
    _damage_root_page(path, index, "fragmentation")
    db, notice = open_history(path)
    assert notice is None and not db.in_memory and _texts(db) == texts
    assert [c.title for c in db.conversations()] == [f"chat {i}" for i in reversed(range(40))]  # by the index
    assert db._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [p.name for p in tmp_path.iterdir() if ".unreadable-" in p.name] == []
    assert "Fragmentation of 0 bytes reported as 77 on page" in caplog.text and "REINDEX rebuilt" in caplog.text
    db.close()


@pytest.mark.parametrize("name", ["sqlite_autoindex_messages_1", "conversations_by_update"])
def test_an_index_reindex_cannot_repair_is_rebuilt_from_the_tables(tmp_path, name):
    """An index page SQLite cannot even free (REINDEX fails on it), the tables whole: every row is copied into a
    new history, which takes the file's place; the damaged file is kept beside it."""
    path = tmp_path / "history.sqlite3"
    texts = _history_with_chats(path)
    _damage_root_page(path, name, "unreadable")
    db, notice = open_history(path)
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("history.sqlite3.unreadable-")]
    assert len(moved) == 1 and str(moved[0]) in notice
    assert "SpecChat rebuilt it from its tables: 40 conversations and 240 messages are back" in notice
    assert not db.in_memory and _texts(db) == texts and db.schema_version == SCHEMA_VERSION
    assert [c.title for c in db.conversations()] == [f"chat {i}" for i in reversed(range(40))]
    assert db._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    added = db.create_conversation("after the repair")  # AUTOINCREMENT continues past the old ids
    assert added == max(texts) + 1 and db.journal_mode == "wal"
    db.close()


@pytest.mark.parametrize("how", ["cells", "fragmentation"])
def test_a_damaged_table_page_is_moved_aside_whole(tmp_path, how):
    """A table page holds the messages themselves: SQLite cannot repair it (nor can a copy of the table be trusted),
    so the file is kept aside as it is (``sqlite3 FILE .recover`` may rescue it) and a new history is started."""
    path = tmp_path / "history.sqlite3"
    _history_with_chats(path)
    damaged = _damage_root_page(path, "conversations", how)
    db, notice = open_history(path)
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("history.sqlite3.unreadable-")]
    assert len(moved) == 1 and moved[0].read_bytes() == damaged  # the failed repairs changed nothing
    assert "could not be read" in notice and str(moved[0]) in notice and "failed its integrity check" in notice
    assert db.conversations() == [] and not db.in_memory
    assert [p.name for p in tmp_path.iterdir() if "rebuilding" in p.name] == []
    db.close()


def test_a_file_without_read_permission_is_left_untouched(tmp_path):
    """Opened by a process the file's mode keeps out (as root too, as CI runs: helpers.bound_by_permissions)."""
    path = tmp_path / "history.sqlite3"
    HistoryDB(path).close()
    path.chmod(0)
    script = ("import json, sys; from app.gui.history_recovery import open_history; "
              "db, notice = open_history(sys.argv[1]); print(json.dumps([notice, db.in_memory]))")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120,
                            **bound_by_permissions())  # fmt: skip
    assert result.returncode == 0, result.stderr
    notice, in_memory = json.loads(result.stdout)
    assert "could not be opened" in notice and "left untouched" in notice and in_memory
    assert "unable to open database file" in notice  # (the permission, not something else)
    assert [p.name for p in tmp_path.iterdir() if ".unreadable-" in p.name] == []
    path.chmod(0o600)
    assert HistoryDB(path).schema_version == SCHEMA_VERSION  # untouched indeed


def test_a_database_locked_past_the_busy_timeout_is_left_untouched(tmp_path, monkeypatch):
    path = tmp_path / "history.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds the (new, empty) database
    holder.execute("CREATE TABLE other (x)")
    monkeypatch.setattr("app.gui.history_db.BUSY_TIMEOUT_MS", 100)
    db, notice = open_history(path)
    assert "database is locked" in notice and "left untouched" in notice and db.in_memory
    assert [p.name for p in tmp_path.iterdir() if ".unreadable-" in p.name] == []
    holder.execute("ROLLBACK")
    holder.close()
    db.close()


def test_conversations_search_rename_delete(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    a = db.create_conversation("Python questions")
    b = db.create_conversation("Cooking")
    db.add_message(b, "user", "How long do I boil an EGG?")
    db.add_message(a, "user", "What is a 100% list comprehension?")
    assert [c.id for c in db.conversations()] == [a, b]  # most recently updated first
    assert [c.id for c in db.conversations("egg")] == [b]  # case-insensitive, in message text
    assert [c.id for c in db.conversations("python")] == [a]  # in titles
    assert [c.id for c in db.conversations("100%")] == [a]  # LIKE wildcards are literal
    assert db.conversations("nothing like this") == []
    db.rename_conversation(a, "  Renamed  ")
    assert db.conversation(a).title == "Renamed"
    with pytest.raises(ValueError, match="empty"):
        db.rename_conversation(a, "   ")
    db.delete_conversation(b)
    assert db.conversation(b) is None and db.messages(b) == []
    db.close()


def test_streaming_reply_updates_and_truncation(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    db.add_message(c, "user", "one")
    reply = db.add_message(c, "assistant", "", state="streaming")
    db.update_message(reply, content="partial", draft_spans=[[0, 3]])
    other = HistoryDB(tmp_path / "h.sqlite3")  # another connection sees the committed partial reply at once
    [_, seen] = other.messages(c)
    assert (seen.content, seen.state, seen.draft_spans) == ("partial", "streaming", [[0, 3]])
    db.update_message(reply, content="partial reply", state="complete", stats={"mode": "ar", "tokens_per_s": 12.5})
    two = db.add_message(c, "user", "two")
    failed = db.add_message(c, "assistant", "", state="streaming")
    db.delete_message(failed)  # a reply that failed before any text: the branch ends before it again
    assert [m.id for m in db.messages(c)][-1] == two and db.message(failed) is None
    with pytest.raises(ValueError, match="state"):
        db.update_message(reply, state="weird")
    other.close()
    db.close()


def test_export_markdown_and_json_and_import_back(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("Export me", "You are terse.")
    db.add_message(c, "user", "Show code")
    stats = {"mode": "spec", "drafter": "lookup", "k": 4, "ttft_ms": 41.0, "tokens_per_s": 63.2,
             "acceptance_rate": 0.52, "discarded_tokens": 0, "rolls": 0, "new_tokens": 30}  # fmt: skip
    db.add_message(c, "assistant", "```python\nprint(1)\n```", stats=stats, draft_spans=[[0, 3]])
    markdown = export_markdown(db, c)
    assert markdown.startswith("# Export me\n")
    assert "> You are terse." in markdown
    assert "## User\n\nShow code" in markdown and "## Assistant\n\n```python\nprint(1)\n```" in markdown
    assert "*Speculative decoding (prompt lookup) · 52% of drafted tokens accepted · 30 tokens at 63.2 tokens/s, the first after 41 ms*" in markdown
    data = export_json(db, c)
    text = json.dumps(data)
    copy = import_json(db, json.loads(text))
    assert copy != c
    original, imported = export_json(db, c), export_json(db, copy)
    assert imported["title"] == "Export me (imported)" and imported["system_prompt"] == "You are terse."
    assert [(m["role"], m["content"], m["stats"], m["draft_spans"]) for m in imported["messages"]] == [
        (m["role"], m["content"], m["stats"], m["draft_spans"]) for m in original["messages"]
    ]
    db.close()


def test_an_imported_chat_is_told_apart_from_a_chat_of_the_same_title(tmp_path):
    """The trial imported a chat back and the list showed two identical "Export me" entries."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    original = db.create_conversation("Export me")
    db.add_message(original, "user", "Hello")
    exported = export_json(db, original)
    copies = [import_json(db, exported) for _ in range(3)]
    titles = [db.conversation(c).title for c in copies]
    assert titles == ["Export me (imported)", "Export me (imported 2)", "Export me (imported 3)"]
    again = import_json(db, export_json(db, copies[0]))  # a copy of the copy is numbered, not "(imported) (imported)"
    assert db.conversation(again).title == "Export me (imported 4)"
    listed = [conversation.title for conversation in db.conversations()]
    assert len(listed) == len(set(listed)) == 5
    other = HistoryDB(tmp_path / "other.sqlite3")  # into a history without it, the title stays as it was
    assert other.conversation(import_json(other, exported)).title == "Export me"
    assert other.conversation(import_json(other, export_json(db, copies[1]))).title == "Export me (imported 2)"
    other.close()
    db.close()


def test_markdown_export_closes_the_code_block_a_reply_was_cut_off_in_and_drops_the_window_hints(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("Cut off", "")
    limit = {"mode": "ar", "drafter": None, "ttft_ms": 54.2, "tokens_per_s": 61.04, "acceptance_rate": None,
             "discarded_tokens": 0, "rolls": 0, "new_tokens": 24, "stop_reason": "max_new_tokens",
             "target_model": "qwen2.5-0.5b-instruct-int4"}  # fmt: skip
    db.add_message(c, "user", "Write a loop")
    db.add_message(c, "assistant", "Here:\n\n```python\nfor i in range(3):\n    print(i)", stats=limit)
    db.add_message(c, "user", "And in a longer fence?")
    db.add_message(c, "assistant", "````md\n```\nnot the end\n~~~\n```", stats={**limit, "continued": 2})
    db.add_message(c, "user", "Closed ones stay as they are")
    db.add_message(c, "assistant", "~~~\ncode\n~~~~\n\n``` not a fence: a backtick in its info `x`", state="stopped",
                   stats={**limit, "stop_reason": "cancelled"})  # fmt: skip
    markdown = export_markdown(db, c)
    assert markdown == (
        "# Cut off\n\n"
        "## User\n\nWrite a loop\n\n"
        "## Assistant\n\nHere:\n\n```python\nfor i in range(3):\n    print(i)\n```\n\n"
        "*Cut off at the length limit · Plain decoding · 24 tokens at 61.0 tokens/s, the first after 54 ms"
        " · model qwen2.5-0.5b-instruct-int4*\n\n"
        "## User\n\nAnd in a longer fence?\n\n"
        "## Assistant\n\n````md\n```\nnot the end\n~~~\n```\n````\n\n"
        "*Cut off at the length limit · continued twice: 24 tokens in all · last part: Plain decoding · 61.0 tokens/s,"
        " the first after 54 ms · model qwen2.5-0.5b-instruct-int4*\n\n"
        "## User\n\nClosed ones stay as they are\n\n"
        "## Assistant\n\n~~~\ncode\n~~~~\n\n``` not a fence: a backtick in its info `x`\n\n"
        "*Stopped · Plain decoding · 24 tokens at 61.0 tokens/s, the first after 54 ms · model qwen2.5-0.5b-instruct-int4*\n"
    )
    assert "Continue" not in markdown and "TTFT" not in markdown and "discarded" not in markdown
    assert [m["content"] for m in export_json(db, c)["messages"]][1] == "Here:\n\n```python\nfor i in range(3):\n    print(i)"
    db.close()


@pytest.mark.parametrize(
    "data,message",
    [
        ([], "holds no messages"),
        ({"format": "other"}, "not a conversation SpecChat can import"),
        ({"hello": 1}, "not a conversation SpecChat can import"),
        ({"format": "specchat-conversation", "version": 7, "messages": []}, "unsupported export version 7"),
        ({"format": "specchat-conversation", "version": 1}, '"messages" list'),
        ({"format": "specchat-conversation", "version": 1, "messages": [{"role": "robot", "content": "x"}]}, "message 1"),
        ({"format": "specchat-conversation", "version": 1, "messages": [], "system_prompt": 5}, "system_prompt"),
        ({"format": "specchat-conversation", "version": 1, "messages": [], "created_at": float("nan")},
         "the conversation's \"created_at\" must be a time in seconds since 1970"),
        ({"format": "specchat-conversation", "version": 1, "messages": [], "created_at": 2**63},
         "the conversation's \"created_at\" must be a time"),
    ],
)
def test_import_refuses_bad_data_with_a_reason(tmp_path, data, message):
    db = HistoryDB(tmp_path / "h.sqlite3")
    with pytest.raises(ValueError, match=message):
        import_json(db, data)
    assert db.conversations() == []
    db.close()


def test_a_plain_chat_in_openai_format_imports_as_a_new_chat(tmp_path):
    """Newcomer trial: Jan's, LM Studio's and ChatGPT's users have chats as OpenAI's messages, which import refused
    ("not a SpecChat conversation export"). ``{"messages": [...]}`` or a bare list of them imports: the system
    message as the chat's system prompt, text parts joined, the title from the first user message."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    wrapped = {
        "model": "llama-3.2-3b", "title": "ignored",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Name a fruit."}, {"type": "text", "text": "Just one."}]},
            {"role": "assistant", "content": "Apple.", "id": "msg_1"},
        ],
    }  # fmt: skip
    chat = db.conversation(import_json(db, wrapped))
    assert (chat.title, chat.system_prompt, chat.json_output) == ("Name a fruit.", "You are terse.", False)
    assert [(m.role, m.content, m.state) for m in db.messages(chat.id)] == [
        ("user", "Name a fruit.\nJust one.", "complete"), ("assistant", "Apple.", "complete"),
    ]  # fmt: skip
    bare = [{"role": "user", "content": "Name a fruit.\nAny one."}, {"role": "assistant", "content": []}]
    again = db.conversation(import_json(db, bare))
    assert (again.title, again.system_prompt) == ("Name a fruit. (imported)", "")  # told apart from the first
    assert [(m.role, m.content) for m in db.messages(again.id)] == [("user", "Name a fruit.\nAny one."), ("assistant", "")]
    db.close()


@pytest.mark.parametrize(
    "data,message",
    [
        ([{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
          {"role": "tool", "content": "sunny"}], "message 2 is a tool call or its result"),
        ([{"role": "tool", "content": "sunny"}], "message 1 is a tool call or its result"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]}]},
         'message 1 holds a part of type "image_url", not text: SpecChat chats hold text only'),
        ([{"role": "robot", "content": "beep"}], "message 1 has the role 'robot'"),
        ([{"role": "user"}], 'message 1 needs "content"'),
        ([{"role": "user", "content": [{"text": "no type"}]}], 'message 1: each part of "content" must be'),
        ([{"role": "system", "content": "Only a system prompt."}], "no user or assistant message"),
        ({"messages": []}, "holds no messages"),
        (["hello"], 'message 1 needs "role"'),
    ],
)
def test_a_plain_chat_that_is_not_text_is_refused_with_a_reason(tmp_path, data, message):
    db = HistoryDB(tmp_path / "h.sqlite3")
    with pytest.raises(ValueError, match=message):
        import_json(db, data)
    assert db.conversations() == []
    db.close()


def test_only_corrupt_or_not_a_database_errors_count_as_corruption(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a database " * 100)
    with pytest.raises(sqlite3.DatabaseError) as raised:
        sqlite3.connect(garbage).execute("SELECT * FROM sqlite_master").fetchall()
    assert raised.value.sqlite_errorcode == sqlite3.SQLITE_NOTADB and is_corruption(raised.value)
    # Pythons before 3.11 have no sqlite_errorcode: the message decides
    assert is_corruption(sqlite3.DatabaseError("database disk image is malformed"))
    assert not is_corruption(sqlite3.OperationalError("database is locked"))
    assert not is_corruption(sqlite3.OperationalError("table conversations already exists"))
    assert write_error_text(sqlite3.OperationalError("database or disk is full")).endswith("free some space, then try again")
    assert "another program holds" in write_error_text(sqlite3.OperationalError("database is locked"))
    assert "permissions" in write_error_text(sqlite3.OperationalError("attempt to write a readonly database"))


def _version_2_history(path) -> None:
    """A history as SpecChat wrote it before chat branches (schema version 2), with one conversation of 4 messages."""
    raw = sqlite3.connect(path)
    for step in MIGRATIONS[:2]:
        for statement in step:
            raw.execute(statement)
    raw.execute("INSERT INTO conversations VALUES (1, 'Old chat', '', 1.0, 2.0)")
    rows = [(0, "user", "Hi"), (1, "assistant", "Hello!"), (2, "user", "Tell a joke"), (3, "assistant", "No.")]
    for position, role, content in rows:
        raw.execute(
            "INSERT INTO messages (conversation_id, position, role, content, created_at, state, stats) VALUES "
            "(1, ?, ?, ?, ?, 'complete', ?)", (position, role, content, 1.0 + position, '{"mode": "ar"}' if role == "assistant" else None),
        )  # fmt: skip
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()


def test_a_version_3_history_keeps_its_json_output_chats_when_it_gets_branches(tmp_path):
    """Schema 3 is the JSON output column, as SpecChat wrote it before chat branches (schema 4)."""
    path = tmp_path / "v3.sqlite3"
    _version_2_history(path)
    raw = sqlite3.connect(path)
    raw.execute("ALTER TABLE conversations ADD COLUMN json_output INTEGER NOT NULL DEFAULT 0")  # that version's step 3
    raw.execute("UPDATE conversations SET json_output = 1 WHERE id = 1")
    raw.execute("PRAGMA user_version = 3")
    raw.commit()
    raw.close()
    db = HistoryDB(path)
    assert db.schema_version == SCHEMA_VERSION == 7
    assert db.conversation(1).json_output is True
    assert [(m.role, m.content) for m in db.messages(1)][-2:] == [("user", "Tell a joke"), ("assistant", "No.")]


def test_a_version_2_history_is_migrated_and_its_chats_get_branches(tmp_path):
    path = tmp_path / "v2.sqlite3"
    _version_2_history(path)
    raw_before = sqlite3.connect(path).execute("SELECT id, position, role, content FROM messages").fetchall()
    db = HistoryDB(path)
    assert db.schema_version == SCHEMA_VERSION == 7
    messages = db.messages(1)
    assert [(m.role, m.content) for m in messages] == [("user", "Hi"), ("assistant", "Hello!"), ("user", "Tell a joke"),
                                                       ("assistant", "No.")]  # fmt: skip
    assert all(m.versions == [m.id] and m.version == 1 for m in messages)
    assert [tuple(row) for row in db._db.execute("SELECT id, position, role, content FROM messages")] == raw_before  # no row rewritten

    # regenerate the last reply: the earlier one is kept as version 1 of 2
    old_reply = messages[-1].id
    new_reply = db.add_message(1, "assistant", "Why did the chicken cross the road?", replaces=old_reply)
    shown = db.messages(1)
    assert [m.content for m in shown][-1] == "Why did the chicken cross the road?"
    assert shown[-1].versions == [old_reply, new_reply] and shown[-1].version == 2

    # edit and resend the second user message: a branch of its own; the first branch is kept whole
    edited = db.add_message(1, "user", "Tell a story", replaces=shown[2].id)
    db.add_message(1, "assistant", "Once upon a time.")
    shown = db.messages(1)
    assert [m.content for m in shown] == ["Hi", "Hello!", "Tell a story", "Once upon a time."]
    assert shown[2].versions == [messages[2].id, edited] and shown[2].version == 2
    db.select_version(messages[2].id)  # back to the first version: its latest continuation comes with it
    assert [m.content for m in db.messages(1)] == ["Hi", "Hello!", "Tell a joke", "Why did the chicken cross the road?"]
    db.select_version(old_reply)
    assert [m.content for m in db.messages(1)][-1] == "No."

    # export writes the branch shown; another SpecChat process sees the same branch
    assert [m["content"] for m in export_json(db, 1)["messages"]] == ["Hi", "Hello!", "Tell a joke", "No."]
    assert "Once upon a time." not in export_markdown(db, 1)
    other = HistoryDB(path)
    assert [m.content for m in other.messages(1)] == ["Hi", "Hello!", "Tell a joke", "No."]
    assert other.conversation(1).message_count == 7  # every version is kept
    other.close()
    db.close()


def test_editing_the_first_message_starts_a_second_root(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    first = db.add_message(c, "user", "one")
    db.add_message(c, "assistant", "reply one")
    second = db.add_message(c, "user", "uno", replaces=first)
    assert [(m.content, m.versions) for m in db.messages(c)] == [("uno", [first, second])]
    db.select_version(first)
    assert [m.content for m in db.messages(c)] == ["one", "reply one"]
    failed = db.add_message(c, "assistant", "", state="streaming", replaces=db.messages(c)[-1].id)
    db.delete_message(failed)  # a regenerated reply that failed: the earlier version shows again
    assert [m.content for m in db.messages(c)] == ["one", "reply one"]
    db.close()


def test_switching_back_to_a_first_message_shows_the_reply_version_chosen_under_it(tmp_path):
    """Reply 2 of 3 was chosen under version 1 of the first message; after an edit (version 2) and a switch back to
    version 1, reply 2/3 shows again, not the newest 3/3 (issue 35 item 6). The choice outlives the process."""
    path = tmp_path / "h.sqlite3"
    db = HistoryDB(path)
    c = db.create_conversation("t")
    first = db.add_message(c, "user", "one")
    replies = [db.add_message(c, "assistant", "reply a")]
    for text in ("reply b", "reply c"):
        replies.append(db.add_message(c, "assistant", text, replaces=replies[-1]))
    db.select_version(replies[1])
    assert [(m.content, m.version) for m in db.messages(c)][-1] == ("reply b", 2)
    db.add_message(c, "user", "uno", replaces=first)
    db.add_message(c, "assistant", "respuesta")
    db.select_version(first)
    shown = db.messages(c)
    assert [(m.content, m.version, len(m.versions)) for m in shown] == [("one", 1, 2), ("reply b", 2, 3)]
    db.close()
    reopened = HistoryDB(path)
    reopened.select_version(first)  # (again, in another process)
    assert [m.content for m in reopened.messages(c)] == ["one", "reply b"]
    reopened.close()


def test_a_comparison_exports_both_replies_labelled(tmp_path):
    """Newcomer trial: a Compare exported to Markdown kept only the Auto column; the plain decoding's text was lost.
    Then (another trial) each run's numbers and how it ended were lost: the window's columns read "TTFT 274 ms ·
    46.6 tokens/s · 56 tokens", the file had only the summary, and nothing said the plain run was cut at the length
    limit; each run's text is now followed by its line, as in the window, and the summary comes last."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("Compared", "")
    db.add_message(c, "user", "Say hi")
    ar = {"mode": "ar", "drafter": None, "ttft_ms": 274.0, "tokens_per_s": 46.6, "acceptance_rate": None,
          "discarded_tokens": 0, "rolls": 0, "new_tokens": 56, "stop_reason": "max_new_tokens",
          "text": "Hi from plain ```py\nx"}  # fmt: skip
    spec = {**ar, "mode": "auto", "ttft_ms": 285.0, "tokens_per_s": 46.7, "new_tokens": 35, "stop_reason": "eos",
            "text": "Hi from Auto"}  # fmt: skip
    compare = {"ar": ar, "spec": spec, "speedup": 1.002, "identical": False, "sampled": True}
    db.add_message(c, "assistant", "Hi from Auto", stats={**spec, "compare": compare})
    markdown = export_markdown(db, c)
    assert markdown == (
        "# Compared\n\n"
        "## User\n\nSay hi\n\n"
        "## Assistant\n\n### Plain decoding\n\nHi from plain ```py\\\nx\n\n"
        "*Cut off at the length limit · 56 tokens at 46.6 tokens/s, the first after 274 ms*\n\n"
        "### Auto\n\nHi from Auto\n\n"
        "*35 tokens at 46.7 tokens/s, the first after 285 ms*\n\n"
        "*Auto decoding about as fast as plain decoding (1.00 times, within timing noise), texts differ by design "
        "(sampling)*\n"
    )
    exported = export_json(db, c)["messages"][1]  # the JSON export keeps both texts too, and imports them back
    assert (exported["content"], exported["stats"]["compare"]["ar"]["text"]) == ("Hi from Auto", "Hi from plain ```py\nx")
    copy = import_json(db, json.loads(json.dumps(export_json(db, c))))
    assert export_markdown(db, copy) == markdown.replace("# Compared", "# Compared (imported)", 1)
    db.close()


def test_the_markdown_export_keeps_the_line_breaks_the_window_shows(tmp_path):
    """Newcomer trial: a reply the window showed as three lines was written with single newlines, which Markdown
    viewers join into one paragraph; each line break the window shows is a hard break in the file (a trailing
    backslash; two spaces after a line that ends in one), and code, lists and headings are written as they are."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("Breaks", "")
    db.add_message(c, "user", "Count\nplease")
    reply = ("One-to-five: 1\nTwo-one: 2\nThree: 3\n\n```\ncode a\ncode b\n```\n- x\n- y\n# Heading\ntext\n"
             "C:\\dir\\\nnext")  # fmt: skip
    db.add_message(c, "assistant", reply, stats={"mode": "ar", "new_tokens": 3})
    markdown = export_markdown(db, c)
    assert "## User\n\nCount\\\nplease\n\n" in markdown  # (the window shows a user message as typed, lines kept)
    assert ("One-to-five: 1\\\nTwo-one: 2\\\nThree: 3\n\n```\ncode a\ncode b\n```\n- x\n- y\n# Heading\ntext\\\n"
            "C:\\dir\\  \nnext\n\n") in markdown  # fmt: skip
    db.close()


def test_titles_cut_at_a_dangling_word_are_titled_again_and_renamed_titles_stay(tmp_path):
    """Chats stored on 2026-12-07 were titled by a cut at any word ("Show a bash one-liner to count lines in all .py
    files, in a"); today's rule ends on a word that reads as an end, and the window retitles an edited first message
    only where its title is today's rule's: migration 7 gives those titles today's; a title the user chose stays."""
    from app.gui.chat_titles import title_cut_at_any_word, title_from
    from app.gui.history_schema import MIGRATIONS, SCHEMA_VERSION, SQL_FUNCTIONS

    request = "Show a bash one-liner to count lines in all .py files, in a code block."
    path = tmp_path / "v6.sqlite3"
    raw = sqlite3.connect(path)
    for name, function in SQL_FUNCTIONS.items():  # (migration 6 calls them, on no rows here)
        raw.create_function(name, 1, function, deterministic=True)
    for step in MIGRATIONS[:6]:
        for statement in step:
            raw.execute(statement)
    chats = [(1, title_cut_at_any_word(request)), (2, "Counting lines in a"), (3, "Hi")]  # cut; renamed; short
    for conversation_id, title in chats:
        raw.execute("INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, 1.0, 2.0)",
                    (conversation_id, title))  # fmt: skip
        raw.execute("INSERT INTO messages (conversation_id, position, role, content, created_at, parent_id) VALUES "
                    "(?, 0, 'user', ?, 1.0, 0)", (conversation_id, "Hi" if title == "Hi" else request))  # fmt: skip
    raw.execute("PRAGMA user_version = 6")
    raw.commit()
    raw.close()
    assert chats[0][1] == "Show a bash one-liner to count lines in all .py files, in a"
    db = HistoryDB(path)
    assert db.schema_version == SCHEMA_VERSION
    titles = {conversation.id: conversation.title for conversation in db.conversations()}
    assert titles == {1: "Show a bash one-liner to count lines in all .py files", 2: "Counting lines in a", 3: "Hi"}
    assert titles[1] == title_from(request)
    db.close()


def test_titles_cut_by_the_old_rule_are_titled_by_the_new_one_and_renamed_titles_stay(tmp_path):
    """Chats stored before 2026-12-07 kept titles cut at 47 characters with a trailing "…" (the old rule); the
    window compares a title with the rule's title of the first message (is it renamed?), so editing their first
    message no longer retitled them. The migration gives the new rule's title (up to a word within 60 characters, no
    "…") to each title that is the old rule's title of a first user message; a title the user chose stays."""
    from app.gui.chat_titles import title_from

    long_line = "Repeat the following text exactly, word for word, and keep its line breaks as they are"
    edited_line = "Summarize this article about the history of the printing press in Europe"
    path = tmp_path / "v5.sqlite3"
    raw = sqlite3.connect(path)
    for step in MIGRATIONS[:5]:
        for statement in step:
            raw.execute(statement)
    chats = [  # (id, title as stored, its messages: (id, parent_id, role, content))
        (1, "Repeat the following text exactly, word for wor…", [(1, 0, "user", f"{long_line}\nThe quick brown fox."),
                                                                (2, 1, "assistant", "Sure.")]),
        (2, "My fox chat", [(3, 0, "user", long_line), (4, 3, "assistant", "Sure.")]),
        (3, "Hi", [(5, 0, "user", "Hi"), (6, 5, "assistant", "Hello!")]),
        (4, "Repeat this…", [(7, 0, "user", long_line)]),  # renamed by the user, "…" and all
        (5, "Summarize this article about the history of the…", [(8, 0, "user", long_line),  # first message edited
                                                                 (9, 0, "user", edited_line)]),
        (6, "Repeat the following text exactly, word for wor…", [(10, 0, "user", b"\xff\xfe not text")]),
    ]  # fmt: skip
    for conversation_id, title, messages in chats:
        raw.execute("INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, 1.0, 2.0)",
                    (conversation_id, title))  # fmt: skip
        for position, (message_id, parent, role, content) in enumerate(messages):
            raw.execute(
                "INSERT INTO messages (id, conversation_id, position, role, content, created_at, parent_id) VALUES "
                "(?, ?, ?, ?, ?, 1.0, ?)", (message_id, conversation_id, position, role, content, parent),
            )  # fmt: skip
    raw.execute("INSERT INTO conversations (id, title, created_at, updated_at) VALUES (7, ?, 1.0, 2.0)", (chats[0][1],))
    raw.execute("INSERT INTO messages (conversation_id, position, role, content, created_at, parent_id) VALUES "
                "(7, 0, 'user', CAST(x'fffe41' AS TEXT), 1.0, 0)")  # text that is not UTF-8  # fmt: skip
    raw.execute("PRAGMA user_version = 5")
    raw.commit()
    raw.close()
    db = HistoryDB(path)
    assert db.schema_version == SCHEMA_VERSION
    titles = {conversation.id: conversation.title for conversation in db.conversations()}
    assert titles == {
        1: "Repeat the following text exactly, word for word, and keep",
        2: "My fox chat",
        3: "Hi",
        4: "Repeat this…",
        5: "Summarize this article about the history of the printing",
        6: "Repeat the following text exactly, word for wor…",  # its first message is no text: left as it was
        7: "Repeat the following text exactly, word for wor…",
    }
    # what the window compares before retitling a chat whose first message is edited
    assert titles[1] == title_from(db.messages(1)[0].content)
    db.close()
