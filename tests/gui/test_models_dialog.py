"""The Models dialog (offscreen): import, download with progress and cancel, remove with confirmation,
pair check, catalogue; long work never blocks the event loop."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hub_server import HubServer
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox

from app.gui.widgets.models_dialog import ModelsDialog
from inference.models import store as model_store
from inference.models.errors import ModelImportError
from inference.models.importing import classify_source


@pytest.fixture(scope="module")
def tiny_sources(tiny_ir):
    return tiny_ir


@pytest.fixture
def dialog(qtbot, qasync_loop, tmp_path, monkeypatch):
    """The dialog on the asyncio loop that runs on Qt's (its operations are coroutines there, as in the app)."""
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SPECCHAT_DISK_QUOTA_BYTES", raising=False)
    widget = ModelsDialog()
    qtbot.addWidget(widget)
    widget.show()
    yield widget
    if widget.job is not None:
        widget.cancel_job()
        qtbot.waitUntil(lambda: widget.job is None, timeout=30_000)


class _Heartbeat:
    """Counts event-loop turns with a 20 ms timer; ``max_gap`` is the longest time the loop was blocked."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.max_gap = 0.0
        self.timer = QTimer()
        self.timer.timeout.connect(self._tick)
        self.timer.start(20)

    def _tick(self) -> None:
        now = time.monotonic()
        self.max_gap = max(self.max_gap, now - self.last)
        self.last = now

    def stop(self) -> None:
        self.timer.stop()


def _button(box: QMessageBox, text: str):
    """The button of ``box`` that reads ``text`` (e.g. "&Remove")."""
    return next(button for button in box.buttons() if button.text() == text)


def _names(dialog: ModelsDialog) -> list[str]:
    return [dialog.table.item(row, 0).text() for row in range(dialog.table.rowCount())]


def test_classify_source(tiny_sources, tmp_path):
    assert classify_source(str(tiny_sources["gguf"])) == "gguf"
    assert classify_source(str(tiny_sources["same"])) == "ir"
    (tmp_path / "config.json").write_text("{}")
    assert classify_source(str(tmp_path)) == "checkpoint"
    assert classify_source("OpenVINO/Phi-3-mini-FastDraft-50M-int8-ov") == "repo"
    assert classify_source("") == classify_source("gemma") == ""
    for missing in ("/no/such/path/x", "~/no-such-model", "./x", "a/b/c", "model.Q4_0.gguf", "org/model.gguf"):
        with pytest.raises(ModelImportError) as caught:
            classify_source(missing)
        assert str(caught.value) == f"no such file or folder: {missing}"
    (tmp_path / "config.json").unlink()
    (tmp_path / "readme.txt").write_text("no model here\n")
    with pytest.raises(ModelImportError) as caught:
        classify_source(str(tmp_path))
    assert str(caught.value) == (
        f"{tmp_path} is not a model folder: no openvino_model.xml (OpenVINO IR) nor config.json (a Hugging Face checkpoint)"
    )


def test_a_path_that_does_not_exist_is_said(dialog, tmp_path):
    missing = tmp_path / "doesnotexist.gguf"
    dialog.source_edit.setText(str(missing))
    assert dialog.add_hint.text() == f"no such file or folder: {missing}"
    assert not dialog.add_button.isEnabled()
    dialog.source_edit.setText("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert dialog.add_button.text() == "Download" and dialog.add_button.isEnabled()
    dialog.source_edit.setText("gemma")
    assert dialog.add_hint.text() == "Enter a path or a Hugging Face repository id (organisation/name)."
    assert not dialog.add_button.isEnabled()


def test_a_folder_without_a_model_is_said_before_any_conversion(dialog, tmp_path):
    (tmp_path / "readme.txt").write_text("no model here\n")
    dialog.source_edit.setText(str(tmp_path))
    assert dialog.add_hint.text() == (
        f"{tmp_path} is not a model folder: no openvino_model.xml (OpenVINO IR) nor config.json (a Hugging Face checkpoint)"
    )
    assert dialog.add_button.text() == "Add" and not dialog.add_button.isEnabled()
    dialog.add_model()
    assert dialog.status.text() == dialog.add_hint.text() and dialog.job is None


def test_import_remove_and_pair_check(qtbot, dialog, tiny_sources):
    assert _names(dialog) == [] and dialog.tabs.count() == 3
    # Import two IR folders, off the GUI thread.
    heartbeat = _Heartbeat()
    for source, name in ((tiny_sources["same"], "tiny-same"), (tiny_sources["other"], "tiny-other")):
        dialog.source_edit.setText(str(source))
        dialog.name_edit.setText(name)
        assert dialog.add_button.text() == "Import" and dialog.add_button.isEnabled()
        with qtbot.waitSignal(dialog.models_changed, timeout=60_000):
            dialog.add_button.click()
            assert dialog.busy() and not dialog.add_button.isEnabled()
    heartbeat.stop()
    assert heartbeat.max_gap < 0.5, f"the event loop was blocked for {heartbeat.max_gap:.2f} s"
    assert sorted(_names(dialog)) == ["tiny-other", "tiny-same"]
    assert "Import" in dialog.log.toPlainText() or "ready" in dialog.log.toPlainText()
    # plain words: no RoPE or tokenizer-hash column; the vocabulary that pairs models is in each row's tooltip
    headers = [dialog.table.horizontalHeaderItem(c).text() for c in range(dialog.table.columnCount())]
    assert headers == ["Name", "Use", "Bits", "Size", "Long chats", "Source", "Added"]
    assert dialog.table.item(0, 4).text() == "keep going (rolling window)"
    assert dialog.table.item(0, 4).toolTip().startswith("Long chats keep going: past the context length (n_ctx)")
    assert dialog.table.horizontalHeaderItem(4).toolTip().startswith("Whether a chat longer than the context length")
    assert "Vocabulary (tokenizer)" in dialog.table.item(0, 0).toolTip()

    # Pair check: another tokenizer is refused with the reason.
    dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(str(model_store.models_dir() / "tiny-same")))
    dialog.draft_combo.setCurrentIndex(dialog.draft_combo.findData(str(model_store.models_dir() / "tiny-other")))
    assert dialog.target_combo.currentText().startswith("tiny-same · 16-bit · ") and dialog.target_combo.currentText().endswith(" MiB")
    add_log = dialog.log.toPlainText()
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: dialog.pair_result.text().startswith(("✔", "✘")), timeout=30_000)
    assert dialog.pair_result.text().startswith("✘ Refused") and "tokenizers differ" in dialog.pair_result.text()
    qtbot.waitUntil(lambda: dialog.job is None, timeout=5_000)
    assert dialog.log.toPlainText() == add_log  # the Add tab's log shows its own lines only (not "Checking the pair: done")

    # Remove with confirmation: Cancel (the default) keeps it, Remove removes it.
    row = _names(dialog).index("tiny-other")
    dialog.table.selectRow(row)
    dialog.remove_button.click()
    box = dialog.findChild(QMessageBox, "confirm-remove")
    assert box is not None and box.isVisible()
    assert sorted(button.text() for button in box.buttons()) == ["&Remove", "Cancel"]  # (it said Yes)
    assert box.defaultButton() is box.button(QMessageBox.Cancel)
    box.button(QMessageBox.Cancel).click()
    qtbot.wait(50)
    assert "tiny-other" in _names(dialog)
    dialog.table.selectRow(_names(dialog).index("tiny-other"))
    dialog.remove_button.click()
    qtbot.waitUntil(lambda: dialog.findChild(QMessageBox, "confirm-remove") is not None, timeout=5_000)
    with qtbot.waitSignal(dialog.models_changed, timeout=30_000):
        _button(dialog.findChild(QMessageBox, "confirm-remove"), "&Remove").click()
    assert _names(dialog) == ["tiny-same"]
    assert not (model_store.models_dir() / "tiny-other").exists()


@pytest.fixture
def default_store(dialog, int4_dir, tiny_sources):
    """The dialog's store holding the default model and its draft head (linked), and the tiny model "tiny-same"
    (same tokenizer, another model)."""
    from inference.models.default_head import DEFAULT_HEAD_NAME
    from inference.models.importing import import_ir_folder

    root = model_store.models_dir()
    root.mkdir(parents=True)
    for folder in (int4_dir, int4_dir.parent / DEFAULT_HEAD_NAME):
        (root / folder.name).symlink_to(folder, target_is_directory=True)
    return {"target": root / int4_dir.name, "head": root / DEFAULT_HEAD_NAME, "tiny": import_ir_folder(tiny_sources["same"], "tiny-same")}


def _check_pair(qtbot, dialog, target: Path, draft: Path) -> str:
    dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(str(target)))
    dialog.draft_combo.setCurrentIndex(dialog.draft_combo.findData(str(draft)))
    assert (dialog.target_combo.currentData(), dialog.draft_combo.currentData()) == (str(target), str(draft))
    dialog.pair_result.setText("")
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: dialog.pair_result.text().startswith(("✔", "✘")), timeout=30_000)
    return dialog.pair_result.text()


def test_pair_check_accepts_the_draft_head_for_its_own_model_only(qtbot, dialog, default_store):
    dialog.refresh()
    head = r"SmolLM2-135M-Instruct-head · 8-bit · \d+ MiB"  # its size changes with the head shipped
    assert re.fullmatch(f"✔ {head} can draft for {re.escape(dialog.target_combo.currentText())}: a draft head made "
                        "for this model.", _check_pair(qtbot, dialog, default_store["target"], default_store["head"]))
    assert _check_pair(qtbot, dialog, default_store["tiny"], default_store["head"]) == (
        "✘ Refused: SmolLM2-135M-Instruct-head cannot draft for tiny-same: a draft head made for "
        "SmolLM2-135M-Instruct drafts only for SmolLM2-135M-Instruct"
    )


def test_a_pair_checks_outcome_is_said_once(qtbot, dialog, default_store):
    """Newcomer trial: a refused pair was said twice, "✘ Refused: ..." under the pair and "Checking the pair failed:
    ..." (the same reason) in the status line below, as if the check had broken. The line under the pair says the
    refusal; the status line says nothing of it."""
    dialog.refresh()
    assert _check_pair(qtbot, dialog, default_store["tiny"], default_store["head"]).startswith("✘ Refused: ")
    qtbot.waitUntil(lambda: dialog.job is None, timeout=5_000)
    assert dialog.status.text() == ""


def test_the_draft_head_is_listed_as_a_draft_and_never_offered_as_a_target(dialog, default_store):
    dialog.refresh()
    rows = {dialog.table.item(row, 0).text(): dialog.table.item(row, 1).text() for row in range(dialog.table.rowCount())}
    assert rows == {
        "SmolLM2-135M-Instruct-head": "draft head for SmolLM2-135M-Instruct",
        "SmolLM2-135M-Instruct-int4": "chat",
        "tiny-same": "chat",
    }
    targets = [dialog.target_combo.itemData(i) for i in range(dialog.target_combo.count())]
    drafts = [dialog.draft_combo.itemData(i) for i in range(dialog.draft_combo.count())]
    assert targets == [str(default_store["target"]), str(default_store["tiny"])]
    assert drafts == [str(default_store["head"]), str(default_store["tiny"])]  # (never the target itself)
    assert dialog.target_combo.currentData() == str(default_store["target"])
    assert dialog.draft_combo.currentData() == str(default_store["tiny"])  # (the smallest that fits, as the window's)
    # a head does not chat: no "keep going" under "Long chats", and no vocabulary of its own (newcomer trial)
    endless = {dialog.table.item(row, 0).text(): dialog.table.item(row, 4) for row in range(dialog.table.rowCount())}
    assert endless["SmolLM2-135M-Instruct-int4"].text() == "keep going (rolling window)"
    assert endless["SmolLM2-135M-Instruct-head"].text() == "—"
    assert endless["SmolLM2-135M-Instruct-head"].toolTip() == (
        "Long chats: does not apply: a draft head does not chat, it drafts for SmolLM2-135M-Instruct"
    )
    head_name = next(dialog.table.item(row, 0) for row in range(dialog.table.rowCount())
                     if dialog.table.item(row, 0).text() == "SmolLM2-135M-Instruct-head")  # fmt: skip
    assert head_name.toolTip().endswith("A draft head: it drafts for SmolLM2-135M-Instruct only (with that model's vocabulary)")


def test_download_shows_progress_and_cancel_leaves_nothing(qtbot, dialog, tiny_sources):
    with HubServer({"test-org/tiny-ov": tiny_sources["same"]}) as hub:
        hub.throttle_s = 0.02
        fractions: list[float] = []

        original = dialog._download_work

        def via_local_hub(repo_id, bits, name, replace):
            from inference.models.hub import install_from_hub

            return lambda report, cancel: install_from_hub(repo_id, bits=bits, name=name, replace=replace, endpoint=hub.url, progress=report, cancel=cancel)

        dialog._download_work = via_local_hub
        dialog.source_edit.setText("test-org/tiny-ov")
        assert dialog.add_button.text() == "Download"
        heartbeat = _Heartbeat()
        dialog.add_button.click()
        qtbot.waitUntil(lambda: dialog.progress_bar.maximum() == 1000 and dialog.progress_bar.value() > 0, timeout=30_000)
        fractions.append(dialog.progress_bar.value())
        # trial: the window said "Downloading ..." and "Copying ..." without the share done the command line prints
        assert re.fullmatch(r"(Downloading|Verifying) \S+\.\.\. \d+\.\d% \(\d+\.\d / \d+\.\d MiB\)", dialog.status.text())
        assert dialog.cancel_button.isEnabled()
        dialog.cancel_button.click()
        qtbot.waitUntil(lambda: not dialog.busy(), timeout=30_000)
        heartbeat.stop()
        assert "cancelled" in dialog.status.text()
        assert heartbeat.max_gap < 0.5
        assert _names(dialog) == []
        root = model_store.models_dir()
        assert not root.exists() or not [p for p in root.iterdir() if p.name.startswith(".partial-")]

        # The same download, not cancelled, installs the model.
        hub.throttle_s = 0.0
        with qtbot.waitSignal(dialog.models_changed, timeout=60_000):
            dialog.add_button.click()
        assert _names(dialog) == ["tiny-ov"]
        dialog._download_work = original


def test_catalogue_lists_pairs_with_repository_ids(dialog):
    table = dialog.catalogue_table
    assert table.rowCount() >= 4
    targets = [table.item(row, 1).text() for row in range(table.rowCount())]
    drafts = [table.item(row, 2).text() for row in range(table.rowCount())]
    assert "Qwen/Qwen2.5-1.5B-Instruct" in targets and "Qwen/Qwen2.5-0.5B-Instruct" in drafts
    assert "meta-llama/Llama-3.2-1B-Instruct" in drafts
    assert any("FastDraft" in d for d in drafts)
    assert all(table.item(row, 4).text() for row in range(table.rowCount()))
    table.selectRow(0)
    assert "vocabulary" in dialog.catalogue_note.text()


def test_failure_is_shown_not_raised(qtbot, dialog, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_text("not a gguf")
    dialog.source_edit.setText(str(fake))
    dialog.add_button.click()
    qtbot.waitUntil(lambda: not dialog.busy(), timeout=30_000)
    assert "failed" in dialog.status.text() and "not a GGUF file" in dialog.status.text()
    assert Path(fake).exists() and _names(dialog) == []


def test_the_recommended_pairs_fit_the_dialog_with_nothing_cut(qtbot, dialog):
    """At the dialog's own size every column of the catalogue is in view and whole (a newcomer saw "Sizes (MB)" cut
    to "Sizes", "1000 + 90" to "1000", and the Licence column only by scrolling sideways); the pair's title wraps."""
    from PySide6.QtCore import QRect, Qt

    dialog.tabs.setCurrentIndex(dialog.tabs.indexOf(dialog.catalogue_table.parentWidget()))
    table = dialog.catalogue_table
    qtbot.waitUntil(lambda: table.isVisible() and table.viewport().width() > 0, timeout=5000)
    qtbot.wait(50)  # (the header's sections are laid out)
    assert dialog.size().toTuple() == (1100, 560)
    header = table.horizontalHeader()
    assert header.length() <= table.viewport().width() and table.horizontalScrollBar().maximum() == 0
    metrics = table.fontMetrics()
    padding = 2 * table.style().pixelMetric(table.style().PixelMetric.PM_FocusFrameHMargin) + 2
    for column in range(table.columnCount()):
        width = table.columnWidth(column)
        assert header.sectionViewportPosition(column) + width <= table.viewport().width()
        for row in range(table.rowCount()):
            text = table.item(row, column).text()
            if column == 0:  # wrapped: the row is tall enough for every line
                needed = metrics.boundingRect(QRect(0, 0, width - padding, 10_000), Qt.TextWordWrap, text).height()
                assert table.rowHeight(row) >= needed, (text, table.rowHeight(row), needed)
            else:
                assert metrics.horizontalAdvance(text) + padding <= width, (text, width)
    assert table.item(3, 3).text() == "3700 + 57 MiB" and table.horizontalHeaderItem(3).text() == "Estimated sizes"


