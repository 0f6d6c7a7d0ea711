"""Conversations in and out of the history: JSON export and import (``format: specchat-conversation``), Markdown,
and the import of a plain chat in OpenAI's format (as Jan, LM Studio and ChatGPT's API write them).

A JSON export holds what the app shows of a conversation (its branch shown, each message's state, statistics and
draft spans); importing it adds a new conversation with the same content, so export, import and export give the
same JSON, but for the title where the history already has a chat of that title: the import is then named
"Title (imported)", "Title (imported 2)"... (as ChatGPT's and LM Studio's copies are told apart), so that the list
never shows two identical entries. An import is checked whole before anything is written: a file that is too large, not UTF-8, not JSON,
nested too deeply or with any field SpecChat would not write gets a ``ValueError`` that names the field, and the
history is left as it was.

A plain chat is ``{"messages": [...]}`` (no ``"format"``) or a bare list of messages, each ``{"role": "system",
"user" or "assistant", "content": text or a list of {"type": "text", "text": ...} parts}``: it imports as a new chat
titled after its first user message, its system messages as the chat's system prompt, its text parts joined by line
breaks. A chat that holds more than text (tool calls and their results, images, sound, files) is refused whole,
naming the first message that does: imported without them it would read as something it was not.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

from ..bounded_json import depth_exceeds
from .chat_titles import title_from
from .history_db import HistoryDB
from .history_rows import ROLES, STATES, is_time
from .message_fields import spans_problem, stats_problem
from .reply_format import MODE_NAMES, export_footer_text, export_run_text, second_run_name
from .widgets.markdown_view import LINE_SEPARATOR, hard_line_breaks

EXPORT_FORMAT = "specchat-conversation"
EXPORT_VERSION = 1
#: Largest JSON export :func:`read_export` reads (a conversation of 10,000 long messages is about 50 MiB).
MAX_IMPORT_BYTES = 50 * 1024 * 1024
#: Deepest nesting of lists and objects an import accepts (an export nests 5 deep).
MAX_IMPORT_DEPTH = 16
#: Latest time an import accepts, seconds since 1970 (the last second of year 9999).
MAX_TIME = 253402300799


def export_file_stem(title: str) -> str:
    """A file name, without its extension, that an export of a conversation titled ``title`` suggests: each
    character other than a letter, digit, space, "-" or "_" reads "_", and those at either end are dropped (newcomer
    trial: "Give me three tips for better sleep." was suggested as "...sleep_.md"); "chat" when nothing is left."""
    name = "".join(c if c.isalnum() or c in " -_" else "_" for c in title)
    return name.strip(" _") or "chat"


def export_json(db: HistoryDB, conversation_id: int) -> dict[str, Any]:
    """A conversation as a JSON-serialisable dict (``format: specchat-conversation``, version 1), as the app reads
    it: an unreadable message's ``content`` is null, statistics or spans it cannot use are ``{}`` / ``[]``."""
    conversation = db.conversation(conversation_id)
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
            for m in db.messages(conversation_id)
        ],
    }


