"""A reload asked for while a reply is generated waits for it, and says so, without the busy indicator."""

from __future__ import annotations

import asyncio

from conftest import FAST
from gui_helpers import send_and_wait

TIMEOUT = 240_000


def test_a_reload_during_a_reply_says_it_waits_for_the_reply(qtbot, make_window):
    window = make_window(FAST.with_values(max_new_tokens=150))
    states = []
    window.models.state_changed.connect(lambda state, text: states.append((state, text, window.busy_bar.isVisible())))
    window.composer.set_text("Tell me a long story about a dragon who learns to bake bread, in many paragraphs.")
    window.composer.submit()
    qtbot.waitUntil(lambda: bool(window.worker.generating and window.live_graph.series and window.live_graph.series[-1].steps),
                    timeout=TIMEOUT)  # fmt: skip
    pane = window.settings_pane
    said = []
    window.statusBar().messageChanged.connect(lambda text: said.append(text) if "load" in text.lower() else None)
    pane.bits.setCurrentIndex(pane.bits.findData(8))  # a model setting: the window asks for a reload
    window.models.load()  # now, not after the reload delay: the reply is surely still streaming
    qtbot.waitUntil(lambda: window.model_state == "queued", timeout=5000)
    assert window.model_label.text() == "The model will reload after this reply"
    assert said == []  # one message says the reload: not "…loaded with the new settings, in the background" too
    assert not window.busy_bar.isVisible()
    assert window.active is not None  # the reply still streams
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT):
        pass
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    assert "8-bit" in window.model_label.text()
    queued = [index for index, (state, _, _) in enumerate(states) if state == "queued"]
    loading = [index for index, (state, _, _) in enumerate(states) if state == "loading"]
    assert queued and loading and queued[0] < loading[0]
    assert all(not busy for state, _, busy in states if state == "queued")



def test_a_reload_waits_while_a_reply_holds_the_model_even_between_its_runs(qtbot, make_window):
    """Between a comparison's two runs (and before the explanation of where their texts part) the worker is idle,
    but the reply still holds its model: a reload asked for then must wait, or the runs would compare two models."""
    window = make_window(FAST)
    pane = window.settings_pane
    with window.models.in_use():  # as a reply does for all its runs
        pane.bits.setCurrentIndex(pane.bits.findData(8))
        window.models.load()
        qtbot.waitUntil(lambda: window.model_state == "queued", timeout=5000)
        # The worker is idle: a job given to it now runs after anything the loader gave it, so a loader that waited
        # for the worker alone would be loading by the time this job is done.
        idle = asyncio.ensure_future(window.worker.run(lambda: None))
        qtbot.waitUntil(idle.done, timeout=30_000)
        assert window.model_state == "queued" and "int4" in window.worker.spec.target_dir.name
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    assert "int8" in window.worker.spec.target_dir.name


def test_a_reply_sent_as_the_model_changes_names_the_model_that_wrote_it(qtbot, make_window):
    window = make_window(FAST)
    assert "int4" in window.worker.spec.describe()
    pane = window.settings_pane
    pane.bits.setCurrentIndex(pane.bits.findData(8))  # the reload starts after a short delay...
    final = send_and_wait(qtbot, window, "Say hi.", timeout_ms=TIMEOUT)  # ...and the reply waits for it
    assert final is not None, (window.composer.error_text, window.models.error)
    assert final.state == "complete" and "int8" in window.worker.spec.describe()
    assert final.stats["model"] == window.worker.describe_answer()  # the models that wrote it (Auto: the head too)


def test_a_model_setting_changed_while_the_model_loads_is_loaded_and_a_waiting_reply_gets_it(qtbot, make_window):
    """A model setting edited during a load (here: while the 8-bit copy is prepared) is loaded next; a reply
    waiting for the model is written by it, instead of failing with "no model is loaded"."""
    window = make_window(FAST)
    pane = window.settings_pane

    def edit_during_the_load(state: str, text: str) -> None:
        if text.startswith("Preparing the 8-bit model"):
            pane.kv_cache_precision.setCurrentIndex(pane.kv_cache_precision.findData("f32"))

    window.models.state_changed.connect(edit_during_the_load)
    pane.bits.setCurrentIndex(pane.bits.findData(8))
    window.models.load()  # now: the edit above lands while this load prepares the model
    final = send_and_wait(qtbot, window, "Say hi.", timeout_ms=TIMEOUT)
    assert final is not None, (window.composer.error_text, window.models.error)
    assert final.state == "complete" and final.content
    assert window.worker.spec.precision.kv_cache == "f32" and "int8" in window.worker.spec.describe()
    assert final.stats["model"] == window.worker.describe_answer()  # Auto drafts with the loaded head