def test_recommended_pairs_say_mib_and_download_waits_for_a_pair(qtbot, dialog):
    """Trial: the Recommended pairs tab said "Sizes (MB)" where the app says MiB everywhere else, and "Download this
    pair" was enabled with no pair selected, a click doing nothing to be seen. The sizes are said in MiB and the
    button waits for a pair. Trial: the catalogue's round estimates in MB, converted, read "954 + 86" (MiB), more
    precise than an estimate; the column says they are estimates, to two significant digits (1000 MB is 954 MiB:
    950)."""
    from inference.models.catalogue import pairs

    dialog.tabs.setCurrentIndex(dialog.tabs.indexOf(dialog.catalogue_table.parentWidget()))
    table = dialog.catalogue_table
    assert table.horizontalHeaderItem(3).text() == "Estimated sizes"
    sizes = [table.item(row, 3).text() for row in range(table.rowCount())]
    assert sizes == [
        "950 + 86 MiB",  # SmolLM2: 1000 MB + 90 MB
        "950 + 380 MiB",
        "1900 + 760 MiB",
        "3700 + 57 MiB",
        "4600 + 160 MiB",
    ]
    assert [(pair.target.size_mb, pair.draft.size_mb) for pair in pairs()][0] == (1000, 90)
    assert not table.selectionModel().selectedRows() and not dialog.download_pair_button.isEnabled()
    table.selectRow(1)
    assert dialog.download_pair_button.isEnabled()
    table.clearSelection()
    assert not dialog.download_pair_button.isEnabled()


