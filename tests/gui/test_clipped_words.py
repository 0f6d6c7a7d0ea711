"""Nothing is cut mid-word at 1366x768 (issue 35 item 5): combos elide their text with "…" and name it whole on
hover, the live graph's summary is as tall as its lines, the Models dialog's Source column ends inside its table with "…"."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import FAST

from app.gui.widgets.elided_combo import ElidedComboBox


def test_a_combo_narrower_than_its_text_elides_it_and_names_it_whole_on_hover(qtbot):
    combo = ElidedComboBox()
    qtbot.addWidget(combo)
    combo.addItem("Speculative, prompt lookup (copies from the chat)")
    combo.addItem("Plain")
    combo.setToolTip("How the reply is written")
    combo.setFixedWidth(160)
    combo.show()
    qtbot.waitExposed(combo)
    shown = combo.shown_text()
    assert shown.endswith("…") and shown[:-1] == combo.currentText()[: len(shown) - 1]
    assert combo.fontMetrics().horizontalAdvance(shown) <= 160
    assert combo.hover_text() == "Speculative, prompt lookup (copies from the chat)\nHow the reply is written"
    combo.setCurrentIndex(1)  # a text that fits: shown whole, the tip alone on hover
    assert combo.shown_text() == "Plain" and not combo.is_elided() and combo.hover_text() == "How the reply is written"


def test_at_1366x768_every_combo_shows_whole_words_or_an_ellipsis(qtbot, make_window, int8_dir):
    """A newcomer saw "SmolLM2-135M-Instruct-he", "Speculative, prompt lookur", "(none with this tokenizer: use":
    each combo's text is either shown whole or cut with "…", and what it shows fits its field in pixels."""
    window = make_window(FAST.with_values(decoding="spec_model"))  # the draft head, preselected
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=3000)
    qtbot.wait(50)
    pane = window.settings_pane
    combos = [window.model_picker.combo, pane.decoding, pane.draft_model, pane.sampling.preset]
    for combo in combos:
        assert isinstance(combo, ElidedComboBox), combo.objectName()
        shown, whole = combo.shown_text(), combo.currentText()
        assert shown == whole or (shown.endswith("…") and whole.startswith(shown[:-1])), (shown, whole)
        assert combo.fontMetrics().horizontalAdvance(shown) <= combo.width(), (shown, combo.width())
        if combo.is_elided():
            assert combo.hover_text().startswith(whole)
    drafter = pane.draft_model  # its name is longer than its box at this width (the README's screenshots)
    assert drafter.currentText().startswith("SmolLM2-135M-Instruct-head") and drafter.is_elided()
    assert drafter.shown_text().startswith("SmolLM2-135M-Instruct") and drafter.shown_text().endswith("…")
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))
    assert pane.decoding.currentText().startswith("Speculative, prompt lookup")
    assert pane.decoding.fontMetrics().horizontalAdvance(pane.decoding.shown_text()) <= pane.decoding.width()


def test_the_graph_summary_is_as_tall_as_its_lines(qtbot, make_window):
    """A third line of the side panel's summary was cut in half at 1366 px: the label is as tall as its text needs
    (two lines at least, so that the plot below moves only when a line is added or goes)."""
    window = make_window(FAST, start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366 and window.live_graph.isVisible(), timeout=3000)
    summary = window.live_graph.summary
    summary.setText("Last reply: " + "speculative 61.3 tokens/s, 1.42x plain decoding, acceptance rate 43% · " * 3)
    qtbot.wait(20)
    needed = summary.needed_height()
    assert needed >= 3 * summary.fontMetrics().lineSpacing()  # (three lines or more at this width)
    assert summary.height() >= needed  # (it was two lines high, always)
    long_height = summary.height()
    summary.setText("Last reply: 20.1 tokens/s.")
    qtbot.wait(20)
    assert summary.needed_height() <= summary.height() < long_height


def _shown_cell_text(table, row: int, column: int) -> str:
    """The text the view draws in a cell: its delegate's text cut to the text rectangle the style gives it, as
    Qt's own item painting cuts it (QCommonStyle::viewItemDrawText with the view's elide mode)."""
    from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

    index = table.model().index(row, column)
    option = QStyleOptionViewItem()
    option.initFrom(table.viewport())
    option.rect = table.visualRect(index)
    table.itemDelegate().initStyleOption(option, index)
    option.textElideMode = table.textElideMode()
    text_rect = table.style().subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, table)
    margin = table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1  # (each side)
    return option.fontMetrics.elidedText(option.text, option.textElideMode, text_rect.width() - 2 * margin)


