"""The window's side of its local server (Server > Local server…): what it serves, its switch and dialog, its line in
the status bar, and its settings and key kept for the next start.

:class:`~app.gui.local_server.LocalServer` runs the server; this controller tells it what the window has loaded
(the window's decoding, rolling context and K are the defaults of requests that leave them out, and so is the model's
recommended sampling, as ``specchat serve`` without sampling flags), starts it again with the model when it was on at the last close
(``SettingsStore.server``), and keeps the key it served with (``app.backends.remote_keys``, never the settings file).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from PySide6.QtCore import QObject

from inference.generation_config import recommended_sampling
from inference.settings import SettingError

from ..backends.remote_keys import LOCAL_SERVER, load_api_key, save_api_key
from .local_server import LocalServer, ServedModel
from .settings_store import AppSettings

logger = logging.getLogger(__name__)


class ServerControl(QObject):
    """Connects the window to its :class:`LocalServer` (see the module doc).

    Args:
        window: the main window (its ``models``, ``settings``, ``server_label``, ``settings_pane``); store: the
            settings file.

    Attributes:
        server: the local server; dialog: its dialog once opened.
    """

    def __init__(self, window, store):
        super().__init__(window)
        self.window = window
        self.store = store
        self.server = LocalServer(window.worker, window.tasks, self.served_model, parent=self)
        self.dialog = None
        self._valid = AppSettings().generation  # the last valid settings of the window, served while its are not
        self.server.state_changed.connect(self._state_changed)
        window.models.ready.connect(self.server.model_changed)
        window.settings_pane.settings_changed.connect(self._settings_changed)  # after the window's own handler
        if store.server.enabled:  # it was on at the last close: on again once the model is loaded
            window.models.ready.connect(self._start_saved)

    def served_model(self) -> ServedModel:
        """The model loaded now, as the local server serves it: with the window's settings when they are valid,
        else with its last valid ones (at first the defaults), so that a value the pane flags (one from the settings
        file) never reaches a request."""
        info = self.window.models.info
        if info is None:
            return ServedModel()
        try:
            self.window.settings.generation.validate(info.max_position_embeddings)
            self._valid = self.window.settings.generation
        except SettingError:
            pass  # flagged in the pane: the server keeps the last valid settings
        defaults = replace(self._valid, sampling=recommended_sampling(info.spec.target_dir))
        return ServedModel(info.spec.target_dir.name, info.max_position_embeddings, defaults)

    def _settings_changed(self, _settings) -> None:
        if self.window.models.is_ready_for(self.window.settings):  # (else the reload's ``ready`` updates the server)
            self.server.model_changed()

    def _start_saved(self) -> None:
        self.window.models.ready.disconnect(self._start_saved)
        saved = self.store.server
        self.server.start(saved.port, load_api_key(LOCAL_SERVER), saved.allow_other_computers)

    def show_dialog(self) -> None:
        """Open the Local server dialog (not modal)."""
        from .widgets.server_dialog import LocalServerDialog

        if self.dialog is None:
            self.dialog = LocalServerDialog(self.server, self.store.server, load_api_key(LOCAL_SERVER), self.window)
            self.dialog.settings_changed.connect(
                lambda chosen: self._save(port=chosen.port, allow_other_computers=chosen.allow_other_computers)
            )
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()

    def _state_changed(self, state: str, text: str) -> None:
        label, status = self.window.server_label, self.window.statusBar()
        label.setText(f"Serving on port {self.server.port}")
        label.setToolTip(text)
        label.setVisible(state == "serving")
        if state == "failed":
            status.showMessage(f"Local server: {text}", 10000)
        if state in ("serving", "stopped") and self.store.server.enabled != (state == "serving"):
            self._save(enabled=state == "serving")  # a failed start leaves the choice as it was
        if state == "serving":  # the key it serves with is the one it starts with next time
            try:
                save_api_key(LOCAL_SERVER, self.server.api_key or "")
            except OSError as error:
                status.showMessage(f"Local server: could not store its API key ({error}): enter it again after a "
                                   "restart", 15000)  # fmt: skip

    def _save(self, **changes) -> None:
        try:
            self.store.save_server(replace(self.store.server, **changes))
        except OSError as error:
            logger.warning("could not save the local server's settings: %s", error)