def test_each_tab_shows_its_own_status_message(qtbot, dialog, monkeypatch):
    """Newcomer trial: "Checking the pair: done" stayed shown on the "Add a model" and "Recommended pairs" tabs,
    "Select a pair first." on "Add a model". A message belongs to the tab it was said on: the status line shows each
    tab's own when that tab is chosen."""
    from types import SimpleNamespace

    from inference.models import inspect

    monkeypatch.setattr(inspect, "check_pair", lambda target, draft: SimpleNamespace(vocab_size=49152))
    dialog.target_combo.addItem("target", "/models/target")
    dialog.draft_combo.addItem("draft", "/models/draft")
    dialog.draft_combo.setCurrentIndex(0)  # (with its placeholder, "none fits", a list does not take its first entry)
    assert dialog.tabs.currentIndex() == 0  # Installed
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: dialog.job is None, timeout=10_000)
    assert dialog.status.text() == "Checking the pair: done"
    dialog.tabs.setCurrentIndex(1)  # Add a model
    assert dialog.status.text() == ""
    dialog.tabs.setCurrentIndex(2)  # Recommended pairs
    assert dialog.status.text() == ""
    dialog.download_pair()  # no pair selected (its button waits for one)
    assert dialog.status.text() == "Select a pair first."
    dialog.tabs.setCurrentIndex(1)
    assert dialog.status.text() == ""
    dialog.tabs.setCurrentIndex(0)
    assert dialog.status.text() == "Checking the pair: done"
    dialog.tabs.setCurrentIndex(2)
    assert dialog.status.text() == "Select a pair first."