def _models_dialog_at_1366x768(qtbot, make_window):
    """The Models dialog opened over a window of 1366x768 (the models it lists: ``store.installed_models``)."""
    from app.gui.widgets import models_dialog

    window = make_window(FAST, start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=3000)
    dialog = models_dialog.ModelsDialog(window)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    qtbot.wait(50)
    return dialog


@pytest.mark.parametrize("source", [
    "shipped with SpecChat (trained by tools/draft_head on its committed conversations, 2 epochs)",
    "hf:HuggingFaceTB/SmolLM2-135M-Instruct@12fd25f77366fa6b3b4b768ec3050bf629380bac",  # one word: wrapping cannot cut it
])  # fmt: skip
def test_the_models_dialog_ends_a_long_source_with_an_ellipsis_inside_the_table(qtbot, qasync_loop, make_window, int4_dir, monkeypatch, source):
    """The Source column ran past the table's right edge, cut there without "…" (the rest only by scrolling
    sideways): opened from the window at 1366x768, it ends inside the table, its text cut with "…" and whole in
    its tooltip."""
    from app.gui.widgets import models_dialog
    from inference.models import store

    manifest = replace(store.read_manifest(int4_dir), source=source)
    monkeypatch.setattr(store, "installed_models", lambda: [manifest])
    dialog = _models_dialog_at_1366x768(qtbot, make_window)
    assert dialog.width() <= 1366 and dialog.height() <= 768
    table = dialog.table
    header = table.horizontalHeader()
    column = models_dialog.SOURCE_COLUMN
    assert table.horizontalScrollBar().maximum() == 0  # nothing past the edge
    right = header.sectionViewportPosition(column) + header.sectionSize(column)
    assert right <= table.viewport().width()
    item = table.item(0, column)
    assert item.text() == source and item.toolTip().startswith(f"Source: {source}\n")
    shown = _shown_cell_text(table, 0, column)
    assert shown.endswith("…") and source.startswith(shown[:-1]) and len(shown) > 10, shown
    assert table.fontMetrics().horizontalAdvance(shown) <= header.sectionSize(column)
    # every other column shows its text whole
    for other in range(header.count()):
        if other != column:
            assert _shown_cell_text(table, 0, other) == table.item(0, other).text()
    dialog.close()


def test_the_models_dialog_says_what_long_chats_do_in_words_and_its_headers_fit_at_1366x768(qtbot, qasync_loop, make_window, int4_dir, monkeypatch):
    """A newcomer read "Chats past context length: yes" as jargon: the column reads "Long chats", its cells "keep
    going (rolling window)" or "stop at the limit" (LM Studio's words for what a chat past the context does); opened
    from the window at 1366x768, every header and cell shows whole, nothing past the table's edge."""
    from app.gui.widgets import models_dialog
    from inference.models import store

    rolling = store.read_manifest(int4_dir)
    stopping = replace(rolling, path=rolling.path.with_name("no-rope-model"), rope_supported=False, rope_note="")
    monkeypatch.setattr(store, "installed_models", lambda: [rolling, stopping])
    dialog = _models_dialog_at_1366x768(qtbot, make_window)
    table = dialog.table
    header = table.horizontalHeader()
    column = models_dialog.ENDLESS_COLUMN
    assert table.horizontalHeaderItem(column).text() == "Long chats"
    assert [table.item(row, column).text() for row in range(2)] == ["keep going (rolling window)", "stop at the limit"]
    assert table.item(0, column).toolTip().startswith("Long chats keep going: past the context length (n_ctx)")
    assert table.item(1, column).toolTip() == (
        "Long chats stop at the limit: a chat longer than the context length (n_ctx) stops"
    )
    assert table.horizontalScrollBar().maximum() == 0
    assert header.sectionViewportPosition(column) + header.sectionSize(column) <= table.viewport().width()
    for other in range(header.count()):
        text = table.horizontalHeaderItem(other).text()
        assert header.fontMetrics().horizontalAdvance(text) < header.sectionSize(other), (text, header.sectionSize(other))
        if other != models_dialog.SOURCE_COLUMN:
            for row in range(2):
                assert _shown_cell_text(table, row, other) == table.item(row, other).text()
    dialog.close()
