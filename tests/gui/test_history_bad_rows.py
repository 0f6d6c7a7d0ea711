"""A history with bad rows (a NULL or binary message text, statistics or spans that are not what SpecChat writes)
opens with its good rows, shows the bad ones as unreadable, exports and imports them back, and is never moved
aside or rewritten; a JSON import is checked whole before anything is written."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.gui.history_db import HistoryDB
from app.gui.history_recovery import open_history
from app.gui.history_transfer import MAX_IMPORT_BYTES, export_json, export_markdown, import_json, read_export

GOOD_STATS = {"mode": "ar", "ttft_ms": 12.0, "tokens_per_s": 50.5, "new_tokens": 3}


def _relaxed(path, statements: list[tuple[str, tuple]]) -> None:
    """Run inserts that break the messages table's NOT NULL and CHECK constraints (as a hand edit or a buggy
    build would), then put the original schema back: the file stays a sound SQLite database."""
    raw = sqlite3.connect(path)
    sql = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    relaxed = sql.replace("content TEXT NOT NULL", "content TEXT").replace("CHECK (role IN ('user', 'assistant'))", "")
    raw.execute("PRAGMA writable_schema = ON")
    raw.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'messages'", (relaxed,))
    raw.commit()
    raw.close()
    raw = sqlite3.connect(path)
    for statement, params in statements:
        raw.execute(statement, params)
    raw.commit()
    raw.execute("PRAGMA writable_schema = ON")
    raw.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'messages'", (sql,))
    raw.commit()
    raw.close()


INSERT = "INSERT INTO messages (conversation_id, position, role, content, created_at, state, stats, draft_spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


@pytest.fixture
def bad_history(tmp_path):
    """Ten chats; the first holds good messages around a NULL, a binary, a non-UTF-8 and a wrong-role row, and
    rows with statistics and spans of the wrong types."""
    path = tmp_path / "history.sqlite3"
    db = HistoryDB(path)
    chats = [db.create_conversation(f"chat {i}") for i in range(10)]
    for chat in chats:
        db.add_message(chat, "user", f"hello from {chat}")
    first = chats[0]
    db.add_message(first, "assistant", "a good reply", stats=GOOD_STATS, draft_spans=[[0, 1]])
    db.close()
    _relaxed(path, [
        (INSERT, (first, 2, "assistant", None, 3.0, "complete", None, None)),
        (INSERT, (first, 3, "user", b"\x00\xff binary", 4.0, "complete", None, None)),
        (INSERT, (first, 4, "assistant", "x", 5.0, "complete", None, None)),
        ("UPDATE messages SET content = CAST(X'ff41' AS TEXT) WHERE position = 4 AND conversation_id = ?", (first,)),
        (INSERT, (first, 5, "system", "a role SpecChat never writes", 6.0, "complete", None, None)),
        (INSERT, (first, 6, "assistant", "fast?", 7.0, "complete", '{"ttft_ms": "fast"}', "[5, \"a\"]")),
        (INSERT, (first, 7, "assistant", "cmp", 8.0, "weird", '{"compare": "x"}', "not json")),
        (INSERT, (first, 8, "assistant", "short", 9.0, "complete", "[1, 2]", "[[0, 99]]")),
    ])  # fmt: skip
    return path, first


def test_bad_rows_open_the_history_in_place_and_show_placeholders(bad_history):
    path, first = bad_history
    before = path.read_bytes()
    db, notice = open_history(path)
    assert notice is None and not db.in_memory
    assert not list(path.parent.glob("*.unreadable-*"))  # nothing was moved aside
    assert len(db.conversations()) == 10
    messages = db.messages(first)
    assert [m.position for m in messages] == list(range(9))
    good = [m for m in messages if not m.unreadable]
    assert [(m.role, m.content) for m in good[:2]] == [("user", f"hello from {first}"), ("assistant", "a good reply")]
    assert good[1].stats == GOOD_STATS and good[1].draft_spans == [[0, 1]]
    unreadable = {m.position: m.unreadable for m in messages if m.unreadable}
    assert unreadable == {
        2: "its text is missing (NULL)",
        3: "its text is stored as binary data (9 bytes)",
        4: "its text is not valid UTF-8 (2 bytes)",
        5: "its role 'system' is neither user nor assistant",
    }
    assert all(m.content == "" for m in messages if m.unreadable)
    # statistics and spans that are not what SpecChat writes read as none; the text stays
    assert [(m.content, m.stats, m.draft_spans, m.state) for m in messages[6:]] == [
        ("fast?", {}, [], "complete"), ("cmp", {}, [], "complete"), ("short", {}, [], "complete"),
    ]  # fmt: skip
    db.close()
    raw = sqlite3.connect(path)  # nothing was rewritten
    assert raw.execute("SELECT content, stats FROM messages WHERE position = 6").fetchone() == ("fast?", '{"ttft_ms": "fast"}')
    assert raw.execute("SELECT content FROM messages WHERE position = 2").fetchone() == (None,)
    raw.close()
    assert len(path.read_bytes()) == len(before)


def test_markdown_export_of_bad_rows_does_not_crash(bad_history):
    path, first = bad_history
    db = HistoryDB(path)
    markdown = export_markdown(db, first)
    assert "## Assistant\n\n*(unreadable message: its text is missing (NULL))*" in markdown
    assert "## User\n\n*(unreadable message: its text is stored as binary data (9 bytes))*" in markdown
    assert "a good reply" in markdown and "fast?" in markdown
    db.close()


def test_json_export_of_bad_rows_round_trips_through_import(bad_history, tmp_path):
    path, first = bad_history
    db = HistoryDB(path)
    exported = export_json(db, first)
    assert [m["content"] for m in exported["messages"][2:6]] == [None, None, None, None]
    file = tmp_path / "export.json"
    file.write_text(json.dumps(exported))
    copy = import_json(db, read_export(file))
    again = export_json(db, copy)
    assert again.pop("title") == f"{exported['title']} (imported)"  # (the history holds the original)
    for data in (exported, again):
        for message in data["messages"]:
            message.pop("created_at")
    assert again == {key: value for key, value in exported.items() if key != "title"}
    assert [m.unreadable != "" for m in db.messages(copy)] == [False, False, True, True, True, True, False, False, False]
    fresh = HistoryDB(tmp_path / "other.sqlite3")  # and into a history with the schema's constraints intact
    third = export_json(fresh, import_json(fresh, read_export(file)))
    for message in third["messages"]:
        message.pop("created_at")
    assert third == exported
    assert sqlite3.connect(tmp_path / "other.sqlite3").execute("PRAGMA integrity_check").fetchone() == ("ok",)
    fresh.close()
    db.close()


def _export(**message) -> dict:
    return {"format": "specchat-conversation", "version": 1, "title": "t",
            "messages": [{"role": "assistant", "content": "hello", **message}]}  # fmt: skip


@pytest.mark.parametrize(
    "message,error",
    [
        ({"stats": {"ttft_ms": "fast"}}, '"stats.ttft_ms" must be a number'),
        ({"stats": {"compare": "x"}}, '"stats.compare" must be an object'),
        ({"stats": {"compare": {"ar": {"text": 5}}}}, '"stats.compare.ar.text" must be a text'),
        ({"stats": {"compare": {"speedup": "2x"}}}, '"stats.compare.speedup" must be a number or null'),
        ({"stats": {"mode": ["ar"]}}, '"stats.mode" must be a text or null'),
        ({"stats": [1, 2]}, '"stats" must be an object'),
        ({"draft_spans": [5, "a"]}, '"draft_spans" entry 1 must be a pair of whole numbers'),
        ({"draft_spans": [[0, 99]]}, '"draft_spans" entry 1 \\[0, 99\\] is outside the message\'s 5 characters'),
        ({"draft_spans": "0-3"}, '"draft_spans" must be a list'),
        ({"state": "exploded"}, '"state" must be one of'),
        ({"content": 7}, '"content" must be text'),
        ({"created_at": float("nan")}, '"created_at" must be a time in seconds since 1970 \\(a number from 0 to'),
        ({"created_at": float("inf")}, '"created_at" must be a time'),
        ({"created_at": 2**63}, '"created_at" must be a time'),
        ({"created_at": -1.5}, '"created_at" must be a time'),
        ({"created_at": "2024-05-01"}, '"created_at" must be a time'),
    ],
)
def test_import_refuses_malformed_fields_naming_them_and_writes_nothing(tmp_path, message, error):
    db = HistoryDB(tmp_path / "h.sqlite3")
    with pytest.raises(ValueError, match=f"message 1: {error}"):
        import_json(db, _export(**message))
    assert db.conversations() == []
    db.close()


def test_import_of_a_deep_or_huge_file_is_refused_with_a_reason(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="too deeply"):
        read_export(deep)
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps(_export(stats={"x": [[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]})))
    with pytest.raises(ValueError, match="more than 16 deep"):
        read_export(nested)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(MAX_IMPORT_BYTES + 1)
    with pytest.raises(ValueError, match="at most 50 MiB$"):
        read_export(huge)
    with huge.open("wb") as file:  # MiB, as the limit is (50 * 2**20 bytes): it said "63 MB ... at most 50 MB"
        file.truncate(60 * 2**20)
    with pytest.raises(ValueError) as caught:
        read_export(huge)
    assert str(caught.value) == f"{huge} is 60.0 MiB; a conversation export is at most 50 MiB"


def test_import_of_an_empty_markdown_or_cut_off_file_says_what_it_is(tmp_path):
    """Newcomer trial: an empty file and SpecChat's own Markdown export were both refused with "is not valid JSON:
    Expecting value: line 1 column 1 (char 0)", and an export cut off by a copy with "Expecting property name
    enclosed in double quotes: line 76 column 40 (char 1999)"; each now says in words what the file is."""
    db = HistoryDB(tmp_path / "h.sqlite3")
    conversation = db.create_conversation("Sleep tips")
    db.add_message(conversation, "user", "Give me a tip")
    empty = tmp_path / "empty.json"
    empty.write_text("\n")
    markdown = tmp_path / "chat.md"
    markdown.write_text(export_markdown(db, conversation))
    whole = json.dumps(export_json(db, conversation), indent=2)
    cut_in_a_field, cut_in_a_text = tmp_path / "cut1.json", tmp_path / "cut2.json"
    cut_in_a_field.write_text(whole[: whole.index('"content"')])
    cut_in_a_text.write_text(whole[: whole.index("a tip")])
    with pytest.raises(ValueError, match=r"empty\.json is empty$"):
        read_export(empty)
    with pytest.raises(ValueError, match=r"chat\.md is Markdown, not JSON: a Markdown export cannot be imported back"):
        read_export(markdown)
    cut_off = r"is not valid JSON: it ends before its data does \(the file was cut off\)"
    for cut in (cut_in_a_field, cut_in_a_text):
        with pytest.raises(ValueError, match=cut_off):
            read_export(cut)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"messages": [],}')  # whole, but wrong before its end: the decoder's words
    with pytest.raises(ValueError, match=r"is not valid JSON: Expecting property name enclosed in double quotes"):
        read_export(wrong)
    db.close()


def test_import_of_a_good_export_keeps_every_field(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    compare = {"compare": {"ar": {**GOOD_STATS, "text": "a"}, "spec": {**GOOD_STATS, "mode": "spec", "text": "b"},
                           "speedup": 1.5, "identical": False, "sampled": True, "first_difference": None}}  # fmt: skip
    data = _export(stats=compare, draft_spans=[[0, 2], [3, 5]], state="stopped")
    [message] = db.messages(import_json(db, data))
    assert (message.stats, message.draft_spans, message.state) == (compare, [[0, 2], [3, 5]], "stopped")
    db.close()