def test_refusals_say_the_dialogs_own_fields_not_command_line_options(qtbot, dialog, tiny_sources):
    """Newcomer trial: adding a model under a taken name said "choose another name (--name) or replace it (--replace),
    or remove it first with `specchat models remove`", and a refused pair "see `specchat models catalogue`", words of
    the command line in a window that has a Name field, an "If installed" box and a Recommended pairs tab. The window
    says the store's same reason, then what to do in its own words."""
    for source, name in ((tiny_sources["same"], "tiny-same"), (tiny_sources["other"], "tiny-other")):
        dialog.source_edit.setText(str(source))
        dialog.name_edit.setText(name)
        with qtbot.waitSignal(dialog.models_changed, timeout=60_000):
            dialog.add_button.click()
    dialog.source_edit.setText(str(tiny_sources["other"]))
    dialog.name_edit.setText("tiny-same")
    dialog.add_button.click()
    qtbot.waitUntil(lambda: not dialog.busy(), timeout=30_000)
    taken = (
        f"Adding {tiny_sources['other']} failed: a model named 'tiny-same' is already installed "
        f"({model_store.models_dir() / 'tiny-same'}); type another name in the Name field, or choose \"Replace a model "
        "of the same name\" under If installed, or remove that model first on the Installed tab"
    )
    assert dialog.status.text() == taken
    assert dialog.log.toPlainText().splitlines()[-1] == taken

    root = model_store.models_dir()
    dialog.tabs.setCurrentIndex(0)
    dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(str(root / "tiny-same")))
    dialog.draft_combo.setCurrentIndex(dialog.draft_combo.findData(str(root / "tiny-other")))
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: dialog.pair_result.text().startswith(("✔", "✘")), timeout=30_000)
    assert dialog.pair_result.text() == (
        "✘ Refused: tiny-other cannot draft for tiny-same: their tokenizers differ (the token ids of a probe text "
        "differ). Choose a draft from the same model family (see the Recommended pairs tab), or use prompt lookup."
    )
    for text in (dialog.status.text(), dialog.pair_result.text(), dialog.log.toPlainText()):
        assert "--" not in text and "`" not in text


