"""``ServerControl`` built from only what it drives (no ``MainWindow``, no model, no server started): what it
serves follows the model loaded and the window's last valid settings, and the server's states show in the status
bar's label, in what it says, and in the settings file."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel

from app.background import TaskSet
from app.gui.local_server import ServedModel
from app.gui.server_control import ServerControl
from app.gui.settings_store import SettingsStore
from inference.generation_config import recommended_sampling


class LoadedModel(QObject):
    """The model loader as ``ServerControl`` uses it: what is loaded (``info``), and ``ready``."""

    ready = Signal()

    def __init__(self, info):
        super().__init__()
        self.info = info

    def is_ready_for(self, _settings) -> bool:
        return self.info is not None


@pytest.fixture
def parts(qtbot, tmp_path):
    target = tmp_path / "Tiny-int4"
    target.mkdir()
    store = SettingsStore(tmp_path / "settings.json")
    chosen = SimpleNamespace(settings=store.load().with_values(n_ctx=1024))
    models = LoadedModel(SimpleNamespace(spec=SimpleNamespace(target_dir=target), max_position_embeddings=2048))
    label, said = QLabel(), []
    qtbot.addWidget(label)
    errors = []
    control = ServerControl(
        None, TaskSet(errors.append), models, lambda: chosen.settings, store, label,  # (None: never started here)
        lambda text, _ms: said.append(text),
    )  # fmt: skip
    yield SimpleNamespace(control=control, chosen=chosen, models=models, store=store, label=label, said=said, target=target)
    assert errors == []


def test_it_serves_the_model_loaded_with_the_last_valid_settings(parts):
    served = parts.control.served_model()
    valid = parts.chosen.settings.generation
    assert (served.model_id, served.max_context) == ("Tiny-int4", 2048)
    assert served.defaults == replace(valid, sampling=recommended_sampling(parts.target))  # the model's sampling

    parts.chosen.settings = parts.chosen.settings.with_values(n_ctx=4096)  # over the model's 2048: flagged
    assert parts.control.served_model().defaults.context == valid.context  # the last valid ones, never 4096

    parts.models.info = None  # no model loaded
    assert parts.control.served_model() == ServedModel()


def test_the_servers_states_show_in_the_label_and_the_settings_file(parts, tmp_path):
    server = parts.control.server
    server.state_changed.emit("failed", "port 8080 is in use")
    assert parts.said == ["Local server: port 8080 is in use"] and parts.label.isHidden()
    assert not parts.store.server.enabled  # a failed start leaves the choice as it was

    server.port = 8081
    server.state_changed.emit("serving", "http://127.0.0.1:8081/v1")
    assert not parts.label.isHidden() and parts.label.text() == "Serving on port 8081"
    assert parts.label.toolTip() == "http://127.0.0.1:8081/v1"
    reread = SettingsStore(tmp_path / "settings.json")
    reread.load()
    assert reread.server.enabled  # on again at the next start

    server.state_changed.emit("stopped", "Stopped")
    assert parts.label.isHidden() and not parts.store.server.enabled
