"""The default model's draft head is what speculative decoding uses in the window unless the user picks another
drafter: preselected for its model whatever the decoding, K = HEAD_K while it drafts the box's K (draft-model
decoding; Auto chooses its own K), and Auto (the default, which Compare runs against plain decoding) drafts with it
(issues 22, 34)."""

from __future__ import annotations

import pytest
from conftest import FAST
from gui_helpers import click

from app.gui.model_choice import k_for_the_drafter
from app.gui.reply_format import DRAFTER_NAMES
from app.gui.settings_store import AppSettings
from app.gui.widgets.settings_pane import K_AUTO_HELP, K_HELP
from inference.draft_head import HEAD_K
from inference.settings import Decoding, SpeculativeSettings

GENERAL_K = SpeculativeSettings().k


def test_compare_on_plain_decoding_drafts_with_a_chosen_head_and_else_by_prompt_lookup(tmp_path, head_folder):
    plain = AppSettings().with_values(decoding=Decoding.AUTOREGRESSIVE)
    # Compare on plain decoding runs Auto: with the head when one is chosen (loaded with the target), else lookup
    assert plain.compare_decoding == Decoding.AUTO and not plain.uses_draft_model
    with_head = plain.with_values(draft_model=head_folder)
    assert with_head.compare_decoding == Decoding.AUTO and with_head.uses_draft_model
    assert not with_head.drafts_with_head  # Auto chooses its own K: the box's K drafts with no head
    assert with_head.model_key()[-2:] == (head_folder, "CPU")  # loaded with the target, for Compare
    model_draft = plain.with_values(draft_model=str(tmp_path))  # a full model as draft: too slow to load for Compare
    assert model_draft.compare_decoding == Decoding.AUTO and not model_draft.uses_draft_model
    lookup = with_head.with_values(decoding=Decoding.PROMPT_LOOKUP)  # the drafter the user picked wins
    assert lookup.compare_decoding == Decoding.PROMPT_LOOKUP and not lookup.drafts_with_head
    assert lookup.uses_draft_model  # the head stays loaded: back to plain decoding needs no reload
    assert with_head.with_values(decoding=Decoding.DRAFT_MODEL).drafts_with_head
    remote = with_head.with_values(use_remote=True)  # a remote server's draft models are its own
    assert remote.compare_decoding == Decoding.PROMPT_LOOKUP


def test_k_follows_the_drafter_and_a_k_set_afterwards_stays(head_folder):
    for decoding in (Decoding.AUTOREGRESSIVE, Decoding.AUTO):  # (Auto and a Compare's Auto choose K each step)
        plain = AppSettings().with_values(decoding=decoding, k=GENERAL_K)
        assert k_for_the_drafter(plain, plain.with_values(draft_model=head_folder)).value("k") == GENERAL_K
    plain = AppSettings().with_values(decoding=Decoding.DRAFT_MODEL, k=GENERAL_K)
    with_head = k_for_the_drafter(plain, plain.with_values(draft_model=head_folder))
    assert with_head.value("k") == HEAD_K
    assert k_for_the_drafter(with_head, with_head.with_values(k=3)).value("k") == 3  # the user's K stays
    lookup = k_for_the_drafter(with_head, with_head.with_values(decoding=Decoding.PROMPT_LOOKUP))
    assert lookup.value("k") == GENERAL_K
    back = k_for_the_drafter(lookup, lookup.with_values(decoding=Decoding.DRAFT_MODEL))
    assert back.value("k") == HEAD_K
    auto = k_for_the_drafter(back, back.with_values(decoding=Decoding.AUTO))  # the head stops drafting the box's K
    assert auto.value("k") == GENERAL_K


