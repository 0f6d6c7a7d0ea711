"""Compare's menu item, hence Help > Keyboard shortcuts (F1), and its button say what Compare runs (newcomer
trial: F1 said "compare plain vs speculative decoding" where Compare ran plain decoding against Auto)."""

from __future__ import annotations

from conftest import FAST

from app.gui.model_choice import compare_words
from app.gui.settings_store import AppSettings
from app.gui.widgets.help import shortcut_lines


def test_compare_words_name_the_decoding_compare_runs():
    assert compare_words(AppSettings()) == "plain vs Auto decoding"  # the default: Auto
    assert compare_words(AppSettings().with_values(decoding="ar")) == "plain vs Auto decoding"  # plain chosen: Auto
    lookup = AppSettings().with_values(decoding="spec_lookup")
    assert compare_words(lookup) == "plain vs speculative decoding (prompt lookup)"


def test_f1_and_the_compare_button_follow_the_decoding_chosen(make_window):
    window = make_window(FAST, start=False)

    def f1_line() -> str:
        return next(line for line in shortcut_lines(window.actions()) if "compare" in line)

    assert f1_line() == "Ctrl+Shift+Return: compare plain vs auto decoding"  # (F1 writes actions in lower case)
    assert "with plain decoding, then with Auto," in window.composer.compare_button.toolTip()
    assert window.compare_action.statusTip() == "Send the message twice, plain decoding then Auto decoding, and compare"
    window.choice.apply(window.settings.with_values(decoding="spec_lookup"))
    assert f1_line() == "Ctrl+Shift+Return: compare plain vs speculative decoding (prompt lookup)"
    assert "then with speculative decoding (prompt lookup)," in window.composer.compare_button.toolTip()
