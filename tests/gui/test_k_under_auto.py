"""K's explanation says what K is under the decoding shown (newcomer trial: the K box said 1 while Auto's footers
said "K up to 2" and "K up to 4": under Auto, and with Adaptive, K is chosen each step, 0 to MAX_K, and the box's
K serves only the decodings that draft a fixed K: even a seeded reply under Auto chooses from its own drafts,
``inference.auto_decoding.seeded_sampling``)."""

from __future__ import annotations

import pytest

from app.gui.reply_format import auto_steps
from app.gui.settings_store import AppSettings
from app.gui.widgets.settings_pane import K_AUTO_HELP, K_HELP, SettingsPane
from inference.settings import MAX_K


@pytest.fixture
def pane(qtbot):
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    pane.resize(390, 700)
    qtbot.addWidget(pane)
    pane.show()
    return pane


def _choose(pane: SettingsPane, decoding: str) -> None:
    pane.decoding.setCurrentIndex(pane.decoding.findData(decoding))


def test_under_auto_k_says_it_is_chosen_each_step_as_the_footers_say(pane):
    help_line = pane._k_row.help
    assert AppSettings().generation.decoding.value == "auto" and help_line.text() == K_AUTO_HELP
    assert f"0 to {MAX_K}" in K_AUTO_HELP and "not this box" in K_AUTO_HELP
    assert help_line.fontMetrics().horizontalAdvance(K_AUTO_HELP) <= help_line.width()  # one line at 390 px
    assert "K themselves each step" in pane.k.toolTip() and '"K up to 3"' in pane.k.toolTip()
    # the footer's words are the largest K Auto chose, within the range the line gives
    footer = auto_steps({"drafters": {"head": {"steps": 33, "drafted": 40, "accepted": 20, "k_max": 2}}})
    assert footer == "draft head 33 steps at K up to 2"  # (one drafter: its acceptance is the reply's, said after)
    _choose(pane, "spec_lookup")  # a fixed K: the box's K is the one used
    assert help_line.text() == K_HELP
    pane.adaptive_k.setChecked(True)  # Adaptive chooses as Auto does
    assert help_line.text() == K_AUTO_HELP
    pane.adaptive_k.setChecked(False)
    pane.note_k("Set to 1 for the draft head (was 4).")  # a note about K keeps its line under every decoding
    _choose(pane, "auto")
    assert help_line.text() == "Set to 1 for the draft head (was 4)."
    pane.k.setValue(3)  # the user's edit puts the explanation back: Auto's
    assert help_line.text() == K_AUTO_HELP
