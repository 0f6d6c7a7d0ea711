"""The main window says the model store's refusals in its own words (trial: the model chatting removed with
``specchat models remove`` while the window was open, then a reload: the picker's note, the status bar and the reply
that could not start said "see `specchat models list`", advice for a terminal)."""

from __future__ import annotations

import shutil
from dataclasses import replace

from gui_helpers import send_and_wait

from app.gui.settings_store import AppSettings
from app.gui.store_words import MAIN_WINDOW_ADVICE, WINDOW_ADVICE, window_words
from inference.models import store as model_store
from inference.models.errors import CLI_ADVICE
from inference.models.importing import import_model


def test_a_model_removed_by_the_command_line_is_refused_in_the_windows_words(qtbot, make_window, tiny_ir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    gone = import_model(tiny_ir["same"], "tiny-a")
    import_model(tiny_ir["same"], "tiny-b")
    window = make_window(AppSettings(target_model="tiny-a").with_values(max_new_tokens=4, n_ctx=256))
    failures = []
    window.model_failed.connect(failures.append)
    shutil.rmtree(gone)  # `specchat models remove tiny-a` while the window chats with it
    window.choice.apply(replace(window.settings, precision="f32"))  # a reload: the target is looked up again
    qtbot.waitUntil(lambda: window.model_state == "error", timeout=60_000)
    picker = window.model_picker
    said = (
        "no installed model named 'tiny-a'; did you mean: tiny-b? (installed: tiny-b); choose another model in the "
        "model picker"
    )
    assert picker.error.isVisible() and picker.error.text() == said
    assert failures == [said]
    reply = send_and_wait(qtbot, window, "Hello")
    assert reply is None and window.models.error == said  # the reply could not start: it says why, as the picker
    assert "specchat" not in window.statusBar().currentMessage()


def test_every_advice_has_the_windows_words():
    """Each advice key the store uses has the dialog's words and the main window's, none naming a command."""
    for advice in (WINDOW_ADVICE, MAIN_WINDOW_ADVICE):
        assert advice.keys() == CLI_ADVICE.keys()
        assert not any("`" in words or "--" in words or "specchat " in words for words in advice.values())


def test_the_main_windows_words_for_a_model_not_found(tmp_path, monkeypatch):
    import pytest

    from inference.models.errors import ModelImportError

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ModelImportError) as caught:
        model_store.find_model(tmp_path / "gone")
    assert window_words(caught.value, MAIN_WINDOW_ADVICE) == (
        f"model folder {tmp_path / 'gone'} does not exist; give a model folder or an installed model's name "
        "(choose an installed model in the model picker)"
    )


def test_a_draft_removed_by_the_command_line_is_refused_at_the_drafter(qtbot, make_window, tiny_ir, tmp_path, monkeypatch):
    """The draft chosen removed from the store, then a reload: the engine reused the draft loaded from the folder,
    read its tokenizer from the folder gone and failed with OpenVINO's "Check 'm_ireq_queue_detokenizer' failed at
    .../tokenizer_impl.cpp:740: Detokenizer model has not been provided" (the retry question). It is refused at the
    Drafter, as a target gone is at the picker, and the models loaded stay in use."""
    from inference.settings import Decoding

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    import_model(tiny_ir["same"], "tiny-a")
    draft = import_model(tiny_ir["same"], "tiny-b")
    settings = AppSettings(target_model="tiny-a", draft_model=str(draft)).with_values(max_new_tokens=4, n_ctx=256)
    window = make_window(settings.with_values(decoding=Decoding.DRAFT_MODEL))
    assert window.worker.spec.draft_dir == draft
    failures = []
    window.model_failed.connect(failures.append)
    shutil.rmtree(draft)  # `specchat models remove tiny-b`
    window.choice.apply(replace(window.settings, precision="f32"))
    qtbot.waitUntil(lambda: window.model_state == "error", timeout=60_000)
    said = "the draft tiny-b is no longer installed: choose another drafter"
    assert failures == [said] and window.settings_pane.errors().get("draft_model") == said[0].upper() + said[1:]
    assert window.worker.spec.draft_dir == draft and window.worker.spec.target_dir.name == "tiny-a"


def test_a_model_folder_left_incomplete_is_refused_in_the_windows_words(qtbot, make_window, tiny_ir, tmp_path,
                                                                       monkeypatch):
    """The chosen model's weights deleted, then a reload: the retry question said the engine's "Re-import or
    re-download the model (`specchat models fetch-default` for the default one)", advice for a terminal."""
    from gui_helpers import find_dialog
    from PySide6.QtWidgets import QMessageBox

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    folder = import_model(tiny_ir["same"], "tiny-a")
    window = make_window(AppSettings(target_model="tiny-a").with_values(max_new_tokens=4, n_ctx=256))
    (folder / "openvino_model.bin").unlink()
    window.choice.apply(replace(window.settings, precision="f32"))
    qtbot.waitUntil(lambda: find_dialog(window, "modelError") is not None, timeout=60_000)
    box = find_dialog(window, "modelError")
    said = (f"model folder {folder} is incomplete: missing openvino_model.bin. Re-import or re-download the model "
            "(Models > Manage models…).")
    assert window.models.error == said and said in box.informativeText()
    assert "specchat" not in box.informativeText()
    box.button(QMessageBox.StandardButton.Close).click()
    qtbot.waitUntil(lambda: window.model_state == "error", timeout=60_000)


def test_a_chat_that_must_roll_a_model_without_its_config_is_refused_in_the_windows_words(qtbot, make_window, tiny_ir,
                                                                                        tmp_path, monkeypatch):
    """A model whose config.json is gone cannot roll its context; a chat longer than the context said "Re-import
    the model with `specchat models import`", advice for a terminal."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    folder = import_model(tiny_ir["same"], "tiny-a")
    (folder / "config.json").unlink()
    window = make_window(AppSettings(target_model="tiny-a").with_values(max_new_tokens=200, n_ctx=64))
    reply = send_and_wait(qtbot, window, "Hello")  # the reply outgrows the context
    said = (f"the conversation needs more than n_ctx tokens, but tiny-a cannot be rolled: {folder / 'config.json'} "
            "is missing: RoPE parameters are unknown, so the rolling context cannot shift the KV cache. Re-import or "
            "re-download the model (Models > Manage models…).")
    assert reply.state == "error" and reply.stats["error"] == said
    assert window.composer.error_text == f"The reply stopped with an error: {said}"