def test_a_disk_space_refusal_says_the_installed_tabs_remove_button(qtbot, dialog, tiny_sources, monkeypatch):
    """The store's disk-space refusal said "Free some space (e.g. `specchat models remove NAME`)" in the window too,
    whose Installed tab has a Remove button for that; the command line's words stay as they were."""
    from inference.models.disk_space import require_space

    monkeypatch.setenv("SPECCHAT_DISK_QUOTA_BYTES", str(1_000_000))
    dialog.source_edit.setText(str(tiny_sources["same"]))
    dialog.name_edit.setText("tiny-same")
    dialog.add_button.click()
    qtbot.waitUntil(lambda: not dialog.busy(), timeout=30_000)
    status = dialog.status.text()
    assert re.fullmatch(
        rf"Adding {re.escape(str(tiny_sources['same']))} failed: not enough disk space for importing tiny-same: it needs "
        rf"about \d+ MiB, and only \d+ MiB is free under {re.escape(str(model_store.models_dir()))}\. Free some space "
        r"\(e\.g\. remove a model with the Installed tab's Remove button\) or set SPECCHAT_DATA_DIR to a folder on a "
        r"larger disk, then try again\.",
        status,
    ), status
    assert dialog.log.toPlainText().splitlines()[-1] == status and _names(dialog) == []
    with pytest.raises(ModelImportError) as caught:
        require_space(model_store.models_dir(), 2**30, "importing x")
    assert str(caught.value).endswith(
        ". Free some space (e.g. `specchat models remove NAME`) or set SPECCHAT_DATA_DIR to a folder on a larger disk, "
        "then try again."
    )


