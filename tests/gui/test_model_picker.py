"""The models in the window (offscreen): the target picker, the draft list that follows its tokenizer, Refresh,
each conversation's model, the slow-draft notice and the recommended-pairs flow, on tiny models in a temporary
store (each loads in about a second)."""

from __future__ import annotations

import pytest
from conftest import FAST
from gui_helpers import send_and_wait
from hub_server import HubServer

from app.gui.reply_format import footer_text
from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.widgets.settings_pane import BROWSE_DRAFT, LOOKUP_DRAFT
from inference.models import store as model_store
from inference.models.catalogue import CatalogueModel, CataloguePair
from inference.models.importing import import_model
from inference.settings import Decoding

#: Greedy, short replies, and a context the tiny models hold (their trained length is 2048).
TINY = AppSettings(target_model="tiny-same").with_values(max_new_tokens=8, n_ctx=256)


@pytest.fixture
def tiny_store(tiny_ir, shared_worker, tmp_path, monkeypatch):
    """A model store with three tiny models: two with the default tokenizer, one with another tokenizer."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    for source, name in (
        (tiny_ir["same"], "tiny-same"),
        (tiny_ir["same"], "tiny-same-b"),
        (tiny_ir["other"], "tiny-other"),
    ):
        import_model(source, name)
    return model_store.models_dir()


def _texts(combo) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def _pick(window, name: str) -> None:
    """Choose a model in the picker as a user does (activating an entry)."""
    combo = window.model_picker.combo
    index = next(i for i in range(combo.count()) if window.model_picker.choice(i)[0] == name)
    combo.setCurrentIndex(index)
    combo.activated.emit(index)


def _saved_target(window) -> str:
    """The target model in the window's settings file (written a short pause after the last edit)."""
    return SettingsStore(window.store.path).load().target_model


def _loaded_target(window) -> str:
    return window.worker.spec.target_dir.name if window.worker.spec else ""


def test_the_picker_lists_every_model_and_the_draft_list_follows_the_target(qtbot, make_window, tiny_store):
    settings = TINY.with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(tiny_store / "tiny-same-b"))
    window = make_window(settings)
    picker = window.model_picker.combo
    assert picker.objectName() == "modelPicker" and window.choose_model_action.shortcut().toString() == "Ctrl+L"
    texts = _texts(picker)
    assert texts[-1] == "Remote server (OpenAI-compatible)…"  # opens the remote-server dialog
    texts = texts[:-1]
    assert len(texts) == 6 and len(set(texts)) == 6, texts  # the default model at 4/8/16 bits, three tiny models
    assert texts[0].startswith("SmolLM2-135M-Instruct · 4-bit") and texts[0].endswith("not built yet")
    assert any(text.startswith("tiny-other · ") and " MiB" in text for text in texts)
    assert picker.currentText().startswith("tiny-same · ") and window.model_picker.device.text() == "on CPU"
    assert _loaded_target(window) == "tiny-same" and window.worker.spec.draft_dir.name == "tiny-same-b"
    drafts = window.settings_pane.draft_model
    assert [drafts.itemData(i) for i in range(drafts.count())] == ["", str(tiny_store / "tiny-same-b"), LOOKUP_DRAFT, BROWSE_DRAFT]
    pane = window.settings_pane
    assert not pane.bits.isVisibleTo(pane)  # the default model's bit-width row: not this model's

    # Another tokenizer: no installed model can draft for it; the draft-model decoding says what to do.
    _pick(window, "tiny-other")
    assert window.settings.target_model == "tiny-other"
    assert _texts(drafts) == ["(none with this tokenizer: use prompt lookup)", "Prompt lookup", "Other folder…"]
    assert "draft_model" in window.settings_pane.errors()
    drafts.setCurrentIndex(drafts.findData(LOOKUP_DRAFT))  # prompt lookup, chosen in the draft list
    assert window.settings_pane.decoding.currentData() == Decoding.PROMPT_LOOKUP.value
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=60_000)
    assert _loaded_target(window) == "tiny-other" and window.worker.spec.draft_dir is None
    qtbot.waitUntil(lambda: _saved_target(window) == "tiny-other", timeout=10_000)  # saved a short pause after

    # Back to the first target: its compatible drafts again, both other models with its tokenizer.
    _pick(window, "tiny-same")
    assert [drafts.itemData(i) for i in range(1, drafts.count())] == [str(tiny_store / "tiny-same-b"), LOOKUP_DRAFT, BROWSE_DRAFT]
    assert drafts.currentData() == LOOKUP_DRAFT  # the decoding chosen, prompt lookup, shows in the draft list
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=60_000)
    assert _loaded_target(window) == "tiny-same"
    qtbot.waitUntil(lambda: _saved_target(window) == "tiny-same", timeout=10_000)  # the file said tiny-other before


