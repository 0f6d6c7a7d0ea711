"""The window's side of its local server (Server > Local server…): what it serves, its switch and dialog, its line in
the status bar, and its settings and key kept for the next start.

:class:`~app.gui.local_server.LocalServer` runs the server; this controller tells it what the window has loaded
(the window's decoding, rolling context and K are the defaults of requests that leave them out, and so is the model's
recommended sampling, as ``specchat serve`` without sampling flags), starts it again with the model when it was on at the last close
(``SettingsStore.server``), and keeps the key it served with (``app.backends.remote_keys``, never the settings file).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QWidget

from inference.generation_config import recommended_sampling
from inference.settings import SettingError

from ..backends.remote_keys import LOCAL_SERVER, load_api_key, save_api_key
from ..backends.worker import InferenceWorker
from ..background import TaskSet
from .local_server import LocalServer, ServedModel
from .model_loader import ModelLoader
from .settings_store import AppSettings, SettingsStore

logger = logging.getLogger(__name__)


class ServerControl(QObject):
    """Connects the window to its :class:`LocalServer` (see the module doc).

    Args:
        worker: the inference thread the server shares; tasks: where its coroutines run.
        models: the window's model loader (what is loaded, and when it is ready).
        settings: returns the settings the window runs with now.
        store: the settings file (the server's settings, kept for the next start).
        server_label: the status bar's line that says where the server serves.
        say: ``say(text, milliseconds)`` shows a line in the status bar.
        parent: the Qt parent, and the parent of the Local server dialog.

    Attributes:
        server: the local server; dialog: its dialog once opened.
    """

    def __init__(
        self,
        worker: InferenceWorker,
        tasks: TaskSet,
        models: ModelLoader,
        settings: Callable[[], AppSettings],
        store: SettingsStore,
        server_label: QLabel,
        say: Callable[[str, int], None],
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self._parent, self._models, self._settings, self.store = parent, models, settings, store
        self._label, self._say = server_label, say
        self.server = LocalServer(worker, tasks, self.served_model, parent=self)
        self.dialog = None
        self._valid = AppSettings().generation  # the last valid settings of the window, served while its are not
        self.server.state_changed.connect(self._state_changed)
        models.ready.connect(self.server.model_changed)
        if store.server.enabled:  # it was on at the last close: on again once the model is loaded
            models.ready.connect(self._start_saved)

    def served_model(self) -> ServedModel:
        """The model loaded now, as the local server serves it: with the window's settings when they are valid,
        else with its last valid ones (at first the defaults), so that a value the pane flags (one from the settings
        file) never reaches a request."""
        info = self._models.info
        if info is None:
            return ServedModel()
        generation = self._settings().generation
        try:
            generation.validate(info.max_position_embeddings)
            self._valid = generation
        except SettingError:
            pass  # flagged in the pane: the server keeps the last valid settings
        defaults = replace(self._valid, sampling=recommended_sampling(info.spec.target_dir))
        return ServedModel(info.spec.target_dir.name, info.max_position_embeddings, defaults)

    def settings_edited(self, _settings) -> None:
        """The settings pane's settings changed (connected after :meth:`ModelChoice.edited`, which applies them):
        the server serves them now when the model loaded is the one they ask for."""
        if self._models.is_ready_for(self._settings()):  # (else the reload's ``ready`` updates the server)
            self.server.model_changed()

    def _start_saved(self) -> None:
        self._models.ready.disconnect(self._start_saved)
        saved = self.store.server
        self.server.start(saved.port, load_api_key(LOCAL_SERVER), saved.allow_other_computers)

    def show_dialog(self) -> None:
        """Open the Local server dialog (not modal)."""
        from .widgets.server_dialog import LocalServerDialog

        if self.dialog is None:
            self.dialog = LocalServerDialog(self.server, self.store.server, load_api_key(LOCAL_SERVER), self._parent)
            self.dialog.settings_changed.connect(
                lambda chosen: self._save(port=chosen.port, allow_other_computers=chosen.allow_other_computers)
            )
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()

    def _state_changed(self, state: str, text: str) -> None:
        label = self._label
        label.setText(f"Serving on port {self.server.port}")
        label.setToolTip(text)
        label.setVisible(state == "serving")
        if state == "failed":
            self._say(f"Local server: {text}", 10000)
        if state in ("serving", "stopped") and self.store.server.enabled != (state == "serving"):
            self._save(enabled=state == "serving")  # a failed start leaves the choice as it was
        if state == "serving":  # the key it serves with is the one it starts with next time
            try:
                save_api_key(LOCAL_SERVER, self.server.api_key or "")
            except OSError as error:
                self._say(f"Local server: could not store its API key ({error}): enter it again after a restart", 15000)

    def _save(self, **changes) -> None:
        try:
            self.store.save_server(replace(self.store.server, **changes))
        except OSError as error:
            logger.warning("could not save the local server's settings: %s", error)
