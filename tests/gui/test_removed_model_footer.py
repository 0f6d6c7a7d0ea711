"""A reply written by a model removed from the store while it stayed loaded names it as the replies before it did,
bit-width included (a newcomer's footer read "Modèle-été-135M" where the reply before it read "Modèle-été-135M ·
4-bit": its manifest, which says the bit-width, was gone with its folder)."""

from __future__ import annotations

import shutil

from gui_helpers import send_and_wait

from app.gui.reply_format import NBSP, answered_with_label, footer_text
from app.gui.settings_store import AppSettings
from inference.models import store as model_store
from inference.models.importing import import_model


def test_a_reply_of_a_model_removed_meanwhile_still_says_its_bit_width(qtbot, make_window, tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    folder = import_model(tiny_ir["same"], "Modèle-été-135M")
    window = make_window(AppSettings(target_model="Modèle-été-135M").with_values(max_new_tokens=4, n_ctx=256))
    first = send_and_wait(qtbot, window, "Hello")
    assert answered_with_label(first.stats) == "Modèle-été-135M · 16-bit"
    shutil.rmtree(folder)  # removed from the store (e.g. by `specchat models remove`) while the window has it loaded
    assert not (model_store.models_dir() / "Modèle-été-135M").exists()
    second = send_and_wait(qtbot, window, "Hello again")
    assert second.state == "complete" and window.worker.spec.target_dir == folder
    assert answered_with_label(second.stats) == "Modèle-été-135M · 16-bit"
    assert footer_text(second.stats).endswith(f" · Modèle-été-135M{NBSP}·{NBSP}16-bit")
