"""The target model picker at the top of the window: every installed model by a readable name, and the default
model at each bit-width SpecChat builds it at.

An entry is a choice ``(target_model, bits)`` as :class:`~app.gui.settings_store.AppSettings` holds it: the
default model's copies are ``("", bits)`` (a copy not built yet is listed too, and prepared when chosen, as the
bit-width setting does), any other model ``(its store name, bits unchanged)``. Choosing an entry emits
:attr:`ModelPicker.chosen`; showing the current settings (:meth:`ModelPicker.select`) emits nothing.

Last come the remote server last configured (choosing it emits ``remote_chosen``) and "Remote server
(OpenAI-compatible)…", which emits ``remote_requested`` (the window opens its dialog) and leaves the current entry
shown.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from inference.models.default_model import DEFAULT_MODEL_NAME, default_model_dir
from inference.models.store import SUPPORTED_BITS, ModelManifest, model_labels

from .elided_combo import ElidedComboBox
from .elided_label import ElidedLabel


class ModelPicker(QWidget):
    """A labelled combo box of target models, with the device they run on.

    Signals:
        chosen(target_model, bits): the user chose an entry (``target_model`` "" = the default model at ``bits``).
        remote_chosen(): the user chose the remote server configured; remote_requested(): the user asked for the
            remote-server dialog.

    Attributes:
        combo: the combo box (object name ``modelPicker``); each item's data is its key (:func:`choice_key`).
    """

    chosen = Signal(str, int)
    remote_chosen = Signal()
    remote_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._manifests: dict[tuple[str, int], ModelManifest] = {}
        self._bits = 4
        self._remote_label: str | None = None
        self._remote_active = False
        self._remote_problem: str | None = None
        self.combo = ElidedComboBox()
        self.combo.setObjectName("modelPicker")
        self.combo.setAccessibleName("Model")
        self.combo.setMinimumContentsLength(34)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.combo.setToolTip("The model that answers (Ctrl+L). Models > Manage models… adds more")
        self.combo.activated.connect(self._activated)
        label = QLabel("M&odel")
        label.setBuddy(self.combo)
        self.device = QLabel()
        self.device.setObjectName("hint")
        self.error = ElidedLabel()
        self.error.setObjectName("fieldError")
        self.error.setVisible(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.addWidget(label)
        layout.addWidget(self.combo)
        layout.addWidget(self.device)
        layout.addWidget(self.error, 1)
        layout.addStretch(0)  # the row stays left-aligned while the error label is hidden

    def set_models(self, models: list[ModelManifest], target_model: str, bits: int) -> None:
        """List ``models`` (``installed_models()``) and select the entry of ``(target_model, bits)``."""
        self._bits = bits
        labels = model_labels(models)
        defaults = {default_model_dir(b).name: b for b in SUPPORTED_BITS}
        self._manifests = {}
        self.combo.blockSignals(True)
        self.combo.clear()
        installed_defaults = {defaults[m.store_name]: m for m in models if m.store_name in defaults}
        for b in SUPPORTED_BITS:
            manifest = installed_defaults.get(b)
            if manifest is not None:
                self._add(labels[str(manifest.path)], ("", b), manifest)
            else:
                self.combo.addItem(f"{DEFAULT_MODEL_NAME} · {b}-bit · not built yet", choice_key("", b))
                tip = f"Built from the default model's download when chosen (a minute or two), then kept in {default_model_dir(b)}"
                self.combo.setItemData(self.combo.count() - 1, tip, 3)  # Qt.ToolTipRole
        for manifest in models:
            if manifest.store_name not in defaults:
                self._add(labels[str(manifest.path)], (manifest.store_name, 0), manifest)
        self._add_remote_items()
        self.combo.blockSignals(False)
        self.select(target_model, bits)

    def set_remote(self, label: str | None, active: bool, unreachable: str | None = None) -> None:
        """Offer the remote server configured (``label``, e.g. ``model on host:8000 (remote)``; None = none) and
        show it as the current entry when ``active``; ``unreachable``: why it did not answer the last time it was
        asked (its entry says "not reachable" and the tooltip why; choosing it asks again)."""
        self._remote_label, self._remote_active = label, active and bool(label)
        self._remote_problem = unreachable
        self.combo.blockSignals(True)
        for key in (REMOTE_KEY, REMOTE_DIALOG_KEY):
            index = self.combo.findData(key)
            if index >= 0:
                self.combo.removeItem(index)
        self._add_remote_items()
        self.combo.blockSignals(False)
        if self._remote_active:
            self.combo.setCurrentIndex(self.combo.findData(REMOTE_KEY))

    def _add_remote_items(self) -> None:
        if self._remote_label:
            problem = self._remote_problem
            self.combo.addItem(self._remote_label + (" · not reachable" if problem else ""), REMOTE_KEY)
            tip = f"Not reachable the last time it was asked: {problem}" if problem else "Replies come from this OpenAI-compatible server"
            self.combo.setItemData(self.combo.count() - 1, tip, 3)
        self.combo.addItem("Remote server (OpenAI-compatible)…", REMOTE_DIALOG_KEY)
        tip = "Chat with a model served elsewhere: OpenVINO Model Server, vLLM, llama-server, Ollama, specchat serve"
        self.combo.setItemData(self.combo.count() - 1, tip, 3)  # Qt.ToolTipRole

    def _add(self, text: str, choice: tuple[str, int], manifest: ModelManifest) -> None:
        self._manifests[choice] = manifest
        self.combo.addItem(text, choice_key(*choice))
        tip = f"{manifest.path}\ntokenizer {manifest.tokenizer_label} · {manifest.source or 'source unknown'}"
        self.combo.setItemData(self.combo.count() - 1, tip, 3)  # Qt.ToolTipRole

    def select(self, target_model: str, bits: int) -> None:
        """Show ``(target_model, bits)`` as the current entry (a folder outside the store, or a model no longer
        installed, is added by its name; while the remote server is the target, its entry stays shown)."""
        self._bits = bits
        if self._remote_active:
            self.combo.blockSignals(True)
            self.combo.setCurrentIndex(self.combo.findData(REMOTE_KEY))
            self.combo.blockSignals(False)
            self.flag(None)
            return
        index = self.combo.findData(choice_key(target_model, bits))
        if index < 0 and target_model:
            what = "folder" if Path(target_model).is_dir() else "not installed"
            index = self.combo.findData(REMOTE_KEY if self._remote_label else REMOTE_DIALOG_KEY)
            self.combo.insertItem(index, f"{Path(target_model).name} ({what})", choice_key(target_model, bits))
        self.combo.blockSignals(True)
        self.combo.setCurrentIndex(max(index, 0))
        self.combo.blockSignals(False)
        self.flag(None)

    def manifest(self, target_model: str, bits: int) -> ModelManifest | None:
        """The manifest of that entry (None for a default copy not built yet, or a folder outside the store)."""
        return self._manifests.get(("", bits) if not target_model else (target_model, 0))

    def label(self, target_model: str, bits: int) -> str:
        """The readable name of that entry as the picker shows it (its store name if it is not listed)."""
        index = self.combo.findData(choice_key(target_model, bits))
        if index >= 0:
            return self.combo.itemText(index)
        return target_model or f"{DEFAULT_MODEL_NAME} · {bits}-bit"

    def open_list(self) -> None:
        """Put the focus on the picker and open its list (Ctrl+L)."""
        self.combo.setFocus()
        self.combo.showPopup()

    def set_device(self, device: str | None) -> None:
        """Show the device the target runs on (the settings pane chooses it); None: no local device (a remote
        server's replies: its name says where they come from)."""
        self.device.setText(f"on {device}" if device else "")
        self.device.setVisible(bool(device))

    def flag(self, message: str | None) -> None:
        """Show (or clear, with None) why the chosen model could not be loaded."""
        self.error.setText(message or "")
        self.error.setVisible(bool(message))

    def choice(self, index: int) -> tuple[str, int]:
        """The ``(target_model, bits)`` of the entry at ``index``."""
        key = str(self.combo.itemData(index))
        if key.startswith(_DEFAULT_KEY):
            return "", int(key[len(_DEFAULT_KEY) :])
        return key, self._bits

    def _activated(self, index: int) -> None:
        key = self.combo.itemData(index)
        if key == REMOTE_DIALOG_KEY:
            if self._remote_active:  # the entry shown stays the current choice until the dialog chose
                self.combo.setCurrentIndex(self.combo.findData(REMOTE_KEY))
            self.remote_requested.emit()
        elif key == REMOTE_KEY:
            self.remote_chosen.emit()
        else:
            self.chosen.emit(*self.choice(index))


_DEFAULT_KEY = "default-model:"
#: Item data of the remote server configured, and of the entry that opens the remote-server dialog (no store name or
#: default-model key is either: store names hold no colon).
REMOTE_KEY = "remote:server"
REMOTE_DIALOG_KEY = "remote:dialog"


def choice_key(target_model: str, bits: int) -> str:
    """The item data of a choice: ``target_model`` (a store name or a folder), or ``"default-model:<bits>"`` for
    the default model (a store name never holds a colon)."""
    return target_model or f"{_DEFAULT_KEY}{bits}"
