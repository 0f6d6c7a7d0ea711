"""Screen readers (Orca, NVDA) read each control of the window and of its dialogs by its accessible name: every
interactive control Qt's accessibility exposes has one, and every icon-only button a tooltip.

The name checked is the one Qt's accessibility gives (``QAccessibleInterface.text(Name)``). A combo box's name on
Linux is its current item (Orca reads the label through the "labelled by" relation; NVDA on Windows reads the
accessible name), so a combo box must have an accessible name or a label whose buddy it is. Widgets Qt keeps out
of the accessibility tree (a spin box's inner line edit, a table's header widgets: the spin box, the table's
header cells stand for them) are not checked.
"""

from __future__ import annotations

from conftest import FAST
from gui_helpers import find_dialog
from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QPlainTextEdit,
    QScrollArea,
    QSlider,
    QTextEdit,
    QToolButton,
    QWidget,
)

#: The controls one reaches or reads with the keyboard (the chat view and the settings pane are scroll areas).
INTERACTIVE = (QAbstractButton, QLineEdit, QPlainTextEdit, QTextEdit, QComboBox, QAbstractSpinBox, QSlider,
               QAbstractItemView, QScrollArea)  # fmt: skip


def in_accessibility_tree(top: QWidget, widget: QWidget) -> bool:
    """Whether ``widget`` is reachable from ``top`` in Qt's accessibility tree (each interface among its parent's
    children; an item view's children are its cells, never widgets)."""
    interface = QAccessible.queryAccessibleInterface(widget)
    while interface is not None and interface.object() is not top:
        parent = interface.parent()
        if parent is None or isinstance(parent.object(), QAbstractItemView) or parent.indexOfChild(interface) < 0:
            return False
        interface = parent
    return interface is not None


def is_icon_only(widget: QWidget) -> bool:
    """Whether ``widget`` is a button that shows an icon and no words."""
    if not isinstance(widget, QAbstractButton):
        return False
    icon_style = isinstance(widget, QToolButton) and widget.toolButtonStyle() == Qt.ToolButtonStyle.ToolButtonIconOnly
    return not widget.text() or (icon_style and not widget.icon().isNull())


def name(widget: QWidget) -> str:
    """What Qt's accessibility gives a screen reader as ``widget``'s name."""
    return QAccessible.queryAccessibleInterface(widget).text(QAccessible.Text.Name)


def describe(widget: QWidget) -> str:
    owners = []
    parent = widget.parentWidget()
    while parent is not None and len(owners) < 3:
        owners.append(parent.objectName() or type(parent).__name__)
        parent = parent.parentWidget()
    return f"{type(widget).__name__} {widget.objectName()!r} in {'/'.join(owners)}"


def unnamed_controls(top: QWidget) -> list[str]:
    """The visible interactive controls of ``top`` a screen reader reads without a name, and the icon-only buttons
    without a tooltip."""
    missing = []
    for widget in [top, *top.findChildren(QWidget)]:
        if not isinstance(widget, INTERACTIVE) or not widget.isVisibleTo(top) or not in_accessibility_tree(top, widget):
            continue
        interface = QAccessible.queryAccessibleInterface(widget)
        if isinstance(widget, QComboBox):
            labels = [label.text(QAccessible.Text.Name) for label, _ in interface.relations(QAccessible.Relation.Label)]
            named = bool(widget.accessibleName().strip() or any(label.strip() for label in labels))
        else:
            named = bool(name(widget).strip())
        if not named:
            missing.append(f"no name: {describe(widget)}")
        if is_icon_only(widget) and not widget.toolTip():
            missing.append(f"icon-only, no tooltip: {describe(widget)}")
    return missing


def test_every_control_of_the_window_has_an_accessible_name(qtbot, make_window):
    window = make_window(FAST, start=False)
    chat = window.db.create_conversation("Hello")
    window.db.add_message(chat, "user", "Hello")
    window.db.add_message(chat, "assistant", "Here:\n\n```python\nprint(1)\n```\n")
    window.conversations.refresh()
    window.conversations.open(chat)
    window.conversation_list.search.setText("Hel")  # (its clear button shows)
    pane = window.settings_pane
    for toggle in ("advancedToggle", "moreSampling"):
        pane.findChild(QAbstractButton, toggle).setChecked(True)  # the folded fields show
    qtbot.waitUntil(lambda: any(button.isVisible() for button in window.findChildren(QWidget, "copyCode")))
    assert window.findChild(QWidget, "setting_target_device").isVisibleTo(window)
    assert window.findChild(QWidget, "setting_seed").isVisibleTo(window)
    missing = unnamed_controls(window)
    assert missing == [], "\n".join(missing)
    clear_button = window.conversation_list.search.findChild(QToolButton)
    assert (name(clear_button), clear_button.toolTip()) == ("Clear search", "Clear the search (Esc)")


def test_every_control_of_the_dialogs_has_an_accessible_name(qtbot, make_window):
    from app.gui.widgets.remote_dialog import RemoteServerDialog

    window = make_window(FAST, start=False)
    missing = {}

    window.models_action.trigger()
    models = window.choice.models_dialog
    qtbot.waitExposed(models)
    for index in range(models.tabs.count()):
        models.tabs.setCurrentIndex(index)
        missing[f"Models: {models.tabs.tabText(index)}"] = unnamed_controls(models)
    names = {"installed": name(models.table), "pairs": name(models.catalogue_table)}
    models.close()

    window.local_server_action.trigger()
    missing["Local server"] = unnamed_controls(window.server_control.dialog)
    names["local server URL"] = name(window.server_control.dialog.url)
    window.server_control.dialog.close()

    window.remote_server_action.trigger()
    qtbot.waitUntil(lambda: any(d.isVisible() for d in window.findChildren(RemoteServerDialog)), timeout=5000)
    remote = next(d for d in window.findChildren(RemoteServerDialog) if d.isVisible())
    missing["Remote server"] = unnamed_controls(remote)
    remote.close()

    for action, dialog_name in ((window.shortcuts_action, "shortcuts"), (window.about_action, "about")):
        action.trigger()
        qtbot.waitUntil(lambda n=dialog_name: find_dialog(window, n) is not None, timeout=3000)
        missing[dialog_name] = unnamed_controls(find_dialog(window, dialog_name))
        find_dialog(window, dialog_name).close()

    missing = {dialog: controls for dialog, controls in missing.items() if controls}
    assert missing == {}, "\n".join(f"{dialog}: {line}" for dialog, lines in missing.items() for line in lines)
    assert names == {"installed": "Installed models", "pairs": "Recommended pairs", "local server URL": "Base URL"}
