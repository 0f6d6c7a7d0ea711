"""A combo box that cuts its current text with "…" when it is narrower than the text, instead of clipping it
mid-letter, and names the whole text in its tooltip."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox, QStylePainter, QToolTip

#: Pixels kept free at each side of the text in the combo's field (the styles draw the label 1-2 px inside it).
_TEXT_MARGIN_PX = 3


class ElidedComboBox(QComboBox):
    """A QComboBox whose closed field shows its current text elided at the right ("Speculative, prompt l…", not
    "Speculative, prompt lookur"); while the text is cut, hovering shows the whole text above the combo's own tip.
    """

    def shown_text(self) -> str:
        """The text the closed combo shows: its current text, elided to the width of its field."""
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideRight, self._text_width())

    def is_elided(self) -> bool:
        """Whether the current text is shown cut."""
        return self.shown_text() != self.currentText()

    def missing_width(self) -> int:
        """Pixels the combo lacks to show its current text whole (0 when it does)."""
        return max(0, self.fontMetrics().horizontalAdvance(self.currentText()) - self._text_width())

    def hover_text(self) -> str:
        """The tooltip shown on hover: the whole current text first while it is cut, then the combo's own tip."""
        tip = self.toolTip()
        if not self.is_elided() or self.currentText() in tip:
            return tip
        return f"{self.currentText()}\n{tip}" if tip else self.currentText()

    def event(self, event: QEvent) -> bool:
        """Show :meth:`hover_text` as the tooltip."""
        if event.type() == QEvent.Type.ToolTip:
            text = self.hover_text()
            if text:
                QToolTip.showText(event.globalPos(), text, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Draw the combo as the style does, with :meth:`shown_text` as its label."""
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    def _text_width(self) -> int:
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        field = self.style().subControlRect(
            QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, self
        )
        if not option.currentIcon.isNull():
            field.setLeft(field.left() + option.iconSize.width() + 4)
        return max(field.width() - 2 * _TEXT_MARGIN_PX, 0)
