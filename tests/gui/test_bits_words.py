"""The Weights (bits) row says what is true of the default model's bit-widths (newcomer trial: "4-bit is the fastest
and as accurate as the original" read as "as accurate as the model as trained"): 4-bit is the smallest and fastest,
slightly less accurate than the trained 16-bit model, and the 8/16-bit copies, built from the 4-bit weights, are no
more accurate (README: perplexity 9.958 for both)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from app.gui.settings_store import AppSettings
from app.gui.widgets.settings_pane import SettingsPane


def test_the_bit_width_row_says_4_bit_is_smallest_and_fastest_and_the_others_no_more_accurate(qtbot):
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    words = [label.text() for label in pane.findChildren(QLabel)] + [pane.fields["bits"].toolTip()]
    assert not any("as accurate as the original" in text for text in words)
    assert pane._bits_row.help.text() == "4-bit: smallest, fastest; 8/16-bit are no more accurate."
    tip = pane.fields["bits"].toolTip()
    assert "slightly less accurate than the model as trained at 16 bits" in tip
    assert "no more accurate, since they hold the same 4-bit weights" in tip