def test_a_model_added_while_the_app_runs_appears_after_refresh(qtbot, make_window, tiny_store, tiny_ir):
    window = make_window(TINY.with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(tiny_store / "tiny-same-b")))
    before = _texts(window.model_picker.combo)
    import_model(tiny_ir["same"], "late-arrival")  # as `specchat models import` in another process
    assert _texts(window.model_picker.combo) == before
    window.refresh_models_action.trigger()
    assert any(text.startswith("late-arrival · ") for text in _texts(window.model_picker.combo))
    drafts = window.settings_pane.draft_model
    assert str(tiny_store / "late-arrival") in [drafts.itemData(i) for i in range(drafts.count())]
    assert window.settings.draft_model == str(tiny_store / "tiny-same-b")  # the draft chosen stays chosen


def test_the_default_models_draft_head_is_a_draft_never_a_target(qtbot, make_window, tiny_store):
    """The head installed with the default model drafts for it only: it is no entry of the target picker."""
    from inference.models.default_head import DEFAULT_HEAD_NAME, ensure_default_head

    window = make_window(TINY)
    if ensure_default_head() is None:
        pytest.skip("this build ships no draft head")
    window.refresh_models_action.trigger()
    assert DEFAULT_HEAD_NAME in [m.store_name for m in model_store.installed_models()]
    entries = [window.model_picker.choice(i)[0] for i in range(window.model_picker.combo.count())]
    assert DEFAULT_HEAD_NAME not in entries and "tiny-same" in entries


def test_a_head_chosen_for_another_model_is_dropped_and_compare_drafts_by_prompt_lookup(qtbot, make_window, tiny_store):
    """A draft head drafts for the model it was trained for only: with another target, the window drops it (Compare
    on plain decoding then drafts by prompt lookup)."""
    from inference.draft_head import HEAD_K
    from inference.models.default_head import ensure_default_head
    from inference.settings import Decoding

    head = ensure_default_head()
    if head is None:
        pytest.skip("this build ships no draft head")
    window = make_window(TINY.with_values(draft_model=str(head), k=HEAD_K, decoding=Decoding.AUTOREGRESSIVE))
    # Compare runs Auto, which without a draft model drafts by prompt lookup, and loads none
    assert window.settings.draft_model == "" and window.settings.compare_decoding == Decoding.AUTO
    assert not window.settings.uses_draft_model
    assert window.settings.value("k") == HEAD_K  # Compare's Auto chooses its own K: the box's K drafted with no head
    assert window.worker.spec.draft_dir is None