def test_the_window_opens_on_auto_with_the_default_models_head_and_compares_plain_decoding_with_it(qtbot, make_window):
    from inference.models.default_head import default_head_dir, ensure_default_head

    if ensure_default_head() is None:
        pytest.skip("this build ships no draft head")
    window = make_window(FAST.with_values(max_new_tokens=48))
    settings = window.settings
    assert settings.generation.decoding == Decoding.AUTO  # the default
    assert settings.draft_model == str(default_head_dir()) and settings.value("k") == GENERAL_K  # Auto's K is its own
    assert window.settings_pane.k.value() == GENERAL_K
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.composer.set_text("Give me three tips for better sleep.")
        click(qtbot, window.composer.compare_button)
    compare = finished.args[0].stats["compare"]
    spec = compare["spec"]
    assert (compare["ar"]["mode"], spec["mode"]) == ("ar", "auto")  # Compare runs plain decoding against Auto
    # Auto may draft with the head (loaded with the target for it, as the model line says) or not, as the times it
    # measures on this machine decide: its column says what it did
    title = window.chat_view.message_widgets()[-1].spec_column.title.text()
    assert title.startswith("Auto (") and all(
        f"{DRAFTER_NAMES[name]} {use['steps']} step" in title for name, use in spec["drafters"].items()
    ), title
    assert compare["identical"] is True  # greedy, exact precision
    assert f"draft {default_head_dir().name}" in spec["model"]
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as finished:
        window.chat.send("Say hi.")
    stats = finished.args[0].stats
    assert stats["mode"] == "auto" and f"draft {default_head_dir().name}" in stats["model"]


def test_k_changed_with_the_drafter_says_why_under_k(qtbot, make_window):
    """K went from 4 to 1 without a word when the draft head became the drafter: a note in the explanation's line
    under K says it (the line keeps its height), until the user sets K."""
    window = make_window(FAST.with_values(k=4, decoding=Decoding.DRAFT_MODEL))  # no drafter: the head is preselected
    pane = window.settings_pane
    qtbot.waitUntil(lambda: pane.k.value() == HEAD_K, timeout=10_000)
    help_line = pane._k_row.help
    assert help_line.isVisibleTo(pane) and help_line.text() == f"Set to {HEAD_K} for the draft head (was 4)."
    assert help_line.height() <= help_line.fontMetrics().lineSpacing() + 4  # one line, as the explanation's
    assert "draft head" in help_line.toolTip()
    pane.k.setValue(3)  # the user's K: it stays, and the explanation comes back
    assert help_line.text() == K_HELP and window.choice.settings.value("k") == 3
    pane.decoding.setCurrentIndex(pane.decoding.findData(Decoding.AUTO.value))  # the head stops drafting the box's K
    assert pane.k.value() == GENERAL_K and help_line.text() == K_AUTO_HELP  # no note under Auto: Auto's line


def test_under_auto_the_head_leaves_k_and_its_line_alone(qtbot, make_window):
    """Newcomer trial: on a fresh folder Auto showed K 4 and "Auto picks K each step", then, the model and its head
    ready, K 1 and "Set to 1 for the draft head (was 4).", contradicting Auto, which chooses K itself."""
    from inference.models.default_head import default_head_dir

    window = make_window(FAST.with_values(k=4))  # Auto (FAST's decoding), no drafter chosen
    pane = window.settings_pane
    qtbot.waitUntil(lambda: window.choice.settings.draft_model == str(default_head_dir()), timeout=10_000)
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=120_000)
    assert pane.decoding.currentData() == Decoding.AUTO.value
    assert pane.k.value() == 4 and window.choice.settings.value("k") == 4
    assert pane._k_row.help.text() == K_AUTO_HELP


def test_k_out_of_range_in_the_settings_file_is_said_as_the_file_s(qtbot, make_window):
    """Newcomer trial: K -5 in settings.json showed "Set to 1 for the draft head (was -5)", as if the user had set
    it: the note says the file's value was out of range."""
    window = make_window(FAST.with_values(k=-5, decoding=Decoding.DRAFT_MODEL))
    pane = window.settings_pane
    qtbot.waitUntil(lambda: pane.k.value() == HEAD_K, timeout=10_000)
    assert pane._k_row.help.text() == f"Set to {HEAD_K} for the draft head: the settings file's K, -5, is out of range (1 to 16)."
