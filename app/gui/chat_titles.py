"""A chat's title from its first message, by today's rule and by the rules of the histories stored before it.

The window titles a new chat after the first line of its first message (:func:`title_from`), and tells a title the
user chose from one it gave by comparing it with that message's :func:`title_from`: a chat titled after its first
message is retitled when that message is edited. Histories stored before 2026-12-07 hold titles cut by the first
rule (:func:`title_before_2026_12_07`), the history's migration 6 (``history_schema``) gives them today's; those
stored on 2026-12-07 may hold titles cut at any word (:func:`title_cut_at_any_word`), given today's by migration 7.
"""

from __future__ import annotations

import re

#: Longest title a first message gives its chat, cut at a word (the list elides what its width cannot show).
TITLE_LENGTH = 60
#: Longest title of the old rule, its last character a "…" when the line was cut.
OLD_TITLE_LENGTH = 48
#: Words a cut title does not end on: English articles, prepositions, conjunctions and possessives, which leave it
#: hanging ("…count lines in all .py files, in a").
DANGLING = frozenset(
    "a an the and or but nor so of in on at to for with from by into onto about as than that which whose if via per"
    " over under between without within like vs its my your our their his her this these those".split()
)
#: Where a title may be cut: before a space, or after a comma-like mark of text written without spaces.
_BREAK = re.compile(r"(?=\s)|[，、；：。！？]")
#: What a cut title drops at its end: spaces, and punctuation that says more was to follow.
_ENDING = re.compile(r"[\s,;:(\[{\-–—/&+'\"“‘«，、；：]+$")


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped ("New chat" when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "New chat")


def title_from(text: str) -> str:
    """A conversation title from the first user message: its first line, cut before the first word that would take
    it past TITLE_LENGTH characters (a longer single word is cut at TITLE_LENGTH), with no "…" added: newcomer
    trial, chats read "Repeat the following text exactly, word for wor…" and Rename showed the "…".

    A cut title ends on a word that reads as an end: the English words that leave it hanging (:data:`DANGLING`: "a",
    "the", "in", "and"...) and the punctuation after its last word are dropped (trial: "…in all .py files, in a").
    Text without spaces (Chinese, Japanese) is cut after its last comma-like mark within the length, else at
    TITLE_LENGTH. A line of nothing but such words keeps its plain cut."""
    line = first_line(text)
    if len(line) <= TITLE_LENGTH:
        return line
    head = line[: TITLE_LENGTH + 1]  # a word ending at TITLE_LENGTH is kept whole
    cuts = [_ENDING.sub("", head[: m.end()]) for m in _BREAK.finditer(head) if m.end() <= TITLE_LENGTH]
    cuts = [cut for cut in cuts if cut]
    ending = [cut for cut in cuts if cut.split()[-1].lower() not in DANGLING]  # the last word reads as an end
    return (ending or cuts or [line[:TITLE_LENGTH]])[-1]


def title_cut_at_any_word(text: str) -> str:
    """The title the window gave a first message on 2026-12-07: cut before the first word that would take it past
    TITLE_LENGTH characters, whatever word it then ended on ("…count lines in all .py files, in a")."""
    line = first_line(text)
    if len(line) <= TITLE_LENGTH:
        return line
    head = line[: TITLE_LENGTH + 1]
    space = max(head.rfind(" "), head.rfind("\t"))
    return head[:space].rstrip(" \t,;:") or line[:TITLE_LENGTH]


def title_before_2026_12_07(text: str) -> str:
    """The title the window gave a first message before 2026-12-07: its first line, cut to OLD_TITLE_LENGTH
    characters with the last one a "…" (mid-word: "Repeat the following text exactly, word for wor…")."""
    line = first_line(text)
    return line if len(line) <= OLD_TITLE_LENGTH else line[: OLD_TITLE_LENGTH - 1].rstrip() + "…"