def test_removing_a_model_already_gone_says_the_installed_tab(qtbot, dialog, tiny_sources):
    """A model removed behind the dialog's back (by the command line) and then removed on the Installed tab said
    "(see `specchat models list`)"; the window says its Installed tab, the command line its command."""
    import shutil

    from inference.models.importing import import_ir_folder

    folder = import_ir_folder(tiny_sources["same"], "gone")
    dialog.refresh()
    shutil.rmtree(folder)
    dialog.table.selectRow(_names(dialog).index("gone"))
    dialog.remove_button.click()
    qtbot.waitUntil(lambda: dialog.findChild(QMessageBox, "confirm-remove") is not None, timeout=5_000)
    _button(dialog.findChild(QMessageBox, "confirm-remove"), "&Remove").click()
    qtbot.waitUntil(lambda: "failed" in dialog.status.text(), timeout=30_000)
    reason = f"model folder {folder} does not exist; give a model folder or an installed model's name"
    assert dialog.status.text().endswith(f": {reason} (see the Installed tab)"), dialog.status.text()
    with pytest.raises(ModelImportError) as caught:
        model_store.find_model(folder)
    assert str(caught.value) == f"{reason} (see `specchat models list`)"


def test_the_stores_other_refusals_say_the_windows_words(tmp_path, monkeypatch):
    """The hub's full disk, an incomplete IR folder and the conversion extra missing from a bundle said command-line
    words (`specchat models remove NAME`, `optimum-cli`, `specchat models convert`) in the window; the command line's
    messages are unchanged."""
    import errno
    import sys

    from app.gui.store_words import window_words
    from inference.models import convert, hub
    from inference.models.inspect import folder_layout

    full = hub._disk_full(tmp_path / "stage", "installing org/x", OSError(errno.ENOSPC, "No space left on device"))
    assert str(full) == (
        "the disk is full (installing org/x: [Errno 28] No space left on device); nothing was added to the model store. "
        f"Free some space under {tmp_path} (e.g. `specchat models remove NAME`) or set SPECCHAT_DATA_DIR to a folder on "
        "a larger disk, then run the same download again (what was downloaded and verified is kept)."
    )
    assert window_words(full) == (
        "the disk is full (installing org/x: [Errno 28] No space left on device); nothing was added to the model store. "
        f"Free some space under {tmp_path} (e.g. remove a model with the Installed tab's Remove button) or set "
        "SPECCHAT_DATA_DIR to a folder on a larger disk, then add it again (what was downloaded and verified is kept)."
    )
    with pytest.raises(ModelImportError) as caught:
        folder_layout(tmp_path)
    reason = f"{tmp_path} is not a complete OpenVINO IR folder: missing openvino_model.xml, openvino_model.bin. "
    assert str(caught.value) == reason + (
        "Export the model again (e.g. `optimum-cli export openvino`), or use `specchat models convert` on the original "
        "checkpoint."
    )
    assert window_words(caught.value) == reason + (
        "Export the model again (e.g. with optimum-intel), or enter the original checkpoint's folder as the Source to "
        "convert it."
    )
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(convert, "missing_extra_modules", lambda: ["torch"])
    with pytest.raises(convert.ConversionExtraMissing) as caught:
        convert.require_conversion_extra()
    assert "(`pip install 'specchat[convert]'`, then `specchat models convert ...`) and import" in str(caught.value)
    words = window_words(caught.value)
    assert "(pip install 'specchat[convert]', then convert it in that SpecChat's Models window) and add" in words
    assert "`" not in words and "specchat models" not in words


