"""Unexpected errors in the window: logged with their traceback and shown in a dialog with "Copy details"."""

from __future__ import annotations

import faulthandler
import logging
import sys
import threading
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QPushButton

from app.gui.error_dialog import ErrorReporter
from app.logging_setup import LOG_DIR_ENV, setup_logging


@pytest.fixture
def reporter(monkeypatch, tmp_path: Path, qapp):
    """An installed ErrorReporter logging through ``setup_logging("window")`` into tmp_path/logs; undone after."""
    monkeypatch.setenv(LOG_DIR_ENV, str(tmp_path / "logs"))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    log_file = setup_logging("window")
    reporter = ErrorReporter(log_file)
    reporter.install()
    yield reporter
    reporter.uninstall()
    if reporter.dialog is not None:
        reporter.dialog.close()
    for handler in [h for h in root.handlers if h not in handlers]:
        if getattr(handler, "crashes", False):
            faulthandler.disable()  # it was off before (pytest -p no:faulthandler) and writes to this file
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)


def _failing_slot() -> None:
    values: dict[str, int] = {}
    values["missing"] += 1


@pytest.mark.qt_no_exception_capture
def test_exception_in_a_slot_is_logged_and_shown_with_copy_details(reporter, qtbot, tmp_path: Path) -> None:
    button = QPushButton("fail")
    qtbot.addWidget(button)
    button.clicked.connect(_failing_slot)
    button.click()
    qtbot.waitUntil(lambda: reporter.dialog is not None and reporter.dialog.isVisible(), timeout=5000)
    dialog = reporter.dialog
    summary = dialog.findChild(QLabel, "errorSummary").text()
    assert "KeyError: &#x27;missing&#x27;" in summary and str(tmp_path / "logs" / "window.log") in summary
    details = dialog.findChild(QPlainTextEdit, "errorDetails").toPlainText()
    assert "Traceback (most recent call last)" in details and "_failing_slot" in details
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == details
    log = (tmp_path / "logs" / "window.log").read_text(encoding="utf-8")
    assert "ERROR app.gui.error_dialog: unexpected error" in log
    assert 'values["missing"] += 1' in log and "KeyError: 'missing'" in log


@pytest.mark.qt_no_exception_capture
def test_errors_while_the_dialog_is_open_are_logged_without_a_second_dialog(reporter, qtbot, tmp_path: Path) -> None:
    button = QPushButton("fail")
    qtbot.addWidget(button)
    button.clicked.connect(_failing_slot)
    button.click()
    qtbot.waitUntil(lambda: reporter.dialog is not None, timeout=5000)
    first = reporter.dialog
    button.click()
    qtbot.wait(100)
    assert reporter.dialog is first
    assert (tmp_path / "logs" / "window.log").read_text(encoding="utf-8").count("\nKeyError: 'missing'") == 2
    first.reject()
    qtbot.waitUntil(lambda: reporter.dialog is None, timeout=5000)


def test_exception_in_a_thread_is_logged_and_shown(reporter, qtbot, tmp_path: Path) -> None:
    thread = threading.Thread(target=_failing_slot, name="helper-thread")
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: reporter.dialog is not None and reporter.dialog.isVisible(), timeout=5000)
    assert "_failing_slot" in reporter.dialog.details
    assert "unexpected error in helper-thread" in (tmp_path / "logs" / "window.log").read_text(encoding="utf-8")


def test_ctrl_c_keeps_pythons_behaviour(reporter, qtbot, monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(reporter, "_previous", (lambda *exc: seen.append(exc[0]), threading.excepthook))
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)
    qtbot.wait(50)
    assert seen == [KeyboardInterrupt] and reporter.dialog is None
