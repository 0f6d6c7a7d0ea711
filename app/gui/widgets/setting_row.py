"""One setting in a form: a label in plain words with the field's term beside it ("Context length (n_ctx)"), the
input, a one-line explanation under it, and the place where its error is said, the width of the whole form so that
a message never wraps to a lone word."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QAbstractSpinBox, QComboBox, QFormLayout, QLabel, QLineEdit, QWidget

from ..theme import FIELD_WIDTH


@dataclass
class SettingRow:
    """The widgets of one setting row.

    Attributes:
        field: the input (its object name ``setting_<name>``); error: its error label (hidden while valid);
        help: its one-line explanation (None without one); widgets: the form's rows, to show or hide them together.
    """

    field: QWidget
    error: QLabel
    help: QLabel | None
    widgets: tuple[QWidget, ...]

    def set_visible(self, form: QFormLayout, visible: bool) -> None:
        """Show or hide the setting's input and explanation (its error label shows while it has an error)."""
        for widget in self.widgets:
            if widget is not self.error:
                form.setRowVisible(widget, visible)


def add_setting(
    form: QFormLayout, name: str, label: str, widget: QWidget, tip: str, help_text: str = "", field: QWidget | None = None
) -> SettingRow:
    """Add the rows of setting ``name`` to ``form``: ``label`` and ``widget`` (which holds the input ``field``, by
    default ``widget`` itself), then ``help_text`` and an error label, each across the form.

    The field is named for screen readers (``label``, described by ``tip``), and a number field is no wider than a
    number needs (``theme.FIELD_WIDTH``); a combo box with long choices is elided rather than widening the form
    (the tooltip of each choice has it whole).
    """
    field = field or widget
    field.setObjectName(f"setting_{name}")
    field.setAccessibleName(label.replace("&", ""))
    if isinstance(field, (QAbstractSpinBox, QLineEdit)) and field.maximumWidth() > FIELD_WIDTH:
        field.setMaximumWidth(FIELD_WIDTH)
    if isinstance(field, QComboBox) and field.sizeAdjustPolicy() == QComboBox.SizeAdjustPolicy.AdjustToContentsOnFirstShow:
        field.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        field.setMinimumContentsLength(8)
    if tip:
        widget.setToolTip(tip)
        field.setToolTip(tip)
        field.setAccessibleDescription(tip)
    form.addRow(label, widget)
    widgets = [widget]
    help_label = None
    if help_text:
        help_label = QLabel(help_text)
        help_label.setObjectName("settingHelp")
        help_label.setWordWrap(True)
        form.addRow(help_label)
        widgets.append(help_label)
    error = QLabel()
    error.setObjectName("fieldError")
    error.setWordWrap(True)
    error.setVisible(False)
    form.addRow(error)
    widgets.append(error)
    return SettingRow(field, error, help_label, tuple(widgets))
