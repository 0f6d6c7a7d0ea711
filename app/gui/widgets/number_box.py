"""A whole-number field that says when it refused a keystroke for holding too many digits.

A ``QSpinBox`` ignores a digit that would take its value past its maximum, without a word: a newcomer typed
99999999999 into Context length and read "you typed 999999999" (the last two digits dropped). :class:`NumberBox`
keeps what it refused (:attr:`NumberBox.refused`) until its value next changes, so that the field's error can say
it ("the field holds 999999999: it refused 9999999999, too many digits").
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QSpinBox


class NumberBox(QSpinBox):
    """A ``QSpinBox`` that records the text of a keystroke it refused for a number past its range.

    Signals:
        refused_changed(): :attr:`refused` changed (a refusal, or the value changed after one).

    Attributes:
        refused: the number (digits, maybe a leading "-") the last refused keystroke would have made, "" when the value
            changed since (or none was refused).
    """

    refused_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.refused = ""
        self.valueChanged.connect(self._forget)

    def validate(self, text: str, pos: int) -> object:
        """As ``QSpinBox.validate``; a text of digits it finds invalid (too large or too small) is recorded."""
        result = super().validate(text, pos)
        state = result[0] if isinstance(result, tuple) else result
        number = text.removeprefix(self.prefix()).removesuffix(self.suffix()).strip().replace(self.locale().groupSeparator(), "")
        if state == QValidator.State.Invalid and number.lstrip("-").isdigit() and number != self.refused:
            self.refused = number
            self.refused_changed.emit()
        return result

    def _forget(self, _value: int) -> None:
        if self.refused:
            self.refused = ""
            self.refused_changed.emit()
