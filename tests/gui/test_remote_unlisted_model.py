"""The remote server dialog's OK with a model name the server does not list: said once, with the names it lists,
before it is taken (llama-server and llama-cpp-python answer any name with the model they serve)."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialogButtonBox
from remote_stub import MODEL, RemoteStub

from app.gui.widgets.remote_dialog import RemoteServerDialog


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def test_ok_with_a_model_the_server_does_not_list_says_so_once(qtbot, make_window, stub, no_user_keyring):
    """Newcomer trial: against llama_cpp.server, the model typed as "nonexistent" was taken without a word, replies
    came from the model it serves, and every footer named "nonexistent on 127.0.0.1:8088 (remote)"."""
    window = make_window(wait_model=False)
    dialog = RemoteServerDialog(window, window.tasks.spawn, stub.url("any-name"), "", "", lambda url: "")
    qtbot.addWidget(dialog)
    dialog.show()
    host = stub.url("ok").split("/")[2]
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    dialog.models.setEditText("nonexistent")
    ok.click()  # OK checks the server first: it lists its models
    said = (f"{host} does not list 'nonexistent' (it lists: {MODEL}): choose one of its models, or press OK again "
            "to ask for this name anyway (llama-server and llama-cpp-python answer any name with the model they "
            "serve)")  # fmt: skip
    qtbot.waitUntil(lambda: dialog.error.text() == said, timeout=10_000)
    assert dialog.isVisible() and ok.isEnabled()
    ok.click()  # asked for anyway
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    assert dialog.result() == dialog.DialogCode.Accepted and dialog.choice().model == "nonexistent"

    listed = RemoteServerDialog(window, window.tasks.spawn, stub.url("ok"), "", "", lambda url: "")
    qtbot.addWidget(listed)
    listed.show()
    listed.fetch_button.click()
    qtbot.waitUntil(lambda: listed.models.count() == 1, timeout=10_000)
    listed.buttons.button(QDialogButtonBox.StandardButton.Ok).click()  # a model it lists: taken at once
    qtbot.waitUntil(lambda: not listed.isVisible(), timeout=5000)
    assert listed.choice().model == MODEL
