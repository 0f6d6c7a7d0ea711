"""A fold: a toggle button with an arrow that shows or hides a form of rarely changed fields below it."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtWidgets import QFormLayout, QScrollArea, QToolButton, QWidget


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
        self.button.clicked.connect(lambda checked: checked and QTimer.singleShot(0, self.button, self.scroll_into_view))
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

    def scroll_into_view(self) -> None:
        """Scroll the scroll area around the fold (the settings pane) so that the unfolded form is in view, as much
        of it as fits below its button, which stays in view (a click on a fold at the bottom of a 1366x768 window
        showed one row of the form and hid the rest below the pane's edge, newcomer trial)."""
        area = self.button.parentWidget()
        while area is not None and not isinstance(area, QScrollArea):
            area = area.parentWidget()
        if area is None or area.widget() is None or not self.box.isVisible():
            return
        bar = area.verticalScrollBar()
        top = self.button.mapTo(area.widget(), QPoint(0, 0)).y()
        bottom = self.box.mapTo(area.widget(), QPoint(0, self.box.height())).y()
        height = area.viewport().height()
        if bottom > bar.value() + height:  # (a form already in view is left where it is)
            bar.setValue(min(top, bottom - height))