def test_each_conversation_remembers_its_model_and_switching_to_one_answered_by_another_says_so(
    qtbot, make_window, tiny_store
):
    window = make_window(TINY)
    # A real reply records the model that wrote it, and its footer shows it.
    window.composer.edit.setPlainText("Hello")
    with qtbot.waitSignal(window.generation_finished, timeout=60_000) as finished:
        window.composer.send_button.click()
    reply = finished.args[0]
    assert reply.stats["target_model"] == "tiny-same" and footer_text(reply.stats).endswith(" · tiny-same\u00a0·\u00a016-bit")  # (the picker's name)
    first = reply.conversation_id
    assert not window.model_notice.isVisible()

    other = window.db.create_conversation("Old chat")
    window.db.add_message(other, "user", "Hi")
    window.db.add_message(other, "assistant", "Hello!", stats={"mode": "ar", "target_model": "tiny-other"})
    window.conversations.refresh()
    window.conversations.open(other)
    notice = window.model_notice
    assert notice.isVisible() and notice.kind == "conversation"
    assert notice.text.text() == "This chat was answered with tiny-other · 16-bit, not the model chosen now."
    assert _loaded_target(window) == "tiny-same"  # nothing switched silently
    assert notice.action.isVisible() and notice.action.text() == "Switch to it"
    notice.action.click()
    assert window.settings.target_model == "tiny-other" and not notice.isVisible()
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=60_000)
    assert _loaded_target(window) == "tiny-other"
    window.conversations.open(first)  # answered with tiny-same
    assert notice.isVisible() and notice.text.text().startswith("This chat was answered with tiny-same · 16-bit,")
    eight_bit = window.db.create_conversation("8-bit chat")
    window.db.add_message(eight_bit, "assistant", "x", stats={"mode": "ar", "target_model": "SmolLM2-135M-Instruct-int8"})
    window.conversations.open(eight_bit)
    assert "answered with SmolLM2-135M-Instruct · 8-bit," in notice.text.text()  # which copy of the default model
    window.conversations.new()
    assert not notice.isVisible()

    # A model no longer installed: said, with nothing to switch to.
    gone = window.db.create_conversation("Gone")
    window.db.add_message(gone, "assistant", "x", stats={"mode": "ar", "target_model": "removed-model"})
    window.conversations.open(gone)
    assert notice.text.text() == "This chat was answered with removed-model, which is no longer installed."
    assert not notice.action.isVisible()


def test_a_slow_draft_is_said_over_the_conversation_that_measured_it_never_left_over(qtbot, make_window, tiny_store):
    window = make_window(TINY.with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(tiny_store / "tiny-same-b")))
    notice = window.model_notice

    def compared(conversation: int, *speedups: float) -> None:
        for speedup in speedups:
            stats = {"compare": {"ar": {"mode": "ar"}, "spec": {"mode": "spec", "drafter": "model"}, "speedup": speedup}}
            window.chat._finished(window.db.message(window.db.add_message(conversation, "assistant", "x", stats=stats)))

    slow = window.db.create_conversation("Slow")
    window.conversations.open(slow)
    compared(slow, 0.4, 0.45)
    assert not notice.isVisible()  # two Compares are not evidence enough, however slow
    compared(slow, 0.5)
    assert notice.isVisible() and notice.kind == "slow_draft"
    assert (
        "made this chat's last 3 replies 0.45x as fast as plain decoding (95% interval 0.34-0.59; tiny-same-b drafting "
        "for tiny-same)" in notice.text.text()
    )
    assert notice.text.text().endswith("Try Speculative (prompt lookup), or plain decoding.")  # neither is chosen
    other = window.db.create_conversation("Other")
    window.conversations.open(other)
    assert not notice.isVisible()  # the first chat's measurement is not this one's
    compared(other, 0.73, 0.73, 0.73)
    assert "0.73x" in notice.text.text()
    window.conversations.open(slow)
    assert "0.45x" in notice.text.text()
    compared(slow, 1.3)
    assert not notice.isVisible()  # a fast reply puts 1.0 back into the interval
    compared(slow, 0.5, 0.5, 0.5, 0.5)
    assert notice.isVisible()
    notice.close_button.click()
    window.conversations.open(other)
    assert not notice.isVisible()  # dismissed for this pair, in every chat
    window.choice.dismissed.clear()
    window.conversations.open(slow)
    notice.action.click()  # "Use prompt lookup"
    assert window.settings.generation.decoding == Decoding.PROMPT_LOOKUP
    assert not notice.isVisible()  # the draft model is no longer chosen


