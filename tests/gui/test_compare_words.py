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

    assert f1_line() == "Ctrl+Shift+Return: compare plain vs Auto decoding"  # (F1 lowers only the first letter)
    assert "with plain decoding, then with Auto," in window.composer.compare_button.toolTip()
    assert window.compare_action.statusTip() == "Send the message twice, plain decoding then Auto decoding, and compare"
    window.choice.apply(window.settings.with_values(decoding="spec_lookup"))
    assert f1_line() == "Ctrl+Shift+Return: compare plain vs speculative decoding (prompt lookup)"
    assert "then with speculative decoding (prompt lookup)," in window.composer.compare_button.toolTip()


def test_a_speed_ratio_within_timing_noise_is_not_called_a_speedup(make_window):
    """A newcomer read "Speedup 1.03× over plain decoding" at 12% acceptance and "Speedup 1.00× over plain decoding"
    at "acceptance 0%", while other Compares called such ratios timing noise: one pair of runs cannot tell 1.03×
    from 1.00×. Within the noise the footer, the export and the graph say about the same speed; below it, slower."""
    from app.gui.reply_format import TIMING_NOISE, compare_headline, compare_summary, export_footer_text

    assert TIMING_NOISE == (0.97, 1.03)
    lookup = {"mode": "spec", "drafter": "lookup", "k": 4, "tokens_per_s": 46.0, "drafted": 25, "accepted": 3,
              "acceptance_rate": 0.12, "new_tokens": 40}  # fmt: skip
    ar = {"mode": "ar", "tokens_per_s": 44.7}

    def compare(speedup: float) -> dict:
        return {"ar": ar, "spec": lookup, "speedup": speedup, "identical": True, "sampled": False}

    same = "About the same speed as plain decoding (1.03×, within timing noise) with speculative decoding (prompt lookup)"
    assert compare_summary(compare(1.03)) == f"{same} · speed and identity: texts identical"
    assert compare_headline(compare(1.034)) == same  # (the ratio as shown decides)
    lookup_words = "with speculative decoding (prompt lookup)"
    assert compare_headline(compare(0.97)) == f"About the same speed as plain decoding (0.97×, within timing noise) {lookup_words}"
    assert compare_headline(compare(0.96)) == f"Slower than plain decoding (0.96×) {lookup_words}"
    assert compare_headline(compare(1.04)) == f"Speedup 1.04× over plain decoding {lookup_words}"
    stats = {**lookup, "compare": compare(1.0)}
    assert "Speculative decoding (prompt lookup) about as fast as plain decoding (1.00 times, within timing noise), " \
           "texts identical" in export_footer_text(stats)  # fmt: skip
    assert "Speculative decoding (prompt lookup) slower than plain decoding (0.91 times as fast), texts identical" \
           in export_footer_text({**lookup, "compare": compare(0.91)})  # fmt: skip
    head = {"mode": "auto", "tokens_per_s": 45.0, "acceptance_rate": 0.3,
            "drafters": {"head": {"steps": 10, "drafted": 20, "accepted": 6, "k_max": 2}}}  # fmt: skip
    assert compare_headline({**compare(1.0), "spec": head}) == (
        "About the same speed as plain decoding (1.00×, within timing noise) with Auto (draft head)"
    )
    window = make_window(FAST, start=False)
    chat = window.db.create_conversation("Compared")
    window.db.add_message(chat, "user", "Hi")
    window.db.add_message(chat, "assistant", "Hello", stats={**lookup, "compare": compare(1.03)})
    window.conversations.open(chat)
    graph = window.live_graph
    assert graph.summary.text().startswith(f"Last reply: {same}") or graph.summary.toolTip().startswith(
        f"Last reply: {same}"
    ), (graph.summary.text(), graph.summary.toolTip())
    assert "Speedup" not in graph.summary.text() + graph.summary.toolTip()


def test_the_empty_chat_says_what_compare_runs(make_window):
    """A README trial: a new chat said "Compare runs your message with plain decoding, then speculatively", while
    with the default decoding Compare runs Auto, which decodes plainly where drafting would not pay (and Compare then
    says "No speedup: Auto decoded plainly")."""
    window = make_window(start=False)
    text = window.chat_view.empty_label.text()
    assert "then speculatively" not in text
    assert ("<p><b>Compare</b> runs your message with plain decoding, then with Auto (or the speculative decoding you "
            "chose), and shows both replies side by side with their speeds.</p>") in text
