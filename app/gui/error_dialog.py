"""Unexpected errors in the window: written to the log with their traceback and shown in a dialog, never lost.

Under PySide6 an exception raised in a slot or a Qt virtual method goes to ``sys.excepthook``, and one raised in
a Python thread to ``threading.excepthook``; by default both print to stderr, which a windowed build does not
have. :class:`ErrorReporter` replaces both hooks: it logs the traceback (``app.logging_setup`` sends it to the log
file) and shows an :class:`ErrorDialog` with the error, where the log is, and a "Copy details" button for a bug
report. The dialog is shown from the event loop (a queued signal), never inside the failing slot, and only one
at a time: errors raised while it is open are logged only. Ctrl+C (KeyboardInterrupt) keeps Python's behaviour.
"""

from __future__ import annotations

import html
import logging
import sys
import threading
import traceback
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

logger = logging.getLogger(__name__)


class ErrorDialog(QDialog):
    """The error, where its log is, the traceback (read-only) and the buttons "Copy details" and "Close".

    Args:
        summary: one line, e.g. ``"ZeroDivisionError: division by zero"``.
        details: the full traceback (what "Copy details" puts on the clipboard).
        log_file: the log file holding it, or None when there is none.
        parent: the window it belongs to.
    """

    def __init__(self, summary: str, details: str, log_file: Path | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("errorDialog")
        self.setWindowTitle("SpecChat: unexpected error")
        self.details = details
        where = f"It was written to the log, {log_file}." if log_file else "There is no log file to find it in later."
        message = QLabel(
            f"<b>SpecChat hit an unexpected error</b> and may not work as it should:<br>{html.escape(summary)}<br><br>"
            f"{html.escape(where)} If it happens again, please report it with the details below."
        )
        message.setObjectName("errorSummary")
        message.setWordWrap(True)
        message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        text = QPlainTextEdit(details)
        text.setObjectName("errorDetails")
        text.setReadOnly(True)
        text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.copy_button = buttons.addButton("Copy details", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.setObjectName("copyDetails")
        self.copy_button.clicked.connect(self.copy_details)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(message)
        layout.addWidget(text, 1)
        layout.addWidget(buttons)
        self.resize(640, 400)

    def copy_details(self) -> None:
        """Put the summary line and the traceback on the clipboard."""
        QGuiApplication.clipboard().setText(self.details)


class ErrorReporter(QObject):
    """Logs every uncaught exception of the process and shows it in an :class:`ErrorDialog` (see the module).

    Create it on the GUI thread, then :meth:`install` it; :meth:`uninstall` puts the previous hooks back.

    Args:
        log_file: the log file the dialog names (``app.logging_setup.setup_logging``'s result).
    """

    #: (summary, details): emitted on the thread that failed, handled on the GUI thread.
    reported = Signal(str, str)

    def __init__(self, log_file: Path | None, parent: QObject | None = None):
        super().__init__(parent)
        self.log_file = log_file
        self.dialog: ErrorDialog | None = None
        self._previous = (sys.excepthook, threading.excepthook)
        self.reported.connect(self._show, Qt.ConnectionType.QueuedConnection)

    def install(self) -> None:
        """Make this reporter ``sys.excepthook`` and ``threading.excepthook``."""
        self._previous = (sys.excepthook, threading.excepthook)
        sys.excepthook = self.excepthook
        threading.excepthook = self.thread_excepthook

    def uninstall(self) -> None:
        """Put back the hooks that were there before :meth:`install`."""
        sys.excepthook, threading.excepthook = self._previous

    def excepthook(self, kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        """``sys.excepthook``: log the exception and show it (KeyboardInterrupt goes to the previous hook)."""
        if issubclass(kind, KeyboardInterrupt):
            self._previous[0](kind, error, trace)
            return
        self._report("unexpected error", kind, error, trace)

    def thread_excepthook(self, args: threading.ExceptHookArgs) -> None:
        """``threading.excepthook``: as :meth:`excepthook`, naming the thread."""
        name = args.thread.name if args.thread is not None else "a thread"
        self._report(f"unexpected error in {name}", args.exc_type, args.exc_value, args.exc_traceback)

    def _report(self, what: str, kind: type[BaseException], error: BaseException | None, trace) -> None:
        logger.error("%s", what, exc_info=(kind, error, trace))
        summary = traceback.format_exception_only(kind, error)[-1].strip()
        details = "".join(traceback.format_exception(kind, error, trace))
        self.reported.emit(summary, details)

    def _show(self, summary: str, details: str) -> None:
        if self.dialog is not None or QApplication.instance() is None:
            return  # one dialog at a time; this error is in the log
        self.dialog = ErrorDialog(summary, details, self.log_file, QApplication.activeWindow())
        self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.dialog.finished.connect(self._closed)
        self.dialog.open()

    def _closed(self, _result: int) -> None:
        self.dialog = None
