"""Dialogs that never block the event loop: they are opened (window-modal) and awaited.

A nested ``exec()`` would run a second event loop inside an asyncio callback, so every dialog here is shown with
``open()`` and its answer awaited through an asyncio future.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressBar, QProgressDialog, QPushButton, QWidget

from inference.models.progress import ProgressEvent


async def message_box(
    parent: QWidget,
    icon: QMessageBox.Icon,
    title: str,
    text: str,
    buttons: QMessageBox.StandardButton = QMessageBox.StandardButton.Ok,
    default: QMessageBox.StandardButton = QMessageBox.StandardButton.NoButton,
    informative: str = "",
    object_name: str = "",
    labels: dict[QMessageBox.StandardButton, str] | None = None,
) -> QMessageBox.StandardButton:
    """Show a message box and return the button the user chose (Escape gives the escape button).

    ``labels``: words in place of Qt's on some of ``buttons``, e.g. ``{Yes: "&Delete"}``: a confirmation's button
    named after its action, as desktop guidelines ask; the answer is still the standard button.
    """
    box = QMessageBox(icon, title, text, buttons, parent)
    for button, label in (labels or {}).items():
        box.button(button).setText(label)
    box.setObjectName(object_name or "messageBox")
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if informative:
        box.setInformativeText(informative)
    if default != QMessageBox.StandardButton.NoButton:
        box.setDefaultButton(default)
    box.setWindowModality(Qt.WindowModality.WindowModal)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    future: asyncio.Future = asyncio.get_running_loop().create_future()

    def done(_result: int) -> None:
        clicked = box.clickedButton()
        answer = box.standardButton(clicked) if clicked is not None else QMessageBox.StandardButton.NoButton
        if not future.done():
            future.set_result(answer)

    box.finished.connect(done)
    box.open()
    return await future


async def choose_file(
    parent: QWidget,
    title: str,
    save: bool = False,
    name_filter: str = "",
    directory: bool = False,
    suggested: str = "",
    start_dir: str = "",
) -> str | None:
    """Ask for a file (or folder) path; None if cancelled. Qt's own dialog, so it looks the same everywhere.

    ``start_dir``: the folder it opens in, when it exists (else Qt's default, the working folder).
    """
    dialog = QFileDialog(parent, title)
    dialog.setObjectName("fileDialog")
    dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
    dialog.setWindowModality(Qt.WindowModality.WindowModal)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    if directory:
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
    elif save:
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setFileMode(QFileDialog.FileMode.AnyFile)
    else:
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
    if name_filter:
        dialog.setNameFilter(name_filter)
    if suggested:
        dialog.selectFile(suggested)
    if start_dir and Path(start_dir).is_dir():
        dialog.setDirectory(start_dir)
    future: asyncio.Future = asyncio.get_running_loop().create_future()

    def done(result: int) -> None:
        files = dialog.selectedFiles()
        if not future.done():
            future.set_result(files[0] if result == QFileDialog.DialogCode.Accepted and files else None)

    dialog.finished.connect(done)
    dialog.open()
    return await future


class ModelProgressDialog(QProgressDialog):
    """Progress of fetching and converting the default model (first start, or a new bit-width), with Cancel.

    Steps show as a busy bar with their line; the download as a determinate bar with its percentage and bytes.
    Cancel (the button, Escape or closing the dialog) emits ``canceled``; Enter does not (the focus is on Cancel while
    the window's message box looks ready for typing).
    """

    def __init__(self, parent: QWidget, title: str):
        super().__init__(parent)
        self.setObjectName("modelProgress")
        self.setWindowTitle(title)
        self.setLabelText("Preparing the model…")
        self.bar = QProgressBar(self)
        self.setBar(self.bar)  # updated directly: QProgressDialog.setValue runs a nested event loop when modal
        self.bar.setRange(0, 0)  # indeterminate
        cancel = QPushButton("Cancel", self)
        cancel.setAutoDefault(False)  # Enter, the send key, must not cancel: a newcomer typing a message did
        self.setCancelButton(cancel)
        self.setMinimumDuration(0)
        self.setMinimumWidth(520)
        self.setAutoClose(False)
        self.setAutoReset(False)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.lines: list[str] = []

    def show_event(self, event: ProgressEvent) -> None:
        """Show a step of the model store (its line, a busy bar) or a download's bytes (percentage and MiB, the unit the
        model picker writes sizes in: bytes / 2**20 is not "MB", and 93 MB of a wheel read "88.6 MB")."""
        if not self.lines or self.lines[-1] != event.message:
            self.lines.append(event.message)
        if event.fraction is None:
            self.bar.setRange(0, 0)
            self.setLabelText(event.message)
            return
        self.bar.setRange(0, 1000)
        self.bar.setValue(round(event.fraction * 1000))
        self.setLabelText(f"{event.message}\n{event.done / 2**20:.1f} MiB of {event.total / 2**20:.1f} MiB")