def test_a_compare_on_plain_decoding_runs_auto_and_is_never_judged_slow(make_window):
    """Compare on plain decoding runs plain against Auto (which drafts with the default model's head where that
    pays, and decodes plainly where it does not): a Compare against Auto says nothing about the draft, so no
    slow-draft notice follows even at 0.72x (a newcomer was told to "keep plain decoding" after one noisy Compare)."""
    window = make_window(FAST.with_values(decoding=Decoding.AUTOREGRESSIVE))
    settings = window.settings
    if not settings.draft_is_a_head:
        pytest.skip("this build ships no draft head")
    assert settings.generation.decoding == Decoding.AUTOREGRESSIVE and settings.compare_decoding == Decoding.AUTO
    notice = window.model_notice
    conversation = window.db.create_conversation("Compared")
    window.conversations.open(conversation)
    stats = {"compare": {"ar": {"mode": "ar"}, "spec": {"mode": "auto", "drafter": "head"}, "speedup": 0.72}}
    window.chat._finished(window.db.message(window.db.add_message(conversation, "assistant", "x", stats=stats)))
    assert not (notice.isVisible() and notice.kind == "slow_draft")


def test_download_this_pair_ends_with_the_pair_selected_and_ready(qtbot, make_window, tiny_store, tiny_ir, monkeypatch):
    window = make_window(TINY)
    pair = CataloguePair(
        "Tiny pair", CatalogueModel("test-org/tiny-target-ov", 6, "Apache-2.0", openvino=True),
        CatalogueModel("test-org/tiny-draft-ov", 6, "Apache-2.0", openvino=True), 49152, "two tiny models, one tokenizer",
    )  # fmt: skip
    repos = {"test-org/tiny-target-ov": tiny_ir["same"], "test-org/tiny-draft-ov": tiny_ir["same"]}
    dialog = _download_pair(qtbot, window, pair, repos, monkeypatch)
    assert window.settings.target_model == "tiny-target-ov"
    assert window.settings.draft_model == str(tiny_store / "tiny-draft-ov")
    assert window.settings.generation.decoding == Decoding.DRAFT_MODEL
    assert window.model_picker.combo.currentText().startswith("tiny-target-ov · ")
    assert window.settings_pane.draft_model.currentData() == str(tiny_store / "tiny-draft-ov")
    assert "selected in the window" in dialog.status.text()
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=60_000)
    assert _loaded_target(window) == "tiny-target-ov" and window.worker.spec.draft_dir.name == "tiny-draft-ov"

    # The pair again, with another target chosen meanwhile: the installed models are used, nothing is downloaded.
    _pick(window, "tiny-same")
    with qtbot.waitSignal(dialog.pair_installed, timeout=30_000):
        dialog.download_pair_button.click()  # the hub server is gone: a download would fail
    assert "test-org/tiny-draft-ov is installed already, as tiny-draft-ov" in dialog.catalogue_log.toPlainText()
    assert "installed already" not in dialog.log.toPlainText()  # the Add tab's log keeps its own operations
    assert window.settings.target_model == "tiny-target-ov"
    dialog.close()


