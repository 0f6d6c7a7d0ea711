"""One setting in a form: a label in plain words with the field's term beside it ("Context length (n_ctx)"), the
input, and under it one slot the width of the whole form (so that a message never wraps to a lone word) holding its
one-line explanation or, while the value is invalid, its error in the explanation's place.

An error that fits the slot moves nothing: a newcomer typed an invalid n_keep, the error line pushed every field below
it down ~15 px, and a click aimed at the next field landed on another. An error takes the lines the explanation takes
(one line where a setting has none: that line is kept free), as Material's text fields put their error in place of
their helper text. A longer message is wrapped onto the lines it needs, whole, and only then moves the fields below by
its extra lines (a later trial: cut with "…" at 1366x768, "Context length must be between 16 and 8192; you typ…",
the error could not be read)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtGui import QTextLayout, QTextOption
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QWidget,
)

from ..theme import FIELD_WIDTH


@dataclass
class SettingRow:
    """The widgets of one setting row.

    Attributes:
        field: the input (its object name ``setting_<name>``); error: its error label (hidden while valid, shown in
        the explanation's place); help: its one-line explanation (None without one); widgets: the form's rows, to
        show or hide them together.
    """

    field: QWidget
    error: FieldError
    help: QLabel | None
    widgets: tuple[QWidget, ...]

    def set_visible(self, form: QFormLayout, visible: bool) -> None:
        """Show or hide the setting's rows: its input, and its explanation or error."""
        for widget in self.widgets:
            form.setRowVisible(widget, visible)


class FieldError(QLabel):
    """A message wrapped at word boundaries (a word wider than the label anywhere) to the label's width, as tall as
    its slot holds (``lines``): with ``grows`` (a setting's error, the notice above the message box) taller when the
    message needs more lines, else its last line shown ends with "…" then; :meth:`text` and the tooltip hold the
    whole message.
    """

    def __init__(self, replaces: QLabel | None = None) -> None:
        """``replaces``: the explanation the error is shown in place of (hidden while the error shows)."""
        super().__init__()
        self._replaces = replaces
        self.setObjectName("fieldError")
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)  # never widens the form
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.lines = 1  # the slot's room: the lines it takes at least, and at most unless it grows
        self.grows = False  # True: as many lines as the message needs past ``lines``, never cut
        self._whole = ""

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        """Say ``text`` ("" while the field is valid)."""
        self._whole = text
        self.setToolTip(text)
        self._fit()

    def text(self) -> str:
        """The whole message, even when it is shown cut."""
        return self._whole

    def shown_text(self) -> str:
        """The message as shown: its lines (the last one ending with "…" when it needs more and cannot grow)."""
        return super().text()

    def setVisible(self, visible: bool) -> None:  # noqa: N802 - Qt override
        """Show or hide the error, and the explanation it replaces the other way round."""
        super().setVisible(visible)
        if self._replaces is not None:
            self._replaces.setVisible(not visible)

    def set_lines(self, lines: int) -> None:
        """Hold at most ``lines`` lines (at least one): the height of the slot under the field."""
        self.lines = max(1, lines)
        self._fit()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Wrap again for the new width."""
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        self.ensurePolished()  # (the style sheet sets the font)
        metrics = self.fontMetrics()
        width = max(self.width(), 1)
        layout = QTextLayout(self._whole, self.font())
        option = QTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)  # (a 30-digit seed typed)
        layout.setTextOption(option)
        layout.beginLayout()
        starts = []
        while self.grows or len(starts) <= self.lines:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLineWidth(width)
            starts.append(line.textStart())
        layout.endLayout()
        lines = max(self.lines, len(starts)) if self.grows else self.lines
        self.setFixedHeight(lines * metrics.lineSpacing())
        shown = [self._whole[a:b].rstrip() for a, b in zip(starts, starts[1:] + [len(self._whole)])][:lines]
        if len(starts) > lines:  # more lines than the slot holds: the last one shown is cut with "…"
            rest = self._whole[starts[lines - 1]:]
            shown[-1] = metrics.elidedText(rest, Qt.TextElideMode.ElideRight, width)
        super().setText("\n".join(shown))


def add_setting(
    form: QFormLayout, name: str, label: str, widget: QWidget, tip: str, help_text: str = "", field: QWidget | None = None
) -> SettingRow:
    """Add the rows of setting ``name`` to ``form``: ``label`` and ``widget`` (which holds the input ``field``, by
    default ``widget`` itself), then ``help_text`` and an error label, each across the form.

    The field is named for screen readers (``label``, described by ``tip``), and a number field is no wider than a
    number needs (``theme.FIELD_WIDTH``); a combo box with long choices is elided rather than widening the form
    (the tooltip of each choice has it whole). The explanation and the error share one slot (see the module doc).
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
    slot = _NoteSlot(help_text)
    form.addRow(slot)
    return SettingRow(field, slot.error, slot.help, (widget, slot))


class _NoteSlot(QWidget):
    """The slot under a field: its explanation (if any) and its error in one grid cell, the explanation hidden while
    the error shows; both keep their room while hidden, so the slot is as tall as the explanation (one line without
    one) whatever is shown, and taller only while an error needs more lines."""

    def __init__(self, help_text: str) -> None:
        super().__init__()
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        self.help: QLabel | None = None
        if help_text:
            self.help = QLabel(help_text)
            self.help.setObjectName("settingHelp")
            self.help.setWordWrap(True)
            _keep_room_when_hidden(self.help)
            grid.addWidget(self.help, 0, 0)
        self.error = FieldError(self.help)
        self.error.grows = True  # a message longer than the slot is wrapped whole (see the module doc)
        self.error.setVisible(False)
        _keep_room_when_hidden(self.error)
        grid.addWidget(self.error, 0, 0)

    def event(self, event: QEvent) -> bool:
        """Once its grid has taken a new height of the error, tell the form that the slot's height changed, after the
        events pending: an error that wrapped onto one line more at a new width (a newcomer's drafter refusal, once the
        scroll bar its own lines brought narrowed the side panel) grew, but the form, laying the pane out for that
        width, kept the slot as tall as before, its last line cut ("or use prompt", "lookup" missing)."""
        handled = super().event(event)
        if event.type() == QEvent.Type.LayoutRequest and self.height() != self.heightForWidth(self.width()):
            QTimer.singleShot(0, self, self.updateGeometry)  # (told at once, the form kept the old height)
        return handled

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """The error holds as many lines as the explanation takes at the new width."""
        super().resizeEvent(event)
        if self.help is not None:
            spacing = self.help.fontMetrics().lineSpacing()
            self.error.set_lines(self.help.heightForWidth(event.size().width()) // spacing)


def _keep_room_when_hidden(widget: QWidget) -> None:
    policy = widget.sizePolicy()
    policy.setRetainSizeWhenHidden(True)
    widget.setSizePolicy(policy)