def _drafts(dialog: ModelsDialog) -> list[str]:
    return [Path(dialog.draft_combo.itemData(i)).name for i in range(dialog.draft_combo.count())]


def test_the_draft_preselected_fits_the_target_and_the_target_is_not_its_own_draft(qtbot, dialog, default_store, tiny_sources):
    """Newcomer trial: with an imported model as the Target, the pair check preselected as its Draft the shipped
    draft head, which drafts for the default model only and is always refused for it, and the Draft list offered the
    target itself. The Draft list is every other model (a pair may be checked whatever it is); the draft preselected
    is one that fits the target (the same vocabulary, a head only for its own model), none where none does."""
    from inference.models.importing import import_ir_folder

    import_ir_folder(tiny_sources["other"], "tiny-other")  # another vocabulary: fits none of the others
    dialog.refresh()
    target, head, tiny = (default_store[key].name for key in ("target", "head", "tiny"))
    assert Path(dialog.target_combo.currentData()).name == target
    assert _drafts(dialog) == [head, "tiny-other", tiny]
    assert Path(dialog.draft_combo.currentData()).name == tiny  # (smaller than the head: the window's choice too)

    dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(str(default_store["tiny"])))  # an imported model
    assert _drafts(dialog) == [head, target, "tiny-other"]
    assert Path(dialog.draft_combo.currentData()).name == target  # the same vocabulary; not the head made for it
    assert _check_pair(qtbot, dialog, default_store["tiny"], default_store["target"]).startswith("✔ ")

    dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(str(model_store.models_dir() / "tiny-other")))
    assert _drafts(dialog) == [head, target, tiny]
    assert dialog.draft_combo.currentIndex() == -1 and dialog.draft_combo.placeholderText() == "(none fits: choose one to check)"
    dialog.pair_button.click()
    assert dialog.pair_result.text() == "Choose a draft to check." and dialog.job is None

    dialog.draft_combo.setCurrentIndex(dialog.draft_combo.findData(str(default_store["tiny"])))  # the user's choice stays
    dialog.draft_combo.activated.emit(dialog.draft_combo.currentIndex())
    dialog.refresh()
    assert Path(dialog.draft_combo.currentData()).name == tiny
