"""Only what the chosen decoding uses blocks Send: an invalid K does not block autoregressive replies."""

from __future__ import annotations

import pytest

from app.gui.settings_store import AppSettings
from app.gui.widgets.composer import Composer
from app.gui.widgets.settings_pane import SettingsPane
from inference.settings import GenerationSettings, SettingError, SpeculativeSettings


@pytest.fixture
def pane_and_composer(qtbot):
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    composer = Composer()
    pane.validity_changed.connect(lambda summary: composer.set_blocked(summary or None))
    for widget in (pane, composer):
        qtbot.addWidget(widget)
        widget.show()
    return pane, composer


def test_an_invalid_k_blocks_only_speculative_decoding(pane_and_composer):
    pane, composer = pane_and_composer
    emitted = []
    pane.settings_changed.connect(emitted.append)
    pane.decoding.setCurrentIndex(pane.decoding.findData("ar"))
    pane.k.setValue(0)
    assert pane.errors() == {} and composer.send_button.isEnabled()
    assert emitted[-1].value("k") == 0  # autoregressive settings are valid, so they are saved
    label = pane.error_labels["k"]
    assert label.isVisibleTo(pane) and "Draft tokens per step (K) must be between 1 and 16" in label.text()
    assert "only speculative decoding and Compare use it" in label.text()
    assert set(pane.errors(compare=True)) == {"k"}  # a Compare runs speculative decoding: refused
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))
    assert set(pane.errors()) == {"k"} and not composer.send_button.isEnabled()
    composer.set_text("Hi")
    composer.submit()
    assert composer.error_text.startswith("Fix the settings first: Draft tokens per step (K) must be between 1 and 16")
    pane.k.setValue(4)
    assert pane.errors(compare=True) == {} and composer.send_button.isEnabled()


def test_field_errors_and_the_engine_check_only_what_the_decoding_uses():
    ar = AppSettings().with_values(decoding="ar", k=0)
    assert ar.field_errors(8192, ["CPU"]) == {}
    assert set(ar.field_errors(8192, ["CPU"], speculative=True)) == {"k"}
    assert set(ar.with_values(decoding="spec_lookup").field_errors(8192, ["CPU"])) == {"k"}
    GenerationSettings(decoding="ar", speculative=SpeculativeSettings(k=0)).validate(8192)  # autoregressive: K unused
    for decoding in ("auto", "spec_lookup"):  # Auto drafts K tokens a step in a seeded sampled reply
        with pytest.raises(SettingError) as error:
            GenerationSettings(decoding=decoding, speculative=SpeculativeSettings(k=0)).validate(8192)
        assert error.value.field == "k"


def test_the_window_sends_with_an_unused_invalid_k_but_refuses_to_compare(make_window):
    from inference.models.default_head import default_head_dir

    # (the head already chosen: choosing it would set K to the head's)
    window = make_window(AppSettings().with_values(decoding="ar", k=0, draft_model=str(default_head_dir())), start=False)
    window.composer.set_text("Hi")
    assert window.chat.send("Hi", compare=True) is None
    assert "Draft tokens per step (K) must be between 1 and 16" in window.composer.error_text
    assert window.composer.send_button.isEnabled()  # a plain autoregressive Send is not blocked


def test_the_line_under_decoding_explains_the_decoding_chosen(pane_and_composer):
    """Under Plain it said "Speculative: guess ahead..." (found by a newcomer trial)."""
    from app.gui.widgets.settings_pane import DECODING_HELP
    from inference.settings import Decoding

    pane, _ = pane_and_composer
    lines = {}
    for decoding in (Decoding.AUTOREGRESSIVE, Decoding.PROMPT_LOOKUP, Decoding.AUTOREGRESSIVE, Decoding.DRAFT_MODEL):
        pane.decoding.setCurrentIndex(pane.decoding.findData(decoding.value))
        lines[decoding] = pane._decoding_row.help.text()
    plain = DECODING_HELP[Decoding.AUTOREGRESSIVE]
    assert lines[Decoding.AUTOREGRESSIVE] == plain == "Plain: one token per step, at the model's own pace."
    assert lines[Decoding.PROMPT_LOOKUP] == lines[Decoding.DRAFT_MODEL] == DECODING_HELP[Decoding.PROMPT_LOOKUP]
    pane.set_settings(AppSettings().with_values(decoding=Decoding.PROMPT_LOOKUP))
    assert pane._decoding_row.help.text() == DECODING_HELP[Decoding.PROMPT_LOOKUP]
    pane.set_settings(AppSettings())
    assert pane._decoding_row.help.text() == DECODING_HELP[AppSettings().generation.decoding]
    opened_on_lookup = SettingsPane(AppSettings().with_values(decoding=Decoding.PROMPT_LOOKUP), ["CPU"])
    assert opened_on_lookup._decoding_row.help.text() == DECODING_HELP[Decoding.PROMPT_LOOKUP]  # (it said Plain's line)
    opened_on_lookup.deleteLater()


def test_the_decoding_line_and_tooltip_are_true_under_auto_plain_and_speculative(pane_and_composer):
    """Under Auto, the default, the line said "Speculative: guess ahead, check in one step": Auto takes a plain step
    (K 0, nothing guessed) wherever guessing does not pay. Every decoding keeps the quality (greedy: plain decoding's
    text; sampled: replies as likely as plain decoding's, not the same text), but the same greedy text only at an
    exact precision (at a fast one drafting may change a reply by rounding, as the precision in use says): the
    tooltip said "greedy: the same text" whatever the precision, and nothing of Auto."""
    from inference.settings import Decoding

    pane, _ = pane_and_composer
    shown = {}
    for decoding in Decoding:
        pane.decoding.setCurrentIndex(pane.decoding.findData(decoding.value))
        shown[decoding] = pane._decoding_row.help.text()
    assert shown == {
        Decoding.AUTO: "Auto: guesses ahead only when that pays off; same quality.",
        Decoding.AUTOREGRESSIVE: "Plain: one token per step, at the model's own pace.",
        Decoding.DRAFT_MODEL: "Speculative: guess ahead, check in one step; same quality.",
        Decoding.PROMPT_LOOKUP: "Speculative: guess ahead, check in one step; same quality.",
    }
    tip = pane.decoding.toolTip()
    assert "Auto, the default," in tip and "a plain step" in tip
    assert "greedy at an exact precision: the same text" in tip and "greedy: the same text" not in tip
    assert "sampled: replies as likely as plain decoding's" in tip
