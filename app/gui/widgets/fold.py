"""A fold: a toggle button with an arrow that shows or hides a form of rarely changed fields below it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QToolButton, QWidget


class Fold:
    """The button and the folded form (``form``: add its rows); folded until :meth:`show` or a click."""

    def __init__(self, object_name: str, text: str, tip: str):
        self.button = QToolButton()
        self.button.setObjectName(object_name)
        self.button.setText(text)
        self.button.setToolTip(tip)
        self.button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.button.setArrowType(Qt.ArrowType.RightArrow)
        self.button.setAutoRaise(True)
        self.button.setCheckable(True)
        self.button.toggled.connect(self.show)
        self.box = QWidget()
        self.box.setVisible(False)
        self.form = QFormLayout(self.box)
        self.form.setContentsMargins(0, 0, 0, 0)
        self.form.setVerticalSpacing(2)
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)

    def add_to(self, form: QFormLayout) -> None:
        """Add the button and, below it, the folded form as two rows of ``form``."""
        form.addRow(self.button)
        form.addRow(self.box)

    def show(self, shown: bool = True) -> None:
        """Unfold (or fold) the form."""
        self.button.setChecked(shown)
        self.button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.box.setVisible(shown)