def _download_pair(qtbot, window, pair: CataloguePair, repos: dict, monkeypatch):
    """Click the Models dialog's "Download this pair" on ``pair`` (put first in its catalogue) with a hub on
    127.0.0.1 serving ``repos`` (repository id -> folder), and wait until the pair is installed; the dialog."""
    with HubServer(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        window.choice.show_models()
        dialog = window.choice.models_dialog
        dialog.catalogue[0] = pair
        dialog.tabs.setCurrentIndex(2)
        dialog.catalogue_table.selectRow(0)
        with qtbot.waitSignal(dialog.pair_installed, timeout=120_000):
            dialog.download_pair_button.click()
    return dialog


def test_a_pair_whose_draft_is_the_built_in_model_uses_its_copy(qtbot, make_window, tiny_store, tiny_ir, monkeypatch):
    """The catalogue's SmolLM2 1.7B pair drafts with the default model itself: "Download this pair" takes the
    store's own copy at the chosen bit-width (``ensure_default_model``) instead of downloading and converting the
    135M checkpoint (whose converted copy would take the built-in model's name, which the store refuses)."""
    from inference.models import default_model

    built = []

    def ensure_default_model(bits, **_):
        built.append(bits)
        return tiny_store / "tiny-same"  # stands for the built-in copy: the window pairs whatever folder it gets

    monkeypatch.setattr(default_model, "ensure_default_model", ensure_default_model)
    window = make_window(TINY)
    pair = CataloguePair(
        "Tiny pair", CatalogueModel("test-org/tiny-target-ov", 6, "Apache-2.0", openvino=True),
        CatalogueModel("test-org/built-in", 90, "Apache-2.0", openvino=False, built_in=True), 49152, "one tokenizer",
    )  # fmt: skip
    dialog = _download_pair(qtbot, window, pair, {"test-org/tiny-target-ov": tiny_ir["same"]}, monkeypatch)  # no draft
    assert built == [int(dialog.bits_combo.currentData())]
    assert "test-org/built-in is the built-in model: its 4-bit copy is used" in dialog.catalogue_log.toPlainText()
    assert window.settings.target_model == "tiny-target-ov"
    assert window.settings.draft_model == str(tiny_store / "tiny-same")
    dialog.close()


def _removal_question(qtbot, dialog, name: str) -> str:
    """The text of the Models dialog's confirmation of removing ``name`` (the box is left open)."""
    from PySide6.QtWidgets import QMessageBox

    names = [dialog.table.item(row, 0).text() for row in range(dialog.table.rowCount())]
    dialog.table.selectRow(names.index(name))
    dialog.remove_button.click()
    qtbot.waitUntil(lambda: dialog.findChild(QMessageBox, "confirm-remove") is not None, timeout=5_000)
    return dialog.findChild(QMessageBox, "confirm-remove").text()


def test_removing_the_model_in_use_says_so_before(qtbot, make_window, tiny_store, with_the_default_model):
    from PySide6.QtWidgets import QMessageBox

    settings = TINY.with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(tiny_store / "tiny-same-b"))
    window = make_window(settings)
    window.choice.show_models()
    dialog = window.choice.models_dialog
    assert _removal_question(qtbot, dialog, "tiny-same") == (
        f"tiny-same is the model in use. Remove it?\n\nThis deletes {tiny_store / 'tiny-same'} and its files; the "
        "window then chats with the default model, SmolLM2-135M-Instruct."
    )
    box = dialog.findChild(QMessageBox, "confirm-remove")
    assert box.defaultButton() is box.button(QMessageBox.Cancel)
    box.button(QMessageBox.Cancel).click()
    qtbot.waitUntil(lambda: dialog.findChild(QMessageBox, "confirm-remove") is None, timeout=5_000)
    assert (tiny_store / "tiny-same").is_dir()
    assert _removal_question(qtbot, dialog, "tiny-same-b") == (
        f"tiny-same-b is the draft in use. Remove it?\n\nThis deletes {tiny_store / 'tiny-same-b'} and its files; "
        "replies then go without it."
    )
    dialog.findChild(QMessageBox, "confirm-remove").button(QMessageBox.Cancel).click()
    qtbot.waitUntil(lambda: dialog.findChild(QMessageBox, "confirm-remove") is None, timeout=5_000)
    assert _removal_question(qtbot, dialog, "tiny-other") == (
        f"Remove tiny-other?\n\nThis deletes {tiny_store / 'tiny-other'} and its files."
    )  # not in use: as before
    dialog.findChild(QMessageBox, "confirm-remove").button(QMessageBox.Cancel).click()
    qtbot.waitUntil(lambda: dialog.findChild(QMessageBox, "confirm-remove") is None, timeout=5_000)

    # Removed: the window chats with the default model, and says why.
    _removal_question(qtbot, dialog, "tiny-same")
    with qtbot.waitSignal(dialog.models_changed, timeout=30_000):
        next(b for b in dialog.findChild(QMessageBox, "confirm-remove").buttons() if b.text() == "&Remove").click()
    assert not (tiny_store / "tiny-same").exists() and window.settings.target_model == ""
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=60_000)
    assert _loaded_target(window) == "SmolLM2-135M-Instruct-int4"
    assert window.model_notice.text.text() == (
        "tiny-same is no longer installed: chatting with the default model, SmolLM2-135M-Instruct · 4-bit, instead."
    )
    dialog.close()


