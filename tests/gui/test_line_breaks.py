"""Line breaks survive rendering: replies keep single newlines as line breaks (Markdown otherwise), user messages
are shown exactly as typed (no Markdown)."""

from __future__ import annotations

import pytest

from app.gui.history_rows import Message
from app.gui.widgets.markdown_view import LINE_SEPARATOR, MarkdownView, hard_line_breaks
from app.gui.widgets.message_widget import MessageWidget

HAIKU = "An old silent pond\nA frog jumps into the pond\nSplash! Silence again"


@pytest.fixture(autouse=True)
def styled(qtbot):
    from app.gui.application import create_application

    create_application()


def _message(role: str, content: str, spans=None) -> Message:
    return Message(id=1, conversation_id=1, position=0, role=role, content=content, created_at=0.0,
                   draft_spans=spans or [])  # fmt: skip


def _lines(view: MarkdownView) -> list[str]:
    return view.toPlainText().splitlines()


def test_a_haiku_reply_keeps_its_three_lines(qtbot):
    widget = MessageWidget(_message("assistant", HAIKU))
    qtbot.addWidget(widget)
    widget.resize(500, 200)
    widget.show()
    assert _lines(widget.body) == HAIKU.split("\n")
    document = widget.body.text_views()[0].document()
    assert document.blockCount() == 1 and document.begin().layout().lineCount() == 3  # one stanza, three lines
    assert widget.body.markdown == HAIKU  # the source shown (and copied) is the reply as generated


def test_a_shift_enter_user_message_is_shown_as_typed(qtbot):
    typed = "first line\nsecond line with *stars* and <b>tags</b>\n# not a heading"
    widget = MessageWidget(_message("user", typed))
    qtbot.addWidget(widget)
    assert widget.body.toPlainText() == typed  # no Markdown: stars, tags and # stay as typed


def test_markdown_still_renders_and_code_blocks_are_unchanged(qtbot):
    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_markdown("**Bold** line\nnext line\n\n```\ncode  a\ncode b\n```\n\n- one\n- two\n# Title\ntext")
    assert _lines(view) == ["Bold line", "next line", "code  a", "code b", "one", "two", "Title", "text"]
    L = LINE_SEPARATOR
    assert hard_line_breaks("a\nb\n\n```\nc\nd\n```\ne\n- f\n  g\n# H\ni") == f"a{L}b\n\n```\nc\nd\n```\ne\n- f{L}  g\n# H\ni"


def test_draft_highlighting_follows_the_inserted_breaks(qtbot):
    view = MarkdownView()
    qtbot.addWidget(view)
    text = "Roses are red\nviolets are blue"
    spans = [[14, 21]]  # "violets"
    view.set_markdown(text, spans, highlight=True)
    assert view.highlighted_text() == ["violets"]


def test_a_user_messages_code_fence_is_shown_as_a_code_block_like_a_replys(qtbot):
    """A user's fenced code was shown as plain text, fences and all, while replies showed code blocks; the text
    around it stays as typed (issue 35 item 6)."""
    typed = "Why does this fail?\n*stars* stay\n\n```python\nprint(1 +)\n```\nThanks"
    widget = MessageWidget(_message("user", typed))
    qtbot.addWidget(widget)
    [block] = widget.body.code_blocks()
    assert block.code == "print(1 +)" and block.language == "python"
    assert [view.toPlainText() for view in widget.body.text_views()] == ["Why does this fail?\n*stars* stay", "Thanks"]
    assert widget.body.markdown == typed  # copied as typed
    assert "```" not in widget.body.toPlainText()
