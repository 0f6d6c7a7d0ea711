"""A remote server whose model id is a file path (llama.cpp's servers name their model by the file given with -m):
the window names it by its file name, sends the whole id, and takes chats answered before under the whole path as
answered by it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gui_helpers import send_and_wait
from remote_stub import REPLY, RemoteStub

PATH = "/srv/models/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def test_a_model_served_by_its_path_is_named_by_its_file_name(qtbot, make_window, stub, no_user_keyring):
    window = make_window(wait_model=False)
    url = stub.url("any-name")
    host = url.split("/")[2]
    db = window.db
    old = db.create_conversation("Before")  # answered when the label held the whole path
    db.add_message(old, "user", "Hi")
    label_then = f"{PATH} on {host} (remote)"
    db.add_message(old, "assistant", "Hello", stats={"model": label_then, "target_model": label_then})
    window.conversations.refresh()
    window.choice.apply(replace(window.settings, remote_url=url, remote_model=PATH, use_remote=True))
    label = f"SmolLM2-135M-Instruct.Q4_1.gguf on {host} (remote)"
    assert window.model_picker.combo.currentText() == label and window.model_label.text() == label
    window.conversations.open(old)
    assert window.chat_view.conversation_id == old
    assert not window.model_notice.isVisible()  # the server chosen now answered it
    final = send_and_wait(qtbot, window, "Say hello")
    assert (final.content, final.stats["target_model"]) == (REPLY, label)
    assert stub.requests[-1][1]["model"] == PATH  # the server is asked by its own id
