"""A long first message titles its chat up to a word that reads as an end: trial, a chat asking "Show a bash
one-liner to count lines in all .py files, in a code block." was titled "…in all .py files, in a"."""

from __future__ import annotations

import pytest

from app.gui.chat_titles import TITLE_LENGTH, title_from


@pytest.mark.parametrize(
    ("message", "title"),
    [
        # the trial's request: not "…in all .py files, in a"
        ("Show a bash one-liner to count lines in all .py files, in a code block.",
         "Show a bash one-liner to count lines in all .py files"),
        # English: a comma, "with" and "a" dangle
        ("Summarize this article for me in three bullet points, with a title and a short intro",
         "Summarize this article for me in three bullet points"),
        # a code request: "if" dangles
        ("Refactor def parse(items): return [int(x) for x in items if x] and add type hints to it",
         "Refactor def parse(items): return [int(x) for x in items"),
        # another language, cut at a word
        ("Напиши короткое стихотворение о весне в большом шумном городе, весёлых людях",
         "Напиши короткое стихотворение о весне в большом шумном"),
    ],
)  # fmt: skip
def test_a_cut_title_ends_at_a_word_that_reads_as_an_end(message, title):
    assert title_from(message) == title
    assert len(title) <= TITLE_LENGTH


def test_a_title_without_spaces_is_cut_at_a_mark_or_at_the_length():
    """CJK text has no spaces: its title stops after the last comma-like mark within the length (the mark dropped),
    else at TITLE_LENGTH characters; still without "…" (the rule of chat_titles)."""
    clause = "请用简单的语言解释一下量子计算的基本原理"  # 20 characters
    assert title_from(f"{clause}，{clause}，{clause}，{clause}") == f"{clause}，{clause}"
    assert title_from("量" * 100) == "量" * TITLE_LENGTH


def test_a_title_of_short_words_only_is_still_cut():
    """A line of nothing but words that dangle keeps its cut rather than becoming empty."""
    title = title_from("to " * 40)
    assert title and len(title) <= TITLE_LENGTH and title.startswith("to to")