def export_markdown(db: HistoryDB, conversation_id: int) -> str:
    """A conversation as a Markdown document (title, system prompt, then each message under a heading, its line
    breaks as the window shows them, a reply's line under it; a comparison's two replies each under a heading of its decoding, plain decoding first, as the
    window's columns, each followed by its run's line, then the comparison's)."""
    conversation = db.conversation(conversation_id)
    if conversation is None:
        raise ValueError(f"no conversation with id {conversation_id}")
    lines = [f"# {conversation.title}", ""]
    if conversation.system_prompt:
        lines += ["**System prompt:**", "", *(f"> {line}" for line in conversation.system_prompt.splitlines()), ""]
    for message in db.messages(conversation_id):
        lines += [f"## {'User' if message.role == 'user' else 'Assistant'}", ""]
        compare = (message.stats or {}).get("compare") if message.role == "assistant" else None
        if message.unreadable:
            lines += [f"*(unreadable message: {message.unreadable})*", ""]
        elif isinstance(compare, dict) and not stats_problem(message.stats):
            # a comparison: both replies, each with its line, as the window shows them side by side (newcomer
            # trials: only the second run's text was written, then neither run's numbers nor a cut at the limit)
            ar = compare.get("ar") or {}
            runs = ((MODE_NAMES["ar"], ar.get("text", ""), ar),
                    (second_run_name(compare), message.content, compare.get("spec") or {}))  # fmt: skip
            for name, text, run in runs:
                lines += [f"### {name}", "", _closed(_as_shown(text)) or "*(no text)*", ""]
                if run_line := export_run_text(run):
                    lines += [f"*{run_line}*", ""]
        else:
            lines += [_closed(_as_shown(message.content)), ""]
        footer = export_footer_text(message.stats, message.state) if message.role == "assistant" else ""
        if footer:
            lines += [f"*{footer}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _as_shown(text: str) -> str:
    """``text`` with each single newline the window shows as a line break (:func:`hard_line_breaks`: in a paragraph,
    not in code nor before a list item or heading) written as a Markdown hard break, a trailing backslash (two spaces
    after a line that ends in a backslash, which would escape it), so that a viewer does not join the lines into one
    paragraph as a newcomer trial's did."""
    shown = hard_line_breaks(text)
    pieces, start = [], 0
    for newline in re.finditer("\n", text):
        if shown[newline.start()] == LINE_SEPARATOR:
            line = text[start : newline.start()]
            pieces.append(line + ("  \n" if line.endswith("\\") else "\\\n"))
            start = newline.end()
    return "".join(pieces) + text[start:]


def _closed(text: str) -> str:
    """``text`` with the code block it was cut off in closed (else the rest of the file reads as code)."""
    fence = unclosed_fence(text)
    return text + ("" if text.endswith("\n") else "\n") + fence if fence else text


def import_json(db: HistoryDB, data: Any) -> int:
    """Add a conversation exported by :func:`export_json`, or a plain chat in OpenAI's format (see the module doc);
    return the new conversation's id.

    The whole structure is checked before anything is written. A message whose ``content`` is null (exported
    from an unreadable row) is imported as an unreadable placeholder again (an empty BLOB: the column cannot
    hold NULL), so export, import and export give the same JSON.

    Raises:
        ValueError: the data is neither a SpecChat conversation export nor a plain chat of text (the message names
            the field or the message at fault).
    """
    plain = data if isinstance(data, list) else data.get("messages") if _is_plain_chat(data) else None
    if plain is not None:
        system_prompt, messages = _checked_plain_chat(plain)
        title = title_from(next((m["content"] for m in messages if m["role"] == "user"), ""))
        json_output, created = False, time.time()
    else:
        messages = _checked_export(data)
        title = data.get("title") if isinstance(data.get("title"), str) else ""
        system_prompt, json_output = data.get("system_prompt", ""), data.get("json_output", False)
        created = data["created_at"] if data.get("created_at") is not None else time.time()
    title = imported_title(title.strip() or "Imported chat", {conversation.title for conversation in db.conversations()})
    return db.add_imported_conversation(title, system_prompt, json_output, created, messages)


#: Roles of a plain chat whose messages are its system prompt ("developer": OpenAI's newer name for it).
_SYSTEM_ROLES = ("system", "developer")


def _is_plain_chat(data: Any) -> bool:
    """Whether ``data`` is an object holding a plain chat: a "messages" list and no "format" (SpecChat's export, or
    another program's, says its format)."""
    return isinstance(data, dict) and "format" not in data and isinstance(data.get("messages"), list)


def _checked_plain_chat(messages: list) -> tuple[str, list[dict]]:
    """The system prompt and the user and assistant messages (role, content) of a plain chat's ``messages``, after
    checking them all; ValueError names the first message SpecChat cannot keep as it is."""
    if not messages:
        raise ValueError("it holds no messages to import")
    if depth_exceeds(messages, MAX_IMPORT_DEPTH):
        raise ValueError(f"the chat nests lists or objects more than {MAX_IMPORT_DEPTH} deep")
    system, kept = [], []
    for index, message in enumerate(messages, 1):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f'message {index} needs "role" (system, user or assistant) and "content" (text)')
        role = message["role"]
        if role in ("tool", "function") or message.get("tool_calls") or message.get("function_call"):
            raise ValueError(
                f"message {index} is a tool call or its result: SpecChat chats hold text only, so the chat was not "
                "imported"
            )
        if role not in (*_SYSTEM_ROLES, *ROLES):
            raise ValueError(f"message {index} has the role {role!r}: a chat's roles are system, user and assistant")
        text = _plain_text(message.get("content"), index)
        if role in _SYSTEM_ROLES:
            system.append(text)
        else:
            kept.append({"role": role, "content": text})
    if not kept:
        raise ValueError("it holds no user or assistant message to import")
    return "\n\n".join(system), kept


