"""A reply's footer (PartsLabel) shows every word: parts are joined on a line while they fit, a part wider than
the label breaks between its words, and only a single word wider than the label is elided."""

from __future__ import annotations

NOTICE = (
    "The conversation is 9000 tokens, more than the context length (1024): the model skips 8184 of its oldest "
    "tokens (raise Context length in the settings to keep them)"
)


def test_a_long_notice_in_a_footer_breaks_between_words_and_keeps_every_word(qtbot):
    from app.gui.widgets.elided_label import PartsLabel

    label = PartsLabel()
    qtbot.addWidget(label)
    label.resize(320, 20)
    label.setText(f"Reading your message… · {NOTICE}")
    lines = label.lines()
    metrics = label.fontMetrics()
    assert not any("…" in line for line in lines[1:]), lines  # nothing elided (the first part's own "…" aside)
    assert " ".join(lines).split() == f"Reading your message… {NOTICE}".split()  # every word, in order (a line
    # break stands for the " · " between two parts)
    assert all(metrics.horizontalAdvance(line) <= label.width() - 2 for line in lines), lines
    assert len(lines) >= 4 and label.height() == len(lines) * metrics.lineSpacing() + 2
    assert label.toolTip() == f"Reading your message… · {NOTICE}"


def test_a_single_word_wider_than_the_footer_is_elided_and_parts_still_join(qtbot):
    from app.gui.widgets.elided_label import PartsLabel

    label = PartsLabel()
    qtbot.addWidget(label)
    label.resize(120, 20)
    label.setText("12 tokens · " + "x" * 200 + " · 3.0 tokens/s")
    lines = label.lines()
    assert lines[0] == "12 tokens" and lines[1].endswith("…") and lines[2] == "3.0 tokens/s", lines