@pytest.fixture
def with_the_default_model(tiny_store, int4_dir):
    """``tiny_store`` with the default model's 4-bit copy and its draft head (linked): what a start falls back to."""
    from inference.models.default_head import DEFAULT_HEAD_NAME

    for folder in (int4_dir, int4_dir.parent / DEFAULT_HEAD_NAME):
        (tiny_store / folder.name).symlink_to(folder, target_is_directory=True)
    return tiny_store


def test_a_start_whose_model_is_no_longer_installed_chats_with_the_default_model(qtbot, make_window, with_the_default_model):
    window = make_window(TINY.with_values(target_model="removed-meanwhile"))
    assert window.settings.target_model == "" and _loaded_target(window) == "SmolLM2-135M-Instruct-int4"
    assert window.model_picker.combo.currentText().startswith("SmolLM2-135M-Instruct · 4-bit")
    assert not window.model_picker.error.isVisible()
    notice = window.model_notice
    assert notice.isVisible() and notice.text.text() == (
        "removed-meanwhile is no longer installed: chatting with the default model, SmolLM2-135M-Instruct · 4-bit, instead."
    )
    _pick(window, "tiny-same")  # another target chosen: the notice is over
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=60_000)
    assert _loaded_target(window) == "tiny-same" and not notice.isVisible()


def test_before_the_default_model_is_built_its_other_copies_can_draft_for_it(
    make_window, tmp_path, monkeypatch, shared_worker
):
    import json

    from inference.models.default_model import default_model_dir

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    int8 = default_model_dir(8)
    int8.mkdir(parents=True)  # only its manifest: the window lists and pairs models from manifests
    manifest = {"name": "SmolLM2-135M-Instruct", "bits": 8, "size_bytes": 2**27, "tokenizer_fingerprint": "ab" * 32}
    (int8 / model_store.MANIFEST_NAME).write_text(json.dumps(manifest))
    settings = AppSettings(bits=4).with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(int8))
    window = make_window(settings, start=False)  # the 4-bit copy is not built: starting would fetch it
    drafts = window.settings_pane.draft_model
    assert [drafts.itemData(i) for i in range(drafts.count())] == ["", str(int8), LOOKUP_DRAFT, BROWSE_DRAFT]
    assert drafts.currentData() == str(int8) and "draft_model" not in window.settings_pane.errors()
    assert window.model_picker.combo.currentText() == "SmolLM2-135M-Instruct · 4-bit · not built yet"


def test_replies_are_judged_from_their_plain_and_speculative_steps(make_window, tiny_store):
    from inference.events import StepStats

    window = make_window(TINY.with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(tiny_store / "tiny-same-b")))
    window.replies.run_started.emit("spec", False)
    plain = StepStats(0, 0, 1, 0.0, 5.0, 10.0, 0, 10, 256, 0.0, 0)  # 100 tokens/s
    drafted = StepStats(4, 1, 2, 30.0, 15.0, 50.0, 4, 12, 256, 0.0, 0)  # 40 tokens/s
    window.replies.events.emit([plain] * 3 + [drafted] * 6)  # plain steps measuring the plain cost, then speculative ones (K chosen)
    conversation = window.db.create_conversation("Slow draft")
    window.conversations.open(conversation)
    for _ in range(3):  # (three replies measured alike: one is not evidence enough)
        message_id = window.db.add_message(conversation, "assistant", "x", stats={"mode": "spec", "drafter": "model"})
        window.chat._finished(window.db.message(message_id))
    assert window.model_notice.kind == "slow_draft" and "3 replies 0.40x as fast" in window.model_notice.text.text()


def test_browse_opens_in_the_models_folder(qtbot, make_window, tiny_store):
    from pathlib import Path

    from gui_helpers import accept_file_dialog, find_dialog

    window = make_window(TINY.with_values(decoding=Decoding.DRAFT_MODEL, draft_model=str(tiny_store / "tiny-same-b")))
    pane = window.settings_pane
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(BROWSE_DRAFT))  # "Other folder…"
    qtbot.waitUntil(lambda: find_dialog(window, "fileDialog") is not None, timeout=5_000)
    dialog = find_dialog(window, "fileDialog")
    assert Path(dialog.directory().absolutePath()) == tiny_store
    accept_file_dialog(dialog, tiny_store / "tiny-same")
    qtbot.waitUntil(
        lambda: window.settings_pane.draft_model.currentData() == str(tiny_store / "tiny-same"), timeout=5_000
    )


