"""The mouse wheel over a settings field scrolls the pane; it changes the field's value only once it has focus."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QSlider, QVBoxLayout

from app.gui.settings_store import AppSettings
from app.gui.widgets.settings_pane import SettingsPane
from app.gui.widgets.wheel_guard import guard_wheel


def _wheel(widget, notches: int = -3) -> None:
    """Three notches down over the middle of ``widget``, as a mouse sends them."""
    centre = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(centre, widget.mapToGlobal(centre), QPoint(0, 0), QPoint(0, 120 * notches),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)  # fmt: skip
    QApplication.sendEvent(widget, event)


def _pane(qtbot) -> SettingsPane:
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    pane.resize(380, 300)  # shorter than its content: it scrolls
    pane.show()
    qtbot.waitExposed(pane)
    return pane


def test_wheel_over_an_unfocused_field_scrolls_the_pane_and_changes_nothing(qtbot):
    pane = _pane(qtbot)
    bar = pane.verticalScrollBar()
    assert bar.maximum() > 0
    before = pane.current()
    for field in (pane.n_ctx, pane.decoding, pane.temperature):
        field.clearFocus()
        bar.setValue(0)
        _wheel(field)  # down
        assert pane.current() == before, field.objectName()
        assert bar.value() > 0, f"the pane did not scroll over {field.objectName()}"
    assert pane.n_ctx.focusPolicy() == Qt.FocusPolicy.StrongFocus


def test_wheel_over_the_focused_field_changes_it(qtbot):
    pane = _pane(qtbot)
    pane.ensureWidgetVisible(pane.n_ctx)
    pane.n_ctx.setFocus()
    qtbot.waitUntil(pane.n_ctx.hasFocus)
    value = pane.n_ctx.value()
    _wheel(pane.n_ctx, notches=1)
    assert pane.n_ctx.value() == value + pane.n_ctx.singleStep()


def test_fields_added_later_are_guarded_when_the_pane_is_shown(qtbot):
    pane = _pane(qtbot)
    pane.hide()
    slider = QSlider(Qt.Orientation.Horizontal)
    slider.setRange(0, 100)
    slider.setValue(50)
    pane.widget().layout().insertWidget(0, slider)
    pane.show()
    slider.clearFocus()
    _wheel(slider)
    assert slider.value() == 50
    assert guard_wheel(pane) == 0  # already guarded: nothing twice


def test_guard_wheel_outside_a_scroll_area(qtbot):
    from PySide6.QtWidgets import QSpinBox, QWidget

    box = QWidget()
    qtbot.addWidget(box)
    spin = QSpinBox()
    QVBoxLayout(box).addWidget(spin)
    assert guard_wheel(box) == 1
    box.show()
    _wheel(spin, notches=1)
    assert spin.value() == 0


def test_the_wheel_passed_on_lands_where_the_pointer_is_and_qt_warns_of_nothing(qtbot, make_window):
    """The trial's terminal showed "QWidget::mapFrom(): parent must be in parent hierarchy" (twice, seen at quit):
    each wheel notch over an unfocused field mapped its point from the field into the viewport the wrong way round."""
    from PySide6.QtCore import QEvent, QObject, qInstallMessageHandler

    messages = []
    previous = qInstallMessageHandler(lambda _mode, _context, text: messages.append(text))
    try:
        window = make_window(start=False)
        pane = window.settings_pane
        viewport = pane.viewport()
        received = []

        class Spy(QObject):
            def eventFilter(self, watched, event):  # noqa: N802 - Qt's name
                if event.type() == QEvent.Type.Wheel:
                    received.append(event.position())
                return False

        spy = Spy(viewport)
        viewport.installEventFilter(spy)
        for name in ("decoding", "n_ctx", "temperature"):
            field = pane.fields[name]
            field.clearFocus()
            _wheel(field, notches=1)
            centre = QPointF(field.width() / 2, field.height() / 2)
            assert received[-1] == field.mapTo(viewport, centre), name  # the viewport's point under the pointer
        window.close()
        qtbot.wait(50)
    finally:
        qInstallMessageHandler(previous)
    assert [text for text in messages if "parent hierarchy" in text] == []
