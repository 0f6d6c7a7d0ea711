"""The mouse wheel scrolls a form instead of changing the field under the pointer, unless that field has focus.

Spin boxes, combo boxes and sliders change their value on a wheel notch even without focus, so scrolling a
settings pane would silently edit (and save) whatever field passes under the pointer. :func:`guard_wheel` gives
each such field of a widget tree ``Qt.StrongFocus`` (a click or Tab focuses it, the wheel does not) and an event
filter that passes the wheel event on to the enclosing scroll area while the field has no focus.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

#: The kinds of field whose value the wheel changes (scroll bars excepted: the wheel is theirs).
WHEEL_FIELDS = (QAbstractSpinBox, QComboBox, QAbstractSlider)
_GUARDED = "wheelGuarded"


class _WheelGuard(QObject):
    """Event filter: an unfocused field hands the wheel to the scroll area around it (or, with none, ignores it so
    that Qt offers it to the field's parents)."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget) or watched.hasFocus():
            return False
        area = watched.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is None:
            event.ignore()
            return True
        # Sent on explicitly: Qt propagates only wheel events that come from the window system, not synthetic ones.
        # (The field maps its point *to* the viewport, its ancestor: ``viewport.mapFrom(field)`` would ask the
        # field to be the viewport's ancestor, and Qt printed "mapFrom(): parent must be in parent hierarchy".)
        viewport = area.viewport()
        forwarded = QWheelEvent(
            watched.mapTo(viewport, event.position()), event.globalPosition(), event.pixelDelta(),
            event.angleDelta(), event.buttons(), event.modifiers(), event.phase(), event.inverted(), event.source(),
        )  # fmt: skip
        QApplication.sendEvent(viewport, forwarded)
        event.setAccepted(forwarded.isAccepted())
        return True  # the field itself never sees it


def guard_wheel(root: QWidget) -> int:
    """Guard every spin box, combo box and slider under ``root`` (``root`` itself included); returns how many
    were newly guarded. Calling it again after adding fields guards only the new ones.

    The filter object is a child of ``root`` and lives as long as it.
    """
    guard = root.findChild(_WheelGuard, options=Qt.FindChildOption.FindDirectChildrenOnly)
    if guard is None:
        guard = _WheelGuard(root)
    fields = [
        widget
        for widget in [root, *root.findChildren(QWidget)]
        if isinstance(widget, WHEEL_FIELDS) and not isinstance(widget, QScrollBar)
    ]
    count = 0
    for widget in fields:
        if widget.property(_GUARDED):
            continue
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        widget.installEventFilter(guard)
        widget.setProperty(_GUARDED, True)
        count += 1
    return count