def test_the_status_bar_names_the_model_as_the_picker_does(qtbot, make_window):
    """The picker said "SmolLM2-135M-Instruct · 4-bit" and the status bar "SmolLM2-135M-Instruct-int4": one name, in
    the status bar and in the replies' footers."""
    window = make_window(FAST)
    picker_text = window.model_picker.combo.currentText()  # "SmolLM2-135M-Instruct · 4-bit · 98 MiB"
    shown = window.model_label.text()  # "SmolLM2-135M-Instruct · 4-bit · exact"
    name = shown.rsplit(" · ", 1)[0]
    assert name == "SmolLM2-135M-Instruct · 4-bit" and picker_text.startswith(name + " · "), (shown, picker_text)
    assert "int4" not in shown and "int4" not in window.model_label.toolTip()
    assert window.model_label.toolTip().startswith(f"{name} on CPU, draft SmolLM2-135M-Instruct-head · ")
    final = send_and_wait(qtbot, window, "Say hi.")  # a reply's footer names it so too
    footer = window.chat_view.widget(final.id).footer.text()
    assert footer.endswith(" · " + name.replace(" · ", "\u00a0·\u00a0")) and "int4" not in footer, footer  # (kept on one line)
    assert final.stats["target_model"] == "SmolLM2-135M-Instruct-int4"  # (the store name, which finds the model)


def test_a_footer_names_the_model_by_its_label_else_by_its_store_name():
    stats = {"mode": "ar", "drafter": None, "ttft_ms": 40.0, "tokens_per_s": 60.0, "acceptance_rate": None,
             "new_tokens": 8, "target_model": "SmolLM2-135M-Instruct-int4"}  # fmt: skip
    assert footer_text(stats).endswith(" · SmolLM2-135M-Instruct-int4")  # a reply recorded before labels were
    labelled = {**stats, "target_label": "SmolLM2-135M-Instruct · 4-bit"}
    assert footer_text(labelled).endswith(" · SmolLM2-135M-Instruct\u00a0·\u00a04-bit") and "int4" not in footer_text(labelled)


def test_auto_names_only_the_drafters_it_can_choose(qtbot, make_window, tiny_store):
    """Newcomer trial: with an imported model (no draft head) the Decoding list read "Auto (fastest measured: draft
    head, prompt lookup or plain, per step)" while the draft list said "(none)". Auto's entry names the drafter
    chosen (a draft model, a draft head) or, with none, prompt lookup and plain steps only."""
    window = make_window(TINY.with_values(decoding=Decoding.AUTO, draft_model=""))
    pane = window.settings_pane
    auto = pane.decoding.findData(Decoding.AUTO.value)
    assert pane.draft_model.currentText() == "(none)"
    assert pane.decoding.currentText() == "Auto (fastest measured: prompt lookup or plain, per step)"
    drafts = pane.draft_model
    index = drafts.findData(str(tiny_store / "tiny-same-b"))  # a draft model chosen: Auto may draft with it
    drafts.setCurrentIndex(index)
    assert window.settings.generation.decoding == Decoding.AUTO
    assert pane.decoding.itemText(auto) == "Auto (fastest measured: draft model, prompt lookup or plain, per step)"
    drafts.setCurrentIndex(0)  # back to none
    assert pane.decoding.itemText(auto) == "Auto (fastest measured: prompt lookup or plain, per step)"
    _pick(window, "tiny-other")  # no draft with its tokenizer
    assert drafts.currentText().startswith("(none with this tokenizer")
    assert pane.decoding.itemText(auto) == "Auto (fastest measured: prompt lookup or plain, per step)"


def test_autos_entry_names_a_draft_head_only_when_one_is_chosen(head_folder):
    from app.gui.widgets.settings_pane import auto_label

    assert auto_label(head_folder) == "Auto (fastest measured: draft head, prompt lookup or plain, per step)"
    assert auto_label("") == "Auto (fastest measured: prompt lookup or plain, per step)"
