"""Cancel while the picker switches to another copy of the default model (its 8-bit copy, prepared from the cached
4-bit source): the window goes back to the model loaded before, with no error dialog, and its words say what was
being done ("preparing the 8-bit copy"), never "download" when nothing is downloaded."""

from __future__ import annotations

import asyncio

import pytest
from conftest import FAST
from gui_helpers import click, find_dialog, send_and_wait
from PySide6.QtWidgets import QPushButton

from inference.models.default_model import default_model_dir
from inference.models.errors import OperationCancelled
from inference.models.progress import ProgressEvent


@pytest.mark.parametrize("step_finishes", [False, True], ids=["cancelled-at-once", "step-finishes-first"])
def test_cancel_while_preparing_the_8_bit_copy_goes_back_to_the_loaded_model(qtbot, make_window, monkeypatch, step_finishes):
    window = make_window(FAST)
    loaded = window.worker.spec.target_dir
    assert loaded == default_model_dir(FAST.bits)

    async def preparing(bits, progress, cancel=None):
        progress(ProgressEvent(f"Re-encoding the 4-bit weights as q8_0 (derived from the 4-bit weights)... ({bits})"))
        while not cancel.is_set():
            await asyncio.sleep(0.02)
        if step_finishes:  # a conversion step finishes before the cancel is seen: its copy is built
            return default_model_dir(bits)
        raise OperationCancelled("cancelled; nothing was added to the model store")

    monkeypatch.setattr(window.worker, "fetch_default_model", preparing)
    states: list[str] = []
    window.models.state_changed.connect(lambda _state, text: states.append(text))
    window.choice.choose_target("", 8)
    qtbot.waitUntil(lambda: find_dialog(window, "modelProgress") is not None, timeout=10_000)
    click(qtbot, find_dialog(window, "modelProgress").findChild(QPushButton))
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=30_000)
    qtbot.wait(200)  # (a dialog would be open by now)
    assert find_dialog(window, "modelError") is None
    assert window.settings.bits == FAST.bits and window.settings.target_model == ""
    assert window.worker.spec.target_dir == loaded and window.models.is_ready_for(window.settings)
    assert "Cancelling the preparation of the 8-bit copy…" in states, states
    assert not any("download" in text.lower() for text in states), states
    picker = window.model_picker
    assert picker.choice(picker.combo.currentIndex()) == ("", FAST.bits)  # the picker shows it again
    assert send_and_wait(qtbot, window, "Hi").state == "complete"