def _plain_text(content: Any, index: int) -> str:
    """The text of message ``index``'s ``content`` (text, or text parts joined by line breaks); ValueError for
    anything else (a part that is not text: an image, a sound, a file)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f'message {index} needs "content": text, or a list of {{"type": "text", "text": ...}} parts')
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(kind, str) and kind != "text":
            raise ValueError(
                f'message {index} holds a part of type "{kind}", not text: SpecChat chats hold text only, so the chat '
                "was not imported"
            )
        else:
            raise ValueError(f'message {index}: each part of "content" must be {{"type": "text", "text": ...}}')
    return "\n".join(texts)


#: A title an import was given: its base and the number of the copy ("Notes (imported 2)"; none for the first).
_IMPORTED_TITLE = re.compile(r"^(?P<base>.*) \(imported(?: (?P<number>\d+))?\)$")


def imported_title(title: str, taken: set[str]) -> str:
    """The title of a chat imported as ``title`` into a history whose chats have the titles ``taken``.

    ``title`` itself when no chat has it; otherwise "<base> (imported)", else "<base> (imported 2)", "(imported 3)"...
    the first that is free, where <base> is ``title`` without an "(imported N)" it already ends in (a copy of a copy
    is numbered, never "(imported) (imported)").
    """
    if title not in taken:
        return title
    match = _IMPORTED_TITLE.match(title)
    base = match["base"] if match else title
    candidates = (f"{base} (imported)" if number == 1 else f"{base} (imported {number})" for number in range(1, len(taken) + 2))
    return next(candidate for candidate in candidates if candidate not in taken)


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
    """Read a JSON export file (as written by File > Export as JSON) for :func:`import_json`.

    Raises:
        ValueError: the file is larger than MAX_IMPORT_BYTES, not UTF-8 text, not JSON (empty, Markdown, cut off or
            otherwise wrong), or nested deeper than MAX_IMPORT_DEPTH (the message says which).
        OSError: the file cannot be read.
    """
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_IMPORT_BYTES:
        raise ValueError(
            f"{path} is {size / 2**20:.1f} MiB; a conversation export is at most {MAX_IMPORT_BYTES // 2**20} MiB"
        )
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not a text file: {error}") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} {_not_json(text, path, error)}") from error
    except RecursionError as error:
        raise ValueError(f"{path} nests lists or objects too deeply to be a conversation export") from error
    if depth_exceeds(data, MAX_IMPORT_DEPTH):
        raise ValueError(f"{path} nests lists or objects more than {MAX_IMPORT_DEPTH} deep: not a conversation export")
    return data


def _not_json(text: str, path: Path, error: json.JSONDecodeError) -> str:
    """What a file whose ``text`` is not JSON is, in words: empty, Markdown (as File > Export as Markdown writes),
    cut off (the JSON ends before its data does), or else the decoder's ``error``."""
    if not text.strip():
        return "is empty"
    if path.suffix.lower() in (".md", ".markdown") or text.lstrip().startswith("#"):
        return "is Markdown, not JSON: a Markdown export cannot be imported back"
    if error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
        return "is not valid JSON: it ends before its data does (the file was cut off)"
    return f"is not valid JSON: {error}"


def _time_problem(value: Any) -> str | None:
    """Why an imported ``created_at`` cannot be stored (None when it can, or is left out): it must be seconds since
    1970, a finite number from 0 to :data:`MAX_TIME` (NaN would be stored as NULL, 2^63 overflows SQLite's integers)."""
    if value is None or (is_time(value) and math.isfinite(value) and 0 <= value <= MAX_TIME):
        return None
    return f'"created_at" must be a time in seconds since 1970 (a number from 0 to {MAX_TIME}), got {value!r}'


def _checked_export(data: Any) -> list[dict]:
    """The messages of an export after checking every field import_json writes; ValueError names the first wrong one."""
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise ValueError(
            f'not a conversation SpecChat can import: neither its export ("format": "{EXPORT_FORMAT}") nor a chat\'s '
            'messages ({"messages": [{"role": "user", "content": "..."}, ...]}, or a list of them)'
        )
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
