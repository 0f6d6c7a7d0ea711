"""Words on screen a newcomer reads without a glossary, the field terms beside them (issue 35 item 5)."""

from __future__ import annotations

import ast
import inspect
import re

from conftest import FAST
from PySide6.QtWidgets import QLabel

from app.gui.settings_store import AppSettings
from inference.precision import NumericPrecision


def test_the_precision_in_use_is_said_in_plain_words_with_the_terms_beside_them():
    from app.gui.widgets.settings_pane import precision_in_words

    exact = NumericPrecision("f32", "f32", 0)
    assert precision_in_words(exact) == (
        "Computing: full (f32) · chat memory (KV cache): full (f32) · drafting never changes a reply (exact)"
    )
    fast = NumericPrecision("bf16", "u8", 32, prefill="bf16")
    assert precision_in_words(fast) == (
        "Computing: half (bf16) · chat memory (KV cache): 8-bit (u8) · inputs rounded to 8 bits in groups of 32 "
        "(dynamic quantization) · long prompts read in half (bf16) · drafting may change a reply by rounding (fast, "
        "not exact)"
    )
    ours = NumericPrecision("f32", "f32", 0, prefill="f32", kernels="SpecChat's")
    assert precision_in_words(ours) == (
        "Computing: full (f32) · chat memory (KV cache): full (f32) · long prompts read in full (f32) · "
        "4-bit weights: SpecChat's faster kernels · drafting never changes a reply (exact)"
    )
    theirs = NumericPrecision("f32", "f32", 0, kernels="OpenVINO's (not built)")
    assert precision_in_words(theirs).endswith(
        " · 4-bit weights: OpenVINO's kernels (not built) · drafting never changes a reply (exact)"
    )
    assert theirs.describe() == "f32, KV cache f32, no dynamic quantization (exact); 4-bit kernels: OpenVINO's (not built)"


def test_the_pane_shows_the_precision_in_words_and_openvinos_terms_on_hover(qtbot):
    from app.gui.application import create_application
    from app.gui.widgets.settings_pane import SettingsPane

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    pane.set_precision_in_use(NumericPrecision("f32", "f32", 0))
    assert pane.precision_in_use.text().startswith("Computing: full (f32)")
    assert "no dynamic quantization" not in pane.precision_in_use.text()
    assert pane.precision_in_use.toolTip() == "OpenVINO reports: f32, KV cache f32, no dynamic quantization (exact)"
    pane.set_precision_in_use(None)
    assert pane.precision_in_use.text() == "no model loaded"


def test_the_advanced_rows_say_in_words_what_they_do(qtbot):
    """n_keep, n_discard and the precisions had tooltips only; every setting row now has its line on screen."""
    from app.gui.application import create_application
    from app.gui.widgets.settings_pane import SettingsPane

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    helps = [label.text() for label in pane.advanced.box.findChildren(QLabel, "settingHelp")]
    assert helps == [
        "The chip the model runs on.",
        "The chip the drafter runs on.",
        "How finely the model computes: f32 is exact, bf16 faster.",
        "How the chat's memory is kept: u8 is smaller, not exact.",
        "Tokens at the start that are never forgotten.",
        "Tokens forgotten at once when the memory is full.",
    ]
    tips = [field.toolTip() for field in pane.fields.values()]
    assert not any("llama.cpp" in tip for tip in tips), [tip for tip in tips if "llama.cpp" in tip]


def test_the_first_download_says_what_it_does_without_file_format_names():
    """"Giving the 4-bit IR the exact Q4_1 offsets of the GGUF..." was shown during the first start."""
    from inference.models import default_model, source_wheel

    said = []
    for module in (source_wheel, default_model):  # the download, then the build
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "say" and node.args:
                said.append(ast.unparse(node.args[0]))
    assert len(said) >= 8
    jargon = re.compile(r"\b(IR|GGUF|Q4_1|offsets)\b")
    assert [text for text in said if "..." in text and jargon.search(text)] == []  # the steps, shown as they run


def test_the_first_load_is_announced_as_a_load_not_a_reload(qtbot, make_window):
    """A setting changed before the window's first model is loaded: the status bar says "will be loaded" (it said
    "The model will be reloaded in the background" during the very first load)."""
    window = make_window(FAST, start=False)
    assert window.model_state != "ready"  # nothing loaded yet in this window
    window.statusBar().clearMessage()
    bits = window.settings_pane.bits  # (the weights' bit-width loads another model; the context length loads none)
    bits.setCurrentIndex(bits.findData(8 if window.settings.bits != 8 else 4))
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() != "", timeout=3000)
    message = window.statusBar().currentMessage()
    assert message == "The model will be loaded with the new settings, in the background"
    assert "reload" not in message


def test_a_first_start_that_preselects_the_draft_head_says_nothing_of_new_settings(qtbot, make_window):
    """A newcomer's first start (no settings file) read "The model will be loaded with the new settings, in the
    background" with nothing changed: the window preselects the default model's draft head itself, which is no
    user's new setting. The status bar may say the model is loading, not that settings changed."""
    said = []
    window = make_window(None, start=False)
    said.append(window.statusBar().currentMessage())  # (the preselection runs as the window is built)
    window.statusBar().messageChanged.connect(said.append)
    window.start()
    qtbot.waitUntil(lambda: window.model_state in ("ready", "error"), timeout=120_000)
    assert window.settings.draft_is_a_head  # the head was preselected, as on a first start
    assert [text for text in said if "new settings" in text] == []
