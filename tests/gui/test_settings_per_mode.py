"""Only what a run uses blocks it: an invalid K blocks only the decodings that draft a fixed K (not Auto, Adaptive
or Plain, nor a Compare under Plain, which runs Auto)."""

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


def test_an_invalid_k_blocks_only_what_uses_the_box(pane_and_composer):
    """Newcomer trial: under Auto (the default) 99 typed into K greyed out Send and Compare, although Auto picks its
    own K. The box is used only by the decodings that draft a fixed K (prompt lookup, a draft model, without
    Adaptive): an invalid K blocks those, and is flagged without blocking anything else (Compare under Plain runs
    Auto, which does not use it either)."""
    pane, composer = pane_and_composer
    emitted = []
    pane.settings_changed.connect(emitted.append)
    label = pane.error_labels["k"]
    for decoding in ("auto", "ar"):
        pane.decoding.setCurrentIndex(pane.decoding.findData(decoding))
        pane.k.setValue(99)
        assert pane.errors() == {} and pane.errors(compare=True) == {} and composer.send_button.isEnabled()
        assert composer.compare_button.isEnabled() and emitted[-1].value("k") == 99  # valid settings: saved
        assert label.isVisibleTo(pane) and label.text() == (
            "Draft tokens per step (K) must be between 1 and 16; you typed 99 (only the speculative decodings with "
            "a fixed K use this box; Auto picks its own K each step, 0 for a plain step up to 16)"
        )
        pane.k.setValue(4)
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))
    pane.k.setValue(0)
    assert set(pane.errors()) == {"k"} and not composer.send_button.isEnabled()
    composer.set_text("Hi")
    composer.submit()
    assert composer.error_text.startswith("Fix the settings first: Draft tokens per step (K) must be between 1 and 16")
    pane.adaptive_k.setChecked(True)  # Adaptive picks K as Auto does
    assert pane.errors(compare=True) == {} and composer.send_button.isEnabled()
    pane.adaptive_k.setChecked(False)
    pane.k.setValue(4)
    assert pane.errors(compare=True) == {} and composer.send_button.isEnabled()


def test_field_errors_and_the_engine_check_k_only_where_the_decoding_drafts_a_fixed_k():
    ar = AppSettings().with_values(decoding="ar", k=0)
    assert ar.field_errors(8192, ["CPU"]) == {} and ar.with_values(decoding="auto").field_errors(8192, ["CPU"]) == {}
    assert set(ar.field_errors(8192, ["CPU"], speculative=True)) == {"k"}
    assert set(ar.with_values(decoding="spec_lookup").field_errors(8192, ["CPU"])) == {"k"}
    assert ar.with_values(decoding="spec_lookup", adaptive_k=True).field_errors(8192, ["CPU"]) == {}
    for decoding, adaptive in (("ar", False), ("auto", False), ("spec_lookup", True)):  # K unused: chosen per step
        GenerationSettings(decoding=decoding, speculative=SpeculativeSettings(k=0, adaptive=adaptive)).validate(8192)
    with pytest.raises(SettingError) as error:
        GenerationSettings(decoding="spec_lookup", speculative=SpeculativeSettings(k=0)).validate(8192)
    assert error.value.field == "k"


def test_the_window_sends_and_compares_with_an_unused_invalid_k(make_window):
    from inference.models.default_head import default_head_dir

    # (the head already chosen: choosing it would set K to the head's)
    window = make_window(AppSettings().with_values(decoding="ar", k=0, draft_model=str(default_head_dir())), start=False)
    assert window.composer.send_button.isEnabled() and window.composer.compare_button.isEnabled()
    assert window.settings_pane.errors(compare=True) == {}  # Compare under Plain runs Auto: K unused


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


def test_a_remote_compare_under_plain_or_auto_never_sends_the_unchecked_k():
    """On a remote SpecChat server a Compare under Plain or Auto runs prompt lookup, and sent the box's K, which those
    decodings leave unchecked: a K of 99 made the server refuse the Compare's second run. That run picks its K each
    step (Adaptive), as the local Compare's Auto does; prompt lookup chosen in the window still sends its K."""
    from app.backends.remote import specchat_options
    from inference.settings import Decoding

    for decoding in (Decoding.AUTOREGRESSIVE, Decoding.AUTO):
        remote = AppSettings().with_values(decoding=decoding, k=99, use_remote=True)
        run = remote.generation_settings(remote.compare_decoding)
        assert specchat_options(run) == {"mode": "spec_lookup", "adaptive_k": True}
        run.validate(8192)  # (it raised for k 99 before it was Adaptive)
    lookup = AppSettings().with_values(decoding=Decoding.PROMPT_LOOKUP, k=6, use_remote=True)
    assert specchat_options(lookup.generation_settings(lookup.compare_decoding)) == {"mode": "spec_lookup", "k": 6}
