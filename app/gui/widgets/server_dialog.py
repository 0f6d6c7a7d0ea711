"""The Local server dialog (Server > Local server…): the switch, port, API key, "allow other computers", the URL to
copy and a status line.

``LocalServerDialog(server, settings, api_key, parent)`` drives a :class:`~app.gui.local_server.LocalServer` and follows its
state: the switch shows whether it serves, the port, key and network choice are editable only while it does not,
the URL (with its Copy URL button, which says "Copied" for a moment after a copy) is there while it serves, and
the status line says what happens or went wrong.
``settings_changed(ServerSettings)`` is emitted when the port or the network choice changes (the window saves it;
whether the server runs, and the key it was started with, are the window's to keep). Not modal; its Close button
(as Esc) only hides it: a server that serves goes on serving.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..local_server import LocalServer
from ..server_settings import ServerSettings
from .copy_feedback import CopiedFeedback


class LocalServerDialog(QDialog):
    """The local server's controls.

    Attributes:
        switch, port, api_key, allow_other_computers, url, copy_button, status, buttons: its widgets (``buttons``
        holds Close).

    Signals:
        settings_changed(ServerSettings): the port or the network choice changed.
    """

    settings_changed = Signal(object)

    def __init__(self, server: LocalServer, settings: ServerSettings, api_key: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("localServerDialog")
        self.setWindowTitle("Local server")
        self.setMinimumWidth(480)  # the key's hint and a network URL fit
        self.server = server
        self._settings = settings

        self.switch = QCheckBox("Serve the loaded model (OpenAI-compatible API)")
        self.switch.setObjectName("serverSwitch")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(settings.port)
        self.api_key = QLineEdit()
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("optional on this computer; clients send it as a Bearer token")
        self.api_key.setText(api_key)
        self.api_key.setToolTip(
            "Kept in the system keyring (or a file only you can read), never in the settings file; empty: no key"
        )
        self.allow_other_computers = QCheckBox("Allow other computers (needs an API key)")
        self.allow_other_computers.setChecked(settings.allow_other_computers)
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setObjectName("serverUrl")
        self.copy_button = QPushButton("Copy URL")
        self.copy_button.setToolTip("Copy the base URL to the clipboard")
        self.copy_button.clicked.connect(self.copy_url)
        self._copied = CopiedFeedback(self.copy_button)
        url_row = QHBoxLayout()
        url_row.addWidget(self.url, 1)
        url_row.addWidget(self.copy_button)
        self.status = QLabel()
        self.status.setObjectName("serverStatus")
        self.status.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self.reject)

        form = QFormLayout()
        form.addRow("Port", self.port)
        form.addRow("API key", self.api_key)
        form.addRow("", self.allow_other_computers)
        url_label = QLabel("Base URL")
        url_label.setBuddy(self.url)  # (a row of a layout gets no buddy)
        form.addRow(url_label, url_row)
        layout = QVBoxLayout(self)
        layout.addWidget(self.switch)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)

        self.switch.toggled.connect(self._switched)
        self.port.valueChanged.connect(lambda port: self._keep(port=port))
        self.allow_other_computers.toggled.connect(lambda allowed: self._keep(allow_other_computers=allowed))
        server.state_changed.connect(self._show_state)
        self._show_state(server.state, server.text)

    def copy_url(self) -> None:
        """Put the base URL on the clipboard; the Copy URL button says "Copied" for a moment."""
        QGuiApplication.clipboard().setText(self.url.text())
        self._copied.flash()

    def _switched(self, on: bool) -> None:
        if on:
            self.server.start(self.port.value(), self.api_key.text(), self.allow_other_computers.isChecked())
        else:
            self.server.stop()

    def _keep(self, **changes) -> None:
        self._settings = replace(self._settings, **changes)
        self.settings_changed.emit(self._settings)

    def _show_state(self, state: str, text: str) -> None:
        on = state in ("starting", "serving")
        if self.switch.isChecked() != on:
            self.switch.blockSignals(True)  # following the server is not switching it
            self.switch.setChecked(on)
            self.switch.blockSignals(False)
        self.switch.setEnabled(state != "stopping")
        for field in (self.port, self.api_key, self.allow_other_computers):
            field.setEnabled(state in ("stopped", "failed"))
        self.url.setText(self.server.url)
        self.copy_button.setEnabled(bool(self.server.url))
        self.status.setText(text)
